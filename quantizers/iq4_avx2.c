/* AVX2 versions of the iq4_nl / iq4_xs row functions; contract in
 * quantizers/quant_avx2.h, scalar references in quantizers/iq4.c. The scale
 * search runs one 32-block per lane: 8 iq4_nl blocks, or the 8 blocks of one
 * iq4_xs super-block, at a time. Only called when the CPU has AVX2 and FMA. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mfma (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "quantizers/quant_avx2.h"

#if DSQ_HAVE_AVX2_PATHS

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "quantizers/quant_common.h"

#define BS 32

/* ------------------------------------------------------------- the table */

typedef struct iq4_table {
    __m256 lo, hi; /* the 16 values as floats, split for permutevar8x32 */
} iq4_table;

static inline iq4_table iq4_table_load(void)
{
    iq4_table t;
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = dsq_kvalues_iq4nl[i];
    t.lo = _mm256_loadu_ps(v);
    t.hi = _mm256_loadu_ps(v + 8);
    return t;
}

static inline __m256 iq4_value(const iq4_table *t, __m256i idx)
{
    const __m256 lo = _mm256_permutevar8x32_ps(t->lo, idx), hi = _mm256_permutevar8x32_ps(t->hi, idx);
    const __m256i upper = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7));
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(upper));
}

/* best_index_int8(16, kvalues_iq4nl, x) lane by lane. The scalar binary search
 * ends with lo = the last i with !(x < v[i]) (i in 1..14, else 0); then it
 * compares the two distances exactly as below. The end tests x <= v[0] and
 * x >= v[15] give the same answer through that comparison, NaN included (15). */
static inline __m256i iq4_index(const iq4_table *t, __m256 x)
{
    __m256i lo = _mm256_setzero_si256();
    for (int i = 1; i < 15; i++) {
        const __m256 nlt = _mm256_cmp_ps(x, _mm256_set1_ps(dsq_kvalues_iq4nl[i]), _CMP_NLT_UQ);
        lo = _mm256_sub_epi32(lo, _mm256_castps_si256(nlt));
    }
    const __m256i hi = _mm256_add_epi32(lo, _mm256_set1_epi32(1));
    const __m256 below = _mm256_sub_ps(x, iq4_value(t, lo)), above = _mm256_sub_ps(iq4_value(t, hi), x);
    const __m256 take_lo = _mm256_cmp_ps(below, above, _CMP_LT_OQ);
    return _mm256_blendv_epi8(hi, lo, _mm256_castps_si256(take_lo));
}

/* ------------------------------------------------------------ the search */

static inline void iq4_sums8(const iq4_table *t, const __m256 X[32], const __m256 W[32], __m256 id, __m256 *sqx,
                             __m256 *sq2)
{
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int j = 0; j < BS; j++) {
        const __m256 q = iq4_value(t, iq4_index(t, _mm256_mul_ps(id, X[j])));
        const __m256 wq = _mm256_mul_ps(W[j], q);
        a = _mm256_add_ps(a, _mm256_mul_ps(wq, X[j]));
        b = _mm256_add_ps(b, _mm256_mul_ps(wq, q));
    }
    *sqx = a;
    *sq2 = b;
}

