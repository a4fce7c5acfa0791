/* Checked arithmetic for sizes, counts and offsets: every product or sum
 * of numbers a file, a config or a request claims goes through these, so
 * an overflow is a refusal instead of a wrapped length (tests/test_dtype.c
 * holds them to their edges). Each answers false on overflow, leaving
 * *out unspecified, and records no message: the caller names the field. */
#ifndef DSQ_CORE_CHECKED_H
#define DSQ_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool dsq_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool dsq_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool dsq_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Bytes of n items of size bytes each, when that fits a size_t (an allocation). */
static inline bool dsq_array_bytes(uint64_t n, size_t size, size_t *out)
{
    uint64_t b;
    if (!dsq_mul_u64(n, (uint64_t)size, &b) || b > SIZE_MAX) return false;
    *out = (size_t)b;
    return true;
}

#endif
