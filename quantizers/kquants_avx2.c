/* AVX2 versions of the k-quant row functions, chosen at run time by
 * quantizers/kquants.c (quantizers) and quantizers/kquants_dot.c (dots).
 *
 * Quantizers: quantizers/kquants_lanes.h with 8 lanes (one sub-block per
 * lane; the bytes are the scalar reference's, which are ggml's); q8_K here.
 *
 * Dot products: exact integer sums per super-block (maddubs/madd), then the
 * same float expression as the scalar versions. */
#include "quantizers/kquants_internal.h"

#if DSQ_KQ_HAVE_AVX2

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

#define KQ_AVX2 __attribute__((target("avx2")))

/* The row quantizers q2_K..q6_K, shared with the AVX-512 copy. */
#define KQ_W 8
#define KQ_TARGET KQ_AVX2
#define KQ_ROW(t) dsq_kq_avx2_quantize_row_##t
#include "quantizers/kquants_lanes.h"

/* quantize_row_q8_K_ref with vector arithmetic: the first element of largest
 * |x| gives the signed max, then every element is rounded on its own. */
void KQ_AVX2 dsq_kq_avx2_quantize_row_q8_K(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    dsq_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        __m256 am = _mm256_setzero_ps();
        /* max_ps(v, am) keeps am when v is NaN, as the scalar comparison does */
        for (int j = 0; j < KQ_QK; j += 8) am = _mm256_max_ps(kv_abs(_mm256_loadu_ps(x + j)), am);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        float amax = _mm_cvtss_f32(h);
        memset(&y[i], 0, sizeof y[i]);
        if (!amax) continue;
        float max = 0;
        for (int j = 0; j < KQ_QK; j++)
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        float iscale = -127.f / max;
        __m256 vis = _mm256_set1_ps(iscale);
        for (int j = 0; j < KQ_QK; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(kv_nearest(_mm256_mul_ps(vis, _mm256_loadu_ps(x + j + 8 * k))),
                                        _mm256_set1_epi32(127));
            /* packs interleave 128-bit halves; the permute restores element order */
            __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
            __m256i p8 = _mm256_packs_epi16(p16a, p16b);
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), p8);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---------------------------------------------------------------------------
 * Dot products with q8_K
 * ------------------------------------------------------------------------- */

KQ_AVX2 static inline int kv_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Σ q·y over 32 elements that form two 16-element sub-blocks with scales s0, s1
 * (q unsigned bytes < 128, y signed bytes), as 8 int32 partial sums. */
KQ_AVX2 static inline __m256i kv_dot32(__m256i q, const int8_t *y, int s0, int s1)
{
    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
    __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0));
    return _mm256_madd_epi16(p, sc);
}

/* Bytes of hb with bit b set -> val, others 0. */
KQ_AVX2 static inline __m256i kv_bit(__m256i hb, int b, char val)
{
    __m256i m = _mm256_set1_epi8((char)(1 << b));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, m), m), _mm256_set1_epi8(val));
}

void KQ_AVX2 dsq_kq_avx2_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q2_K *x = vx;
    const dsq_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                int sb = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, kv_dot32(q, y[i].qs + 128 * h + 32 * k, x[i].scales[sb] & 0xF,
                                                     x[i].scales[sb + 1] & 0xF));
            }
        }
        int isum = kv_hsum_i32(acc);
        float dall = y[i].d * dsq_f16_to_f32(x[i].d);
        float dmin = y[i].d * dsq_f16_to_f32(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

void KQ_AVX2 dsq_kq_avx2_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q3_K *x = vx;
    const dsq_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        int sc[16], offs = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = dsq_kq_q3_scale(x[i].scales, j) - 32;
            offs += sc[j] * y[i].bsums[j];
        }
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                /* level + 4 = low bits + 4 * high bit, in 0..7 */
                __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3),
                                            kv_bit(hm, 4 * h + k, 4));
                int sb = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, kv_dot32(q, y[i].qs + 128 * h + 32 * k, sc[sb], sc[sb + 1]));
            }
        }
        int isum = kv_hsum_i32(acc) - 4 * offs;
        sumf += dsq_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sumf;
}

/* q4_K and q5_K (qh non-NULL adds the fifth bit). */
KQ_AVX2 static float kv_dot_q45_block(uint16_t d16, uint16_t dmin16, const uint8_t *s12, const uint8_t *qs,
                                      const uint8_t *qh, const dsq_block_q8_K *y)
{
    const __m256i m15 = _mm256_set1_epi8(15);
    int summ = 0;
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        dsq_kq_scale_min(j, s12, &sc[j], &m[j]);
        summ += m[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i qb = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(qb, m15);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m15);
        if (qh) {
            lo = _mm256_or_si256(lo, kv_bit(hb, 2 * c, 16));
            hi = _mm256_or_si256(hi, kv_bit(hb, 2 * c + 1, 16));
        }
        acc = _mm256_add_epi32(acc, kv_dot32(lo, y->qs + 64 * c, sc[2 * c], sc[2 * c]));
        acc = _mm256_add_epi32(acc, kv_dot32(hi, y->qs + 64 * c + 32, sc[2 * c + 1], sc[2 * c + 1]));
    }
    int sumi = kv_hsum_i32(acc);
    return dsq_f16_to_f32(d16) * y->d * (float)sumi - dsq_f16_to_f32(dmin16) * y->d * (float)summ;
}

void KQ_AVX2 dsq_kq_avx2_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++)
        sumf += kv_dot_q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, NULL, &y[i]);
    *s = sumf;
}

void KQ_AVX2 dsq_kq_avx2_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++)
        sumf += kv_dot_q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, &y[i]);
    *s = sumf;
}

void KQ_AVX2 dsq_kq_avx2_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q6_K *x = vx;
    const dsq_block_q8_K *y = vy;
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        const int8_t *sc = x[i].scales;
        int offs = 0;
        for (int j = 0; j < 16; j++) offs += sc[j] * y[i].bsums[j];
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i low[4] = {_mm256_and_si256(l0, m15), _mm256_and_si256(l1, m15),
                              _mm256_and_si256(_mm256_srli_epi16(l0, 4), m15),
                              _mm256_and_si256(_mm256_srli_epi16(l1, 4), m15)};
            for (int k = 0; k < 4; k++) {
                /* stored level 0..63 = low nibble | two high bits << 4; value = level - 32 */
                __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3);
                __m256i q = _mm256_or_si256(low[k], _mm256_slli_epi16(hi2, 4));
                int sb = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, kv_dot32(q, y[i].qs + 128 * h + 32 * k, sc[sb], sc[sb + 1]));
            }
        }
        int isum = kv_hsum_i32(acc) - 32 * offs;
        sumf += dsq_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sumf;
}

#endif
