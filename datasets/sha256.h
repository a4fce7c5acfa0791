/* SHA-256 (FIPS 180-4), to check data files against the registry's hashes.
 * Incremental: init, update any number of times, final. */
#ifndef DSQ_DATASETS_SHA256_H
#define DSQ_DATASETS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} dsq_sha256;

void dsq_sha256_init(dsq_sha256 *s);
void dsq_sha256_update(dsq_sha256 *s, const void *data, size_t n);
void dsq_sha256_final(dsq_sha256 *s, uint8_t digest[32]);

/* One shot, as 64 lowercase hex digits plus NUL. */
void dsq_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
