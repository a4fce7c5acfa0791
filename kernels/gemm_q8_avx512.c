/* The AVX512-VNNI kernel of the block-scaled int8 GEMM (kernels/gemm_q8.h):
 * tiles of up to 6 tokens x one 32-row panel. Per block, 12 int32
 * accumulators start at the tokens' offset corrections, take 8 vpdpbusd
 * steps each (the panel's unsigned weight bytes against 4 activation bytes
 * broadcast from memory), and are then added into 12 F32 accumulators by one
 * FMA with the scale product, as the reference does.
 * Only called when dsq_gemm_q8_simd(). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f -mavx512bw -mavx512vnni (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_q8.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define MR 6 /* tokens per tile: 12 + 12 accumulators, 2 weight vectors, 2 scale vectors */
#define PANEL_BLOCK_BYTES (8 * DSQ_GEMM_Q8_NR * 4 + DSQ_GEMM_Q8_NR * 4)
#define INLINE static inline __attribute__((always_inline))

static int32_t load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* y for mr tokens (a compile-time constant after inlining) x the panel's rows
 * under masks m0 (rows 0-15) and m1 (rows 16-31). */
INLINE void tile(int mr, const uint8_t *panel, int64_t nb, const int8_t *A, int64_t lda, const float *da,
                 const int32_t *sa, int64_t ldd, float *y, int64_t ldy, __mmask16 m0, __mmask16 m1)
{
    __m512 f[MR][2];
    for (int t = 0; t < mr; t++) f[t][0] = f[t][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = panel + b * PANEL_BLOCK_BYTES;
        __m512i acc[MR][2];
        for (int t = 0; t < mr; t++) acc[t][0] = acc[t][1] = _mm512_set1_epi32(-128 * sa[t * ldd + b]);
        const int8_t *ab = A + b * DSQ_GEMM_Q8_BLOCK;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512i w0 = _mm512_loadu_si512(pb + j * 128), w1 = _mm512_loadu_si512(pb + j * 128 + 64);
            for (int t = 0; t < mr; t++) {
                __m512i a = _mm512_set1_epi32(load4(ab + t * lda + j * 4));
                acc[t][0] = _mm512_dpbusd_epi32(acc[t][0], w0, a);
                acc[t][1] = _mm512_dpbusd_epi32(acc[t][1], w1, a);
            }
        }
        __m512 s0 = _mm512_loadu_ps(pb + 1024), s1 = _mm512_loadu_ps(pb + 1024 + 64);
        for (int t = 0; t < mr; t++) {
            __m512 d = _mm512_set1_ps(da[t * ldd + b]);
            f[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][0]), _mm512_mul_ps(s0, d), f[t][0]);
            f[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][1]), _mm512_mul_ps(s1, d), f[t][1]);
        }
    }
    for (int t = 0; t < mr; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, m0, f[t][0]);
        _mm512_mask_storeu_ps(y + t * ldy + 16, m1, f[t][1]);
    }
}

void dsq_gemm_q8_avx512(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da,
                        const int32_t *sa, int64_t ldd, const void *P, float *y, int64_t ldy)
{
    int64_t nb = k / DSQ_GEMM_Q8_BLOCK;
    for (int64_t p0 = 0; p0 < nr; p0 += DSQ_GEMM_Q8_NR) {
        const uint8_t *panel = (const uint8_t *)P + (size_t)(p0 / DSQ_GEMM_Q8_NR) * (size_t)nb * PANEL_BLOCK_BYTES;
        int64_t rows = nr - p0 < DSQ_GEMM_Q8_NR ? nr - p0 : DSQ_GEMM_Q8_NR;
        __mmask16 m0 = rows >= 16 ? 0xFFFF : (__mmask16)((1u << rows) - 1);
        __mmask16 m1 = rows <= 16 ? 0 : rows >= 32 ? 0xFFFF : (__mmask16)((1u << (rows - 16)) - 1);
        for (int64_t t0 = 0; t0 < m; t0 += MR) {
            const int8_t *At = A + t0 * lda;
            const float *dt = da + t0 * ldd;
            const int32_t *st = sa + t0 * ldd;
            float *yt = y + t0 * ldy + p0;
            switch (m - t0 < MR ? m - t0 : MR) {
            case 1: tile(1, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            case 2: tile(2, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            case 3: tile(3, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            case 4: tile(4, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            case 5: tile(5, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            default: tile(6, panel, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
            }
        }
    }
}

#else
typedef int dsq_gemm_q8_avx512_unused; /* not an x86-64 GCC build: dsq_gemm_q8_simd() is false */
#endif
