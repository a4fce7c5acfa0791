/* The legacy 32-element block types q4_0, q4_1, q5_0, q5_1, q8_0, q8_1:
 * scalar references that reproduce ggml bit for bit, and the public entry
 * points, which pick the AVX2 versions (quantizers/legacy_avx2.c) when the
 * CPU has them.
 *
 * Source: ggml/src/ggml-quants.c at llama.cpp c392e509 (quantize_row_*_ref,
 * quantize_row_*_impl, dequantize_row_*) and the scalar dot products of
 * ggml/src/ggml-cpu/ggml-cpu-quants.c; algorithms-notes.md 2.1-2.3, 2.9.
 * Every float expression keeps ggml's operand order; see quant_common.h. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "quantizers/quant_avx2.h"
#include "quantizers/quant_common.h"
#include "quantizers/quants.h"
#include "quantizers/quants_ref.h"

#define QK 32

static inline uint8_t min_u8(int a, int b) { return (uint8_t)(a < b ? a : b); }

/* ggml's (int8_t)(float) as its x86 build computes it: truncation to int32
 * (cvttss2si: INT32_MIN for NaN, infinities and values out of range), then
 * the low byte. C leaves a float outside the target type's range undefined,
 * and gcc and clang then differ; NaN weights must still give ggml's bytes. */
static inline int8_t ggml_i8(float v)
{
    int32_t i = (v > -2147483904.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
    return (int8_t)(uint8_t)(uint32_t)i;
}

/* The element of largest magnitude, keeping its sign; the first one on ties. */
static inline float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static inline void block_min_max(const float *x, int n, float *min_out, float *max_out)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

/* Sum of squares of the row and its mean, the imatrix paths' sigma^2. */
static float row_sigma2(const float *x, int64_t n)
{
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static void imat_weights(const float *xb, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < QK; ++j) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

/* Packs 32 5-bit levels: low nibbles like q4, 5th bits into the LE uint32 qh. */
static void pack_q5(const uint8_t *L, uint8_t *qs, uint8_t qh_out[4])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= ((L[j] & 0x10u) >> 4) << j;
        qh |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    for (int b = 0; b < 4; b++) qh_out[b] = (uint8_t)(qh >> (8 * b));
}

static inline uint32_t load_qh(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* ================================ q4_0 ================================ */

static void quantize_block_q4_0_plain(const float *x, dsq_block_q4_0 *y)
{
    const float d = signed_absmax(x, QK) / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = dsq_f32_to_f16(d);
    for (int j = 0; j < QK / 2; ++j) {
        const float x0 = x[j] * id;
        const float x1 = x[QK / 2 + j] * id;
        const uint8_t q0 = min_u8(15, ggml_i8(x0 + 8.5f));
        const uint8_t q1 = min_u8(15, ggml_i8(x1 + 8.5f));
        y->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* quantize_row_q4_0_impl for blocks [b0, nb) of a row with mean square sigma2 */
static void q4_0_imat_blocks(const float *x, dsq_block_q4_0 *y, int64_t b0, int64_t nb, const float *qw, float sigma2)
{
    float w[QK];
    int8_t L[QK];
    for (int64_t i = b0; i < nb; i++) {
        imat_weights(x + i * QK, qw + i * QK, sigma2, w);
        const float d = dsq_make_qx_quants(QK, 8, x + i * QK, L, 1, w);
        y[i].d = dsq_f32_to_f16(d);
        for (int j = 0; j < 16; ++j) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void dsq_quantize_row_q4_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q4_0 *y = vy;
    const int64_t nb = n / QK;
    if (!qw) {
        for (int64_t i = 0; i < nb; i++) quantize_block_q4_0_plain(x + i * QK, &y[i]);
        return;
    }
    q4_0_imat_blocks(x, y, 0, nb, qw, row_sigma2(x, n));
}

void dsq_dequantize_row_q4_0_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * QK + j] = x0 * d;
            y[i * QK + j + QK / 2] = x1 * d;
        }
    }
}

void dsq_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK; ++ib) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK / 2; ++j) {
            sumi0 += ((x[ib].qs[j] & 0x0F) - 8) * y[ib].qs[j];
            sumi1 += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + QK / 2];
        }
        sumf += (sumi0 + sumi1) * dsq_f16_to_f32(x[ib].d) * dsq_f16_to_f32(y[ib].d);
    }
    *s = sumf;
}

