/* k-quants, reading side: ggml's dequantizers (to_float) for q2_K .. q6_K and
 * q8_K, and the dot products of those rows with q8_K activations: scalar
 * versions after ggml-cpu's generic ones, and the dispatch to the AVX2 ones
 * (quantizers/kquants_avx2.c). The dequantizers keep ggml's expressions, so
 * their floats are bitwise ggml's; the dot products sum exact integers per
 * super-block and then take one float step per block, so they agree with
 * ggml's within float rounding. */
#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "quantizers/kquants_internal.h"
#include "quantizers/kquants_ref.h"
#include "quantizers/quants.h"

static inline float kq_h2f(uint16_t h)
{
    return dsq_f16_to_f32(h);
}

/* ---------------------------------------------------------------------------
 * Dequantization (ggml's to_float, same expressions)
 * ------------------------------------------------------------------------- */

void dsq_dequantize_row_q2_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        float d = kq_h2f(x[i].d), min = kq_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = x[i].scales[is++];
                    float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * half + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dsq_dequantize_row_q3_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        float d_all = kq_h2f(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    float dl = d_all * (float)(dsq_kq_q3_scale(x[i].scales, is++) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

void dsq_dequantize_row_q4_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        float d = kq_h2f(x[i].d), min = kq_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            dsq_kq_scale_min(is, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = min * (float)m;
            dsq_kq_scale_min(is + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void dsq_dequantize_row_q5_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        float d = kq_h2f(x[i].d), min = kq_h2f(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32) {
            uint8_t sc, m;
            dsq_kq_scale_min(is, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = min * (float)m;
            dsq_kq_scale_min(is + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

void dsq_dequantize_row_q6_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        float d = kq_h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void dsq_dequantize_row_q8_K(const void *vx, float *y, int64_t n)
{
    const dsq_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / KQ_QK; i++)
        for (int j = 0; j < KQ_QK; j++) *y++ = x[i].d * (float)x[i].qs[j];
}

/* ---------------------------------------------------------------------------
 * Scalar dot products with q8_K activations (ggml-cpu's generic versions):
 * exact integer sums per super-block, one float step per block.
 * ------------------------------------------------------------------------- */

/* Unpacks a q2_K/q3_K 2-bit field: element e of the super-block. */
static inline int kq_q2_at(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void dsq_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q2_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; j++) {
            summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
            int sub = 0;
            for (int l = 0; l < 16; l++) sub += y[i].qs[16 * j + l] * kq_q2_at(x[i].qs, 16 * j + l);
            isum += (x[i].scales[j] & 0xF) * sub;
        }
        float dall = y[i].d * kq_h2f(x[i].d);
        float dmin = y[i].d * kq_h2f(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

void dsq_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q3_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int sub = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l;
                int q = kq_q2_at(x[i].qs, e) - ((x[i].hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
                sub += y[i].qs[e] * q;
            }
            isum += (dsq_kq_q3_scale(x[i].scales, j) - 32) * sub;
        }
        sumf += kq_h2f(x[i].d) * y[i].d * (float)isum;
    }
    *s = sumf;
}

/* q4_K and q5_K differ only in the fifth bit. */
static float kq_dot_q45_block(const uint16_t d16, uint16_t dmin16, const uint8_t *s12, const uint8_t *qs,
                              const uint8_t *qh, const dsq_block_q8_K *y)
{
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        dsq_kq_scale_min(j, s12, &sc, &m);
        summ += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
        int sub = 0;
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (qh && (qh[l] >> j) & 1) q += 16;
            sub += y->qs[32 * j + l] * q;
        }
        sumi += sc * sub;
    }
    return kq_h2f(d16) * y->d * (float)sumi - kq_h2f(dmin16) * y->d * (float)summ;
}

void dsq_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++)
        sumf += kq_dot_q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, NULL, &y[i]);
    *s = sumf;
}

void dsq_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++)
        sumf += kq_dot_q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, &y[i]);
    *s = sumf;
}

void dsq_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q6_K *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / KQ_QK; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int sub = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l, h = e / 128, r = e % 128, k = r / 32, c = r % 32;
                int lo = (x[i].ql[64 * h + 32 * (k & 1) + c] >> (4 * (k >> 1))) & 0xF;
                int hi = (x[i].qh[32 * h + c] >> (2 * k)) & 3;
                sub += y[i].qs[e] * ((lo | (hi << 4)) - 32);
            }
            isum += x[i].scales[j] * sub;
        }
        sumf += kq_h2f(x[i].d) * y[i].d * (float)isum;
    }
    *s = sumf;
}

/* ---------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------- */

#if DSQ_KQ_HAVE_AVX2
#define KQ_DOT(t)                                                                                  \
    void dsq_vec_dot_##t##_q8_K(int64_t n, float *s, const void *x, const void *y)                 \
    {                                                                                              \
        if (dsq_cpu_has(DSQ_CPU_AVX2))                                                           \
            dsq_kq_avx2_vec_dot_##t##_q8_K(n, s, x, y);                                                \
        else                                                                                       \
            dsq_vec_dot_##t##_q8_K_ref(n, s, x, y);                                                \
    }
#else
#define KQ_DOT(t)                                                                                  \
    void dsq_vec_dot_##t##_q8_K(int64_t n, float *s, const void *x, const void *y)                 \
    {                                                                                              \
        dsq_vec_dot_##t##_q8_K_ref(n, s, x, y);                                                    \
    }
#endif

KQ_DOT(q2_K)
KQ_DOT(q3_K)
KQ_DOT(q4_K)
KQ_DOT(q5_K)
KQ_DOT(q6_K)
