/* Private to quantizers/ (legacy*.c, iq4*.c): the AVX2 versions of
 * the legacy and IQ4 row functions, and the helpers their two files share.
 *
 * Quantizers here give the same bytes as the scalar references: elementwise
 * steps run on 8 or 32 elements at once, and the searches run one block per
 * SIMD lane, each lane doing ggml's float operations in ggml's order (no FMA;
 * the build has -ffp-contract=off). Dequantizers give the same floats. Dot
 * products use FMA and another summation order, so they agree with the
 * scalar ones within float rounding.
 *
 * The "_blocks" quantizers handle the largest multiple of 8 blocks and return
 * how many they did; the caller finishes the rest with the scalar code. */
#ifndef DSQ_QUANTIZERS_QUANT_AVX2_H
#define DSQ_QUANTIZERS_QUANT_AVX2_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define DSQ_HAVE_AVX2_PATHS 1
#else
#define DSQ_HAVE_AVX2_PATHS 0
#endif

#if DSQ_HAVE_AVX2_PATHS

/* legacy: quantizers/legacy_avx2.c */
void dsq_quantize_row_q4_0_plain_avx2(const float *x, void *y, int64_t n);
void dsq_quantize_row_q4_1_plain_avx2(const float *x, void *y, int64_t n);
void dsq_quantize_row_q5_0_plain_avx2(const float *x, void *y, int64_t n);
void dsq_quantize_row_q5_1_plain_avx2(const float *x, void *y, int64_t n);
void dsq_quantize_row_q8_0_avx2(const float *x, void *y, int64_t n);
void dsq_quantize_row_q8_1_avx2(const float *x, void *y, int64_t n);
/* imatrix variants: sigma2 is the row's mean square, qw the row's importance */
int64_t dsq_quantize_q4_0_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2);
int64_t dsq_quantize_q5_0_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2);
int64_t dsq_quantize_q4_1_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2);
int64_t dsq_quantize_q5_1_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2);

void dsq_dequantize_row_q4_0_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_q4_1_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_q5_0_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_q5_1_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_q8_0_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_q8_1_avx2(const void *x, float *y, int64_t n);

void dsq_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);

/* iq4: quantizers/iq4_avx2.c */
int64_t dsq_quantize_iq4_nl_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw);
void dsq_quantize_row_iq4_xs_avx2(const float *x, void *y, int64_t n, const float *qw);
void dsq_dequantize_row_iq4_nl_avx2(const void *x, float *y, int64_t n);
void dsq_dequantize_row_iq4_xs_avx2(const void *x, float *y, int64_t n);
void dsq_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_iq4_xs_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);

/* ---- helpers for the two AVX2 files (which compile with target avx2,fma) ---- */
#ifdef __AVX2__
#include <immintrin.h>

/* 8 consecutive 32-element blocks transposed: X[j] lane k = x[32k + j]. */
static inline void dsq_avx2_load_blocks8(const float *x, __m256 X[32])
{
    for (int c = 0; c < 4; c++) {
        __m256 r[8], t[8], u[8];
        for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(x + 32 * k + 8 * c);
        for (int k = 0; k < 8; k += 2) {
            t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
            t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
        }
        for (int k = 0; k < 8; k += 4) {
            u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
            u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
            u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
            u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
        }
        for (int k = 0; k < 4; k++) {
            X[8 * c + k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
            X[8 * c + k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
        }
    }
}

/* ggml's nearest_int, lane by lane (same bit trick, same garbage out of range). */
static inline __m256i dsq_avx2_nearest_int(__m256 f)
{
    const __m256i v = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

/* C's "c ? a : b" for a float condition: NaN counts as true. */
static inline __m256 dsq_avx2_select_nonzero(__m256 c, __m256 a, __m256 b)
{
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_NEQ_UQ));
}

/* The largest |x| of each lane over X[0..n) and the signed value that had it
 * first: "if (ax > amax) { amax = ax; max = x; }" from amax = max = 0. */
static inline void dsq_avx2_signed_absmax(const __m256 *X, int n, __m256 *amax_out, __m256 *max_out)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 amax = _mm256_setzero_ps(), max = _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        const __m256 ax = _mm256_and_ps(X[j], abs_mask);
        const __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, X[j], gt);
    }
    *amax_out = amax;
    *max_out = max;
}

#endif /* __AVX2__ */
#endif /* DSQ_HAVE_AVX2_PATHS */
#endif