/* ================================ q4_1 ================================ */

static void quantize_block_q4_1_plain(const float *x, dsq_block_q4_1 *y)
{
    float min, max;
    block_min_max(x, QK, &min, &max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y->d = dsq_f32_to_f16(d);
    y->m = dsq_f32_to_f16(min);
    for (int j = 0; j < QK / 2; ++j) {
        const float x0 = (x[j] - min) * id;
        const float x1 = (x[QK / 2 + j] - min) * id;
        const uint8_t q0 = min_u8(15, ggml_i8(x0 + 0.5f));
        const uint8_t q1 = min_u8(15, ggml_i8(x1 + 0.5f));
        y->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void q4_1_imat_blocks(const float *x, dsq_block_q4_1 *y, int64_t b0, int64_t nb, const float *qw, float sigma2)
{
    float w[QK];
    uint8_t L[QK], Laux[QK];
    for (int64_t i = b0; i < nb; i++) {
        imat_weights(x + i * QK, qw + i * QK, sigma2, w);
        float min;
        const float d = dsq_make_qkx3_quants(QK, 15, x + i * QK, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[i].d = dsq_f32_to_f16(d);
        y[i].m = dsq_f32_to_f16(-min);
        for (int j = 0; j < 16; ++j) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void dsq_quantize_row_q4_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q4_1 *y = vy;
    const int64_t nb = n / QK;
    if (!qw) {
        for (int64_t i = 0; i < nb; i++) quantize_block_q4_1_plain(x + i * QK, &y[i]);
        return;
    }
    q4_1_imat_blocks(x, y, 0, nb, qw, row_sigma2(x, n));
}

void dsq_dequantize_row_q4_1_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        const float m = dsq_f16_to_f32(x[i].m);
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = x[i].qs[j] & 0x0F;
            const int x1 = x[i].qs[j] >> 4;
            y[i * QK + j] = x0 * d + m;
            y[i * QK + j + QK / 2] = x1 * d + m;
        }
    }
}

void dsq_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_1 *x = vx;
    const dsq_block_q8_1 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK; ++ib) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK / 2; ++j) {
            sumi0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
            sumi1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + QK / 2];
        }
        sumf += (dsq_f16_to_f32(x[ib].d) * dsq_f16_to_f32(y[ib].d)) * (sumi0 + sumi1) +
                dsq_f16_to_f32(x[ib].m) * dsq_f16_to_f32(y[ib].s);
    }
    *s = sumf;
}

/* ================================ q5_0 ================================ */

static void quantize_block_q5_0_plain(const float *x, dsq_block_q5_0 *y)
{
    const float d = signed_absmax(x, QK) / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = dsq_f32_to_f16(d);
    uint8_t L[QK];
    for (int j = 0; j < QK; ++j) L[j] = min_u8(31, ggml_i8(x[j] * id + 16.5f));
    pack_q5(L, y->qs, y->qh);
}

static void q5_0_imat_blocks(const float *x, dsq_block_q5_0 *y, int64_t b0, int64_t nb, const float *qw, float sigma2)
{
    float w[QK];
    int8_t L[QK];
    for (int64_t i = b0; i < nb; i++) {
        imat_weights(x + i * QK, qw + i * QK, sigma2, w);
        const float d = dsq_make_qx_quants(QK, 16, x + i * QK, L, 1, w);
        y[i].d = dsq_f32_to_f16(d);
        pack_q5((const uint8_t *)L, y[i].qs, y[i].qh);
    }
}

void dsq_quantize_row_q5_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q5_0 *y = vy;
    const int64_t nb = n / QK;
    if (!qw) {
        for (int64_t i = 0; i < nb; i++) quantize_block_q5_0_plain(x + i * QK, &y[i]);
        return;
    }
    q5_0_imat_blocks(x, y, 0, nb, qw, row_sigma2(x, n));
}

void dsq_dequantize_row_q5_0_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[i * QK + j] = x0 * d;
            y[i * QK + j + QK / 2] = x1 * d;
        }
    }
}

