/* The one string map: byte strings (ptr, len; NUL bytes allowed) to
 * non-negative int64 values (ids, indexes), open addressing over FNV-1a,
 * keys borrowed (they must outlive the map). The first value put for a key
 * stays, as with a Python dict built by setdefault or C++'s emplace; callers
 * that want the last put in reverse order. A zeroed struct is an empty map. */
#ifndef DSQ_CORE_STRMAP_H
#define DSQ_CORE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct dsq_strmap_entry {
    const char *key;
    uint32_t len, hash;
    int64_t val;
} dsq_strmap_entry;

typedef struct dsq_strmap {
    uint32_t *slots; /* entry index + 1, 0 = empty; mask + 1 of them */
    size_t mask;
    dsq_strmap_entry *e;
    size_t n, cap; /* entries held, room for */
} dsq_strmap;

/* Room for n entries in all, so that many puts neither fail nor rehash. */
dsq_status dsq_strmap_reserve(dsq_strmap *m, size_t n);

/* Adds key[0..len) -> val (val >= 0) unless the key is there. *prev (may be
 * NULL) gets the value the key already had, or -1 when this put added it.
 * Fails only for lack of memory, or a key of 4 GiB or more. */
dsq_status dsq_strmap_put(dsq_strmap *m, const char *key, size_t len, int64_t val, int64_t *prev);

/* The key's value, or -1 when absent (no message). */
int64_t dsq_strmap_get(const dsq_strmap *m, const char *key, size_t len);

void dsq_strmap_free(dsq_strmap *m);

#endif