/* The scalar iq4_block_scale with ntry = 7 for 8 blocks: 0 for all-zero blocks. */
static __m256 iq4_scale8(const iq4_table *t, const __m256 X[32], const __m256 W[32])
{
    const int ntry = 7;
    __m256 amax, max;
    dsq_avx2_signed_absmax(X, BS, &amax, &max);
    const __m256 zero_blk = _mm256_cmp_ps(amax, _mm256_set1_ps(DSQ_GROUP_MAX_EPS), _CMP_LT_OQ);
    const __m256 v0 = _mm256_set1_ps(dsq_kvalues_iq4nl[0]);
    const __m256 neg_max = _mm256_xor_ps(max, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    __m256 d = _mm256_div_ps(neg_max, v0);
    __m256 sqx, sq2;
    iq4_sums8(t, X, W, _mm256_div_ps(_mm256_set1_ps(1.0f), d), &sqx, &sq2);
    d = _mm256_div_ps(sqx, sq2);
    __m256 best = _mm256_mul_ps(d, sqx);
    for (int itry = -ntry; itry <= ntry; ++itry) {
        iq4_sums8(t, X, W, _mm256_div_ps(_mm256_set1_ps((float)(itry + dsq_kvalues_iq4nl[0])), max), &sqx, &sq2);
        const __m256 take = _mm256_and_ps(_mm256_cmp_ps(sq2, _mm256_setzero_ps(), _CMP_GT_OQ),
                                          _mm256_cmp_ps(_mm256_mul_ps(sqx, sqx), _mm256_mul_ps(best, sq2), _CMP_GT_OQ));
        const __m256 nd = _mm256_div_ps(sqx, sq2);
        d = _mm256_blendv_ps(d, nd, take);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(nd, sqx), take);
    }
    return _mm256_andnot_ps(zero_blk, d);
}

/* Weights of 8 transposed blocks: x^2, or qw * sqrt(sigma2 + x^2). */
static void iq4_weights8(const float *qw, __m256 sigma2, const __m256 X[32], __m256 W[32])
{
    if (!qw) {
        for (int j = 0; j < BS; j++) W[j] = _mm256_mul_ps(X[j], X[j]);
        return;
    }
    __m256 Q[32];
    dsq_avx2_load_blocks8(qw, Q);
    for (int j = 0; j < BS; j++) W[j] = _mm256_mul_ps(Q[j], _mm256_sqrt_ps(_mm256_add_ps(sigma2, _mm256_mul_ps(X[j], X[j]))));
}

/* Levels at per-lane inverse scale id, packed into block k's 16 bytes at qs + k*stride. */
static void iq4_levels_pack8(const iq4_table *t, const __m256 X[32], __m256 id, uint8_t *qs, size_t stride)
{
    int32_t L[BS][8];
    for (int j = 0; j < BS; j++) _mm256_storeu_si256((__m256i *)L[j], iq4_index(t, _mm256_mul_ps(id, X[j])));
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 16; j++) qs[k * stride + j] = (uint8_t)(L[j][k] | (L[j + 16][k] << 4));
}

/* ---------------------------------------------------------------- iq4_nl */

int64_t dsq_quantize_iq4_nl_blocks_avx2(const float *x, void *vy, int64_t nb, const float *qw)
{
    dsq_block_iq4_nl *y = vy;
    const iq4_table t = iq4_table_load();
    const int64_t done = nb / 8 * 8;
    for (int64_t b = 0; b < done; b += 8) {
        __m256 X[32], W[32];
        dsq_avx2_load_blocks8(x + b * BS, X);
        __m256 sigma2 = _mm256_setzero_ps();
        if (qw) {
            for (int j = 0; j < BS; j++) sigma2 = _mm256_add_ps(sigma2, _mm256_mul_ps(X[j], X[j]));
            sigma2 = _mm256_mul_ps(sigma2, _mm256_set1_ps(2.f / BS));
        }
        iq4_weights8(qw ? qw + b * BS : NULL, sigma2, X, W);
        const __m256 d = iq4_scale8(&t, X, W);
        float dv[8];
        _mm256_storeu_ps(dv, d);
        for (int k = 0; k < 8; k++) y[b + k].d = dsq_f32_to_f16(dv[k]);
        const __m256 id = dsq_avx2_select_nonzero(d, _mm256_div_ps(_mm256_set1_ps(1.0f), d), _mm256_setzero_ps());
        iq4_levels_pack8(&t, X, id, y[b].qs, sizeof(dsq_block_iq4_nl));
    }
    return done;
}

/* ---------------------------------------------------------------- iq4_xs */