void dsq_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK; ++ib) {
        const uint32_t qh = load_qh(x[ib].qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = ((x[ib].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((x[ib].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK / 2];
        }
        sumf += (dsq_f16_to_f32(x[ib].d) * dsq_f16_to_f32(y[ib].d)) * (sumi0 + sumi1);
    }
    *s = sumf;
}

/* ================================ q5_1 ================================ */

static void quantize_block_q5_1_plain(const float *x, dsq_block_q5_1 *y)
{
    float min, max;
    block_min_max(x, QK, &min, &max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y->d = dsq_f32_to_f16(d);
    y->m = dsq_f32_to_f16(min);
    uint8_t L[QK];
    /* no clamp to 31, as in ggml: the max element lands exactly on 31 */
    for (int j = 0; j < QK; ++j) L[j] = (uint8_t)((x[j] - min) * id + 0.5f);
    pack_q5(L, y->qs, y->qh);
}

static void q5_1_imat_blocks(const float *x, dsq_block_q5_1 *y, int64_t b0, int64_t nb, const float *qw, float sigma2)
{
    float w[QK];
    uint8_t L[QK], Laux[QK];
    for (int64_t i = b0; i < nb; i++) {
        imat_weights(x + i * QK, qw + i * QK, sigma2, w);
        float min;
        const float d = dsq_make_qkx3_quants(QK, 31, x + i * QK, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[i].d = dsq_f32_to_f16(d);
        y[i].m = dsq_f32_to_f16(-min);
        pack_q5(L, y[i].qs, y[i].qh);
    }
}

void dsq_quantize_row_q5_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q5_1 *y = vy;
    const int64_t nb = n / QK;
    if (!qw) {
        for (int64_t i = 0; i < nb; i++) quantize_block_q5_1_plain(x + i * QK, &y[i]);
        return;
    }
    q5_1_imat_blocks(x, y, 0, nb, qw, row_sigma2(x, n));
}

void dsq_dequantize_row_q5_1_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        const float m = dsq_f16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int x1 = (x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[i * QK + j] = x0 * d + m;
            y[i * QK + j + QK / 2] = x1 * d + m;
        }
    }
}

void dsq_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_1 *x = vx;
    const dsq_block_q8_1 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK; ++ib) {
        const uint32_t qh = load_qh(x[ib].qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK / 2; ++j) {
            const int x0 = (x[ib].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int x1 = (x[ib].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK / 2];
        }
        sumf += (dsq_f16_to_f32(x[ib].d) * dsq_f16_to_f32(y[ib].d)) * (sumi0 + sumi1) +
                dsq_f16_to_f32(x[ib].m) * dsq_f16_to_f32(y[ib].s);
    }
    *s = sumf;
}

/* ============================ q8_0 and q8_1 ============================ */

static float q8_block_scale(const float *x)
{
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    return amax / ((1 << 7) - 1);
}

void dsq_quantize_row_q8_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw; /* ggml's quantize_q8_0 ignores the importance matrix too */
    dsq_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        const float d = q8_block_scale(xb);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        for (int j = 0; j < QK; ++j) y[i].qs[j] = ggml_i8(roundf(xb[j] * id));
    }
}

void dsq_quantize_row_q8_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    dsq_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        const float d = q8_block_scale(xb);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK; ++j) {
            y[i].qs[j] = ggml_i8(roundf(xb[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = dsq_f32_to_f16(sum * d);
    }
}

void dsq_dequantize_row_q8_0_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int j = 0; j < QK; ++j) y[i * QK + j] = x[i].qs[j] * d;
    }
}

/* ggml has no to_float for q8_1 (it is only an activation type); same rule as q8_0. */
void dsq_dequantize_row_q8_1_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int j = 0; j < QK; ++j) y[i * QK + j] = x[i].qs[j] * d;
    }
}

void dsq_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q8_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK; ++ib) {
        int sumi = 0;
        for (int j = 0; j < QK; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sumf += sumi * (dsq_f16_to_f32(x[ib].d) * dsq_f16_to_f32(y[ib].d));
    }
    *s = sumf;
}

/* ============================ public entry points ============================ */

#if DSQ_HAVE_AVX2_PATHS
#define USE_AVX2() dsq_cpu_has_avx2_fma()
#else
#define USE_AVX2() false
#endif

#if DSQ_HAVE_AVX2_PATHS
/* An imatrix row: the AVX2 search takes groups of 8 blocks, the scalar code the rest. */
#define IMAT_ROW(t, x, y, n, qw)                                                                   \
    do {                                                                                           \
        const float sigma2_ = row_sigma2(x, n);                                                    \
        const int64_t done_ = dsq_quantize_##t##_imat_blocks_avx2(x, y, (n) / QK, qw, sigma2_);    \
        t##_imat_blocks(x, y, done_, (n) / QK, qw, sigma2_);                                       \
    } while (0)

