/* The AVX512-VNNI kernel of the block-scaled int8 GEMM (kernels/gemm_q8.h):
 * tiles of up to 6 tokens x one 32-row panel, or (decode: one or two tokens)
 * one token x four panels. Per block, the int32 accumulators start at the
 * tokens' offset corrections, take 8 vpdpbusd steps each (the panel's
 * unsigned weight bytes against 4 activation bytes broadcast), and are then
 * added into as many F32 accumulators by one FMA with the scale product, as
 * the reference does.
 * Only called when dsq_gemm_q8_simd(). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f -mavx512bw -mavx512vnni (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_q8.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define MR 6 /* tokens per tile at most */
#define NP 4 /* panels per tile at most */
#define PANEL_BLOCK_BYTES (8 * DSQ_GEMM_Q8_NR * 4 + DSQ_GEMM_Q8_NR * 4)
#define INLINE static inline __attribute__((always_inline))

static int32_t load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* y for mr tokens x np panels (compile-time constants after inlining, mr * np
 * <= 6 so that the 2 * mr * np int32 chains and as many F32 sums fit the 32
 * registers) from `panel`, the next panels pstride bytes apart. Each vpdpbusd
 * chain is 8 steps long per block, so a decode step (one token) takes 4 panels
 * at once to keep 8 chains in flight. Masks m0/m1: the rows kept of the
 * first panel's two halves (np > 1 only on whole panels). */
INLINE void tile(int mr, int np, const uint8_t *panel, size_t pstride, int64_t nb, const int8_t *A, int64_t lda,
                 const float *da, const int32_t *sa, int64_t ldd, float *y, int64_t ldy, __mmask16 m0, __mmask16 m1)
{
    __m512 f[MR][2 * NP];
    for (int t = 0; t < mr; t++)
        for (int q = 0; q < 2 * np; q++) f[t][q] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = panel + b * PANEL_BLOCK_BYTES;
        __m512i acc[MR][2 * NP];
        for (int t = 0; t < mr; t++) {
            __m512i c = _mm512_set1_epi32(-128 * sa[t * ldd + b]);
            for (int q = 0; q < 2 * np; q++) acc[t][q] = c;
        }
        const int8_t *ab = A + b * DSQ_GEMM_Q8_BLOCK;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512i a[MR];
            for (int t = 0; t < mr; t++) a[t] = _mm512_set1_epi32(load4(ab + t * lda + j * 4));
            for (int p = 0; p < np; p++) {
                const uint8_t *w = pb + p * pstride + j * 128;
                __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);
                for (int t = 0; t < mr; t++) {
                    acc[t][2 * p] = _mm512_dpbusd_epi32(acc[t][2 * p], w0, a[t]);
                    acc[t][2 * p + 1] = _mm512_dpbusd_epi32(acc[t][2 * p + 1], w1, a[t]);
                }
            }
        }
        for (int p = 0; p < np; p++) {
            __m512 s0 = _mm512_loadu_ps(pb + p * pstride + 1024), s1 = _mm512_loadu_ps(pb + p * pstride + 1024 + 64);
            for (int t = 0; t < mr; t++) {
                __m512 d = _mm512_set1_ps(da[t * ldd + b]);
                f[t][2 * p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][2 * p]), _mm512_mul_ps(s0, d), f[t][2 * p]);
                f[t][2 * p + 1] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][2 * p + 1]), _mm512_mul_ps(s1, d), f[t][2 * p + 1]);
            }
        }
    }
    for (int t = 0; t < mr; t++)
        for (int p = 0; p < np; p++) {
            _mm512_mask_storeu_ps(y + t * ldy + p * 32, p ? 0xFFFF : m0, f[t][2 * p]);
            _mm512_mask_storeu_ps(y + t * ldy + p * 32 + 16, p ? 0xFFFF : m1, f[t][2 * p + 1]);
        }
}

/* Tokens [0, m) against one panel (np = 1) or four whole panels (np = 4). */
INLINE void tokens(int np, const uint8_t *panel, size_t pstride, int64_t nb, int64_t m, const int8_t *A, int64_t lda,
                   const float *da, const int32_t *sa, int64_t ldd, float *y, int64_t ldy, __mmask16 m0, __mmask16 m1)
{
    int64_t t0 = 0;
    if (np == 4) { /* one token per tile: 8 chains */
        for (; t0 < m; t0++)
            tile(1, 4, panel, pstride, nb, A + t0 * lda, lda, da + t0 * ldd, sa + t0 * ldd, ldd, y + t0 * ldy, ldy, m0,
                 m1);
        return;
    }
    for (; t0 < m; t0 += MR) {
        const int8_t *At = A + t0 * lda;
        const float *dt = da + t0 * ldd;
        const int32_t *st = sa + t0 * ldd;
        float *yt = y + t0 * ldy;
        switch (m - t0 < MR ? m - t0 : MR) {
        case 1: tile(1, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        case 2: tile(2, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        case 3: tile(3, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        case 4: tile(4, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        case 5: tile(5, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        default: tile(6, 1, panel, pstride, nb, At, lda, dt, st, ldd, yt, ldy, m0, m1); break;
        }
    }
}

void dsq_gemm_q8_avx512(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da,
                        const int32_t *sa, int64_t ldd, const void *P, float *y, int64_t ldy)
{
    int64_t nb = k / DSQ_GEMM_Q8_BLOCK;
    size_t pstride = (size_t)nb * PANEL_BLOCK_BYTES;
    int64_t p0 = 0;
    if (m <= 2) /* decode: whole groups of four panels first */
        for (; p0 + NP * DSQ_GEMM_Q8_NR <= nr; p0 += NP * DSQ_GEMM_Q8_NR)
            tokens(4, (const uint8_t *)P + (size_t)(p0 / DSQ_GEMM_Q8_NR) * pstride, pstride, nb, m, A, lda, da, sa, ldd,
                   y + p0, ldy, 0xFFFF, 0xFFFF);
    for (; p0 < nr; p0 += DSQ_GEMM_Q8_NR) {
        int64_t rows = nr - p0 < DSQ_GEMM_Q8_NR ? nr - p0 : DSQ_GEMM_Q8_NR;
        __mmask16 m0 = rows >= 16 ? 0xFFFF : (__mmask16)((1u << rows) - 1);
        __mmask16 m1 = rows <= 16 ? 0 : rows >= 32 ? 0xFFFF : (__mmask16)((1u << (rows - 16)) - 1);
        tokens(1, (const uint8_t *)P + (size_t)(p0 / DSQ_GEMM_Q8_NR) * pstride, pstride, nb, m, A, lda, da, sa, ldd,
               y + p0, ldy, m0, m1);
    }
}

#else
typedef int dsq_gemm_q8_avx512_unused; /* not an x86-64 GCC build: dsq_gemm_q8_simd() is false */
#endif