static void iq4_xs_superblock8(const iq4_table *t, const float *x, dsq_block_iq4_xs *y, const float *qw)
{
    __m256 X[32], W[32];
    dsq_avx2_load_blocks8(x, X);
    float sigma2 = 0;
    if (qw) {
        for (int j = 0; j < DSQ_QK_K; ++j) sigma2 += x[j] * x[j]; /* in element order, as ggml */
        sigma2 = sigma2 * (2.f / DSQ_QK_K);
    }
    iq4_weights8(qw, _mm256_set1_ps(sigma2), X, W);
    const __m256 sv = iq4_scale8(t, X, W);
    float scales[8];
    _mm256_storeu_ps(scales, sv);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ++ib)
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    const float d = -max_scale / 32;
    y->d = dsq_f32_to_f16(d);
    const float id = d ? 1 / d : 0.f;
    __m256i l = dsq_avx2_nearest_int(_mm256_mul_ps(_mm256_set1_ps(id), sv));
    l = _mm256_max_epi32(_mm256_set1_epi32(-32), _mm256_min_epi32(_mm256_set1_epi32(31), l));
    const __m256 dl = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(l));
    const __m256 idl = dsq_avx2_select_nonzero(dl, _mm256_div_ps(_mm256_set1_ps(1.0f), dl), _mm256_setzero_ps());
    iq4_levels_pack8(t, X, idl, y->qs, 16);
    int32_t ls[8];
    _mm256_storeu_si256((__m256i *)ls, _mm256_add_epi32(l, _mm256_set1_epi32(32)));
    uint16_t sh = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    for (int ib = 0; ib < 8; ++ib) {
        y->scales_l[ib / 2] |= (uint8_t)((ls[ib] & 0xf) << (4 * (ib % 2)));
        sh |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
    }
    y->scales_h = sh;
}

void dsq_quantize_row_iq4_xs_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_iq4_xs *y = vy;
    const iq4_table t = iq4_table_load();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++)
        iq4_xs_superblock8(&t, x + i * DSQ_QK_K, &y[i], qw ? qw + i * DSQ_QK_K : NULL);
}

/* ------------------------------------------------ dequantizers and dots */

/* 32 nibble indices of 16 bytes mapped to the int8 table values: elements 0-15, 16-31. */
static inline __m256i iq4_values_i8(const uint8_t *qs)
{
    const __m128i tab = _mm_loadu_si128((const __m128i *)dsq_kvalues_iq4nl);
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, m));
    const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m));
    return _mm256_set_m128i(hi, lo);
}

/* y[0..32) = d * value: the int8 -> float conversion is exact, then one rounding. */
static inline void store_scaled(float *y, __m256i v, __m256 d)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]))));
}

void dsq_dequantize_row_iq4_nl_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / BS; i++) store_scaled(y + i * BS, iq4_values_i8(x[i].qs), _mm256_set1_ps(dsq_f16_to_f32(x[i].d)));
}

static inline int xs_block_scale(const dsq_block_iq4_xs *x, int ib)
{
    return ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x->scales_h >> 2 * ib) & 3) << 4);
}

void dsq_dequantize_row_iq4_xs_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int ib = 0; ib < DSQ_QK_K / BS; ib++) {
            const float dl = d * (xs_block_scale(&x[i], ib) - 32);
            store_scaled(y + i * DSQ_QK_K + ib * BS, iq4_values_i8(x[i].qs + 16 * ib), _mm256_set1_ps(dl));
        }
    }
}

static inline __m256i dot_i8_quads(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

static inline float hsum_ps(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

void dsq_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_iq4_nl *x = vx;
    const dsq_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BS; i++) {
        const __m256i p = dot_i8_quads(iq4_values_i8(x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(y[i].d) * dsq_f16_to_f32(x[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

void dsq_vec_dot_iq4_xs_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_iq4_xs *x = vx;
    const dsq_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < DSQ_QK_K / BS; ib++) {
            const __m256i p = dot_i8_quads(iq4_values_i8(x[i].qs + 16 * ib),
                                           _mm256_loadu_si256((const __m256i *)(y[i].qs + BS * ib)));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, _mm256_set1_epi32(xs_block_scale(&x[i], ib) - 32)));
        }
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * y[i].d);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

#else
typedef int dsq_iq4_avx2_unused; /* not an x86-64 GCC build: nothing to compile */
#endif