#define LEGACY_QUANT(t)                                                                            \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw)                 \
    {                                                                                              \
        if (!USE_AVX2())                                                                           \
            dsq_quantize_row_##t##_ref(x, y, n, qw);                                               \
        else if (qw)                                                                               \
            IMAT_ROW(t, x, y, n, qw);                                                              \
        else                                                                                       \
            dsq_quantize_row_##t##_plain_avx2(x, y, n);                                            \
    }
#define DISPATCH(call_avx2, call_ref)                                                              \
    do {                                                                                           \
        if (USE_AVX2())                                                                            \
            call_avx2;                                                                             \
        else                                                                                       \
            call_ref;                                                                              \
    } while (0)
#else
#define LEGACY_QUANT(t)                                                                            \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw)                 \
    {                                                                                              \
        dsq_quantize_row_##t##_ref(x, y, n, qw);                                                   \
    }
#define DISPATCH(call_avx2, call_ref) call_ref
#endif

LEGACY_QUANT(q4_0)
LEGACY_QUANT(q4_1)
LEGACY_QUANT(q5_0)
LEGACY_QUANT(q5_1)

float dsq_quantize_row_sigma2(const float *x, int64_t n) { return row_sigma2(x, n); }

/* The imatrix path with the row's sigma^2 given: blocks of a row quantized
 * one at a time (GPTQ into blocks) get the bytes of the whole row. */
#if DSQ_HAVE_AVX2_PATHS
#define LEGACY_SIGMA(t)                                                                            \
    void dsq_quantize_row_##t##_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2) \
    {                                                                                              \
        int64_t done = USE_AVX2() ? dsq_quantize_##t##_imat_blocks_avx2(x, y, n / QK, qw, sigma2) : 0; \
        t##_imat_blocks(x, y, done, n / QK, qw, sigma2);                                           \
    }
#else
#define LEGACY_SIGMA(t)                                                                            \
    void dsq_quantize_row_##t##_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2) \
    {                                                                                              \
        t##_imat_blocks(x, y, 0, n / QK, qw, sigma2);                                              \
    }
#endif

LEGACY_SIGMA(q4_0)
LEGACY_SIGMA(q4_1)
LEGACY_SIGMA(q5_0)
LEGACY_SIGMA(q5_1)

/* q8_0 and q8_1 ignore the importance vector, as ggml does */
void dsq_quantize_row_q8_0(const float *x, void *y, int64_t n, const float *qw)
{
    DISPATCH(dsq_quantize_row_q8_0_avx2(x, y, n), dsq_quantize_row_q8_0_ref(x, y, n, qw));
}
void dsq_quantize_row_q8_1(const float *x, void *y, int64_t n, const float *qw)
{
    DISPATCH(dsq_quantize_row_q8_1_avx2(x, y, n), dsq_quantize_row_q8_1_ref(x, y, n, qw));
}

#define LEGACY_DEQ(t)                                                                              \
    void dsq_dequantize_row_##t(const void *x, float *y, int64_t n)                                \
    {                                                                                              \
        DISPATCH(dsq_dequantize_row_##t##_avx2(x, y, n), dsq_dequantize_row_##t##_ref(x, y, n));   \
    }
LEGACY_DEQ(q4_0)
LEGACY_DEQ(q4_1)
LEGACY_DEQ(q5_0)
LEGACY_DEQ(q5_1)
LEGACY_DEQ(q8_0)
LEGACY_DEQ(q8_1)

#define LEGACY_DOT(t, a)                                                                           \
    void dsq_vec_dot_##t##_##a(int64_t n, float *s, const void *x, const void *y)                  \
    {                                                                                              \
        DISPATCH(dsq_vec_dot_##t##_##a##_avx2(n, s, x, y), dsq_vec_dot_##t##_##a##_ref(n, s, x, y)); \
    }
LEGACY_DOT(q4_0, q8_0)
LEGACY_DOT(q4_1, q8_1)
LEGACY_DOT(q5_0, q8_0)
LEGACY_DOT(q5_1, q8_1)
LEGACY_DOT(q8_0, q8_0)

bool dsq_legacy_simd_active(void) { return USE_AVX2(); }
