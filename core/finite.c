#include "core/finite.h"

#include <math.h>
#include <string.h>

enum { CHUNK = 256 };

/* 1 when the chunk holds a value whose exponent bits are all set (NaN, Inf). */
static uint32_t chunk_bad(const float *x, int64_t m)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < m; i++) {
        uint32_t b;
        memcpy(&b, x + i, sizeof b);
        bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
    }
    return bad;
}

int64_t dsq_find_nonfinite(const float *x, int64_t n)
{
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (!chunk_bad(x + i0, m)) continue;
        for (int64_t i = 0; i < m; i++)
            if (!isfinite(x[i0 + i])) return i0 + i;
    }
    return -1;
}
