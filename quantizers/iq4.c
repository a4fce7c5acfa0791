/* The non-linear 4-bit types iq4_nl (32-element blocks, one fp16 scale) and
 * iq4_xs (256-element super-blocks with 6-bit block scales): scalar
 * references that reproduce ggml bit for bit, and the public entry points,
 * which pick the AVX2 versions (quantizers/iq4_avx2.c) when the CPU has them.
 *
 * Source: quantize_row_iq4_nl_impl, quantize_iq4_nl, quantize_row_iq4_nl_ref,
 * quantize_iq4_xs and the dequantizers in ggml/src/ggml-quants.c at llama.cpp
 * c392e509, and the scalar dot products of ggml-cpu; algorithms-notes.md 2.8.
 * Every float expression keeps ggml's operand order; see quant_common.h. */
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "quantizers/quant_avx2.h"
#include "quantizers/quant_common.h"
#include "quantizers/quants.h"
#include "quantizers/quants_ref.h"

#define BS 32 /* elements per block, both types */

static inline int iq4_index(float v) { return dsq_best_index_int8(16, dsq_kvalues_iq4nl, v); }

/* Weights of one 32-block: x^2, or with an importance vector qw*sqrt(sigma2 + x^2). */
static void iq4_weights(const float *xb, const float *qw, float sigma2, float *w)
{
    if (qw)
        for (int j = 0; j < BS; ++j) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
    else
        for (int j = 0; j < BS; ++j) w[j] = xb[j] * xb[j];
}

/* Weighted sums of the levels picked at inverse scale id; stores the levels when Lb is given. */
static void iq4_sums(const float *xb, const float *w, float id, uint8_t *Lb, float *sumqx, float *sumq2)
{
    float sqx = 0, sq2 = 0;
    for (int j = 0; j < BS; ++j) {
        const int l = iq4_index(id * xb[j]);
        if (Lb) Lb[j] = (uint8_t)l;
        const float q = dsq_kvalues_iq4nl[l];
        sqx += w[j] * q * xb[j];
        sq2 += w[j] * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* The scale of one 32-block: a least-squares fit at the plain scale, then (ntry > 0)
 * the best of 2*ntry+1 nearby inverse scales. Lb gets the first pass's levels,
 * which only the ntry <= 0 variant keeps. Returns 0 for an all-zero block. */
static float iq4_block_scale(const float *xb, const float *w, uint8_t *Lb, int ntry)
{
    const int8_t *values = dsq_kvalues_iq4nl;
    float amax = 0, max = 0;
    for (int j = 0; j < BS; ++j) {
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < DSQ_GROUP_MAX_EPS) return 0;
    float d = ntry > 0 ? -max / values[0] : max / values[0];
    float sumqx, sumq2;
    iq4_sums(xb, w, 1 / d, Lb, &sumqx, &sumq2);
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        iq4_sums(xb, w, (itry + values[0]) / max, NULL, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void iq4_pack(const uint8_t *L, int n, uint8_t *qs)
{
    for (int i = 0; i < n / 32; ++i)
        for (int j = 0; j < 16; ++j) qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

static float iq4_sigma2(const float *x, int n)
{
    float sigma2 = 0;
    for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
    return sigma2 * (2.f / n);
}

/* ================================ iq4_nl ================================ */

static void iq4_nl_block(const float *x, dsq_block_iq4_nl *y, const float *qw, int ntry)
{
    float w[BS];
    uint8_t L[BS];
    memset(L, 8, sizeof L); /* level 8 (value 1) is the one nearest 0 */
    iq4_weights(x, qw, qw ? iq4_sigma2(x, BS) : 0.f, w);
    const float d = iq4_block_scale(x, w, L, ntry);
    y->d = dsq_f32_to_f16(d);
    if (ntry > 0) {
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < BS; ++j) L[j] = (uint8_t)iq4_index(id * x[j]);
    }
    iq4_pack(L, BS, y->qs);
}

void dsq_quantize_row_iq4_nl_scalar(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / BS; i++) iq4_nl_block(x + i * BS, &y[i], qw ? qw + i * BS : NULL, 7);
}

void dsq_quantize_row_iq4_nl_ref(const float *x, void *vy, int64_t n)
{
    /* ggml leaves the levels of an all-zero block uninitialised here; we write level 8 */
    dsq_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / BS; i++) iq4_nl_block(x + i * BS, &y[i], NULL, -1);
}

void dsq_dequantize_row_iq4_nl_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / BS; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int j = 0; j < BS / 2; ++j) {
            y[i * BS + j] = d * dsq_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[i * BS + j + BS / 2] = d * dsq_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void dsq_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_iq4_nl *x = vx;
    const dsq_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / BS; ++ib) {
        const float d = dsq_f16_to_f32(y[ib].d) * dsq_f16_to_f32(x[ib].d);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < BS / 2; ++j) {
            sumi1 += y[ib].qs[j] * dsq_kvalues_iq4nl[x[ib].qs[j] & 0xf];
            sumi2 += y[ib].qs[j + BS / 2] * dsq_kvalues_iq4nl[x[ib].qs[j] >> 4];
        }
        sumf += d * (sumi1 + sumi2);
    }
    *s = sumf;
}

/* ================================ iq4_xs ================================ */

/* Quantizes the 6-bit scale of each block against the super-block scale D =
 * -max_scale/32 (the float D, not its fp16 rounding, as ggml does), then picks
 * each block's levels at that scale. */
static void iq4_xs_finish(const float *x, const float *scales, float max_scale, dsq_block_iq4_xs *y, uint8_t *L)
{
    const float d = -max_scale / 32;
    y->d = dsq_f32_to_f16(d);
    const float id = d ? 1 / d : 0.f;
    uint16_t sh = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    for (int ib = 0; ib < DSQ_QK_K / BS; ++ib) {
        int l = dsq_nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        const float dl = d * l;
        const float idl = dl ? 1 / dl : 0.f;
        for (int j = 0; j < BS; ++j) L[ib * BS + j] = (uint8_t)iq4_index(idl * x[ib * BS + j]);
        l += 32;
        y->scales_l[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
        sh |= (uint16_t)((l >> 4) << (2 * ib));
    }
    y->scales_h = sh;
}

static void iq4_xs_superblock(const float *x, dsq_block_iq4_xs *y, const float *qw)
{
    const float sigma2 = qw ? iq4_sigma2(x, DSQ_QK_K) : 0.f;
    float scales[DSQ_QK_K / BS], w[BS];
    uint8_t L[DSQ_QK_K];
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < DSQ_QK_K / BS; ++ib) {
        iq4_weights(x + ib * BS, qw ? qw + ib * BS : NULL, sigma2, w);
        scales[ib] = iq4_block_scale(x + ib * BS, w, L + ib * BS, 7);
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    iq4_xs_finish(x, scales, max_scale, y, L);
    iq4_pack(L, DSQ_QK_K, y->qs);
}

void dsq_quantize_row_iq4_xs_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / DSQ_QK_K; i++)
        iq4_xs_superblock(x + i * DSQ_QK_K, &y[i], qw ? qw + i * DSQ_QK_K : NULL);
}

static inline int iq4_xs_block_scale(const dsq_block_iq4_xs *x, int ib)
{
    return ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x->scales_h >> 2 * ib) & 3) << 4);
}

void dsq_dequantize_row_iq4_xs_ref(const void *vx, float *y, int64_t n)
{
    const dsq_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) {
        const float d = dsq_f16_to_f32(x[i].d);
        for (int ib = 0; ib < DSQ_QK_K / BS; ++ib) {
            const float dl = d * (iq4_xs_block_scale(&x[i], ib) - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            float *yb = y + i * DSQ_QK_K + ib * BS;
            for (int j = 0; j < 16; ++j) {
                yb[j] = dl * dsq_kvalues_iq4nl[qs[j] & 0xf];
                yb[j + 16] = dl * dsq_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void dsq_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_iq4_xs *x = vx;
    const dsq_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t ibl = 0; ibl < n / DSQ_QK_K; ++ibl) {
        const float d4d8 = dsq_f16_to_f32(x[ibl].d) * y[ibl].d;
        for (int ib = 0; ib < DSQ_QK_K / BS; ++ib) {
            const float dl = d4d8 * (iq4_xs_block_scale(&x[ibl], ib) - 32);
            const uint8_t *qs = x[ibl].qs + 16 * ib;
            const int8_t *q8 = y[ibl].qs + BS * ib;
            int sumi1 = 0, sumi2 = 0;
            for (int j = 0; j < 16; ++j) {
                sumi1 += q8[j] * dsq_kvalues_iq4nl[qs[j] & 0xf];
                sumi2 += q8[j + 16] * dsq_kvalues_iq4nl[qs[j] >> 4];
            }
            sumf += dl * (sumi1 + sumi2);
        }
    }
    *s = sumf;
}

/* ============================ public entry points ============================ */

#if DSQ_HAVE_AVX2_PATHS
#define DISPATCH(call_avx2, call_ref)                                                              \
    do {                                                                                           \
        if (dsq_cpu_has_avx2_fma())                                                                \
            call_avx2;                                                                             \
        else                                                                                       \
            call_ref;                                                                              \
    } while (0)
#else
#define DISPATCH(call_avx2, call_ref) call_ref
#endif

void dsq_quantize_row_iq4_nl(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_iq4_nl *y = vy;
    int64_t done = 0;
    DISPATCH(done = dsq_quantize_iq4_nl_blocks_avx2(x, y, n / BS, qw), (void)0);
    for (int64_t i = done; i < n / BS; i++) iq4_nl_block(x + i * BS, &y[i], qw ? qw + i * BS : NULL, 7);
}

void dsq_quantize_row_iq4_xs(const float *x, void *y, int64_t n, const float *qw)
{
    DISPATCH(dsq_quantize_row_iq4_xs_avx2(x, y, n, qw), dsq_quantize_row_iq4_xs_ref(x, y, n, qw));
}

void dsq_dequantize_row_iq4_nl(const void *x, float *y, int64_t n)
{
    DISPATCH(dsq_dequantize_row_iq4_nl_avx2(x, y, n), dsq_dequantize_row_iq4_nl_ref(x, y, n));
}

void dsq_dequantize_row_iq4_xs(const void *x, float *y, int64_t n)
{
    DISPATCH(dsq_dequantize_row_iq4_xs_avx2(x, y, n), dsq_dequantize_row_iq4_xs_ref(x, y, n));
}

void dsq_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *x, const void *y)
{
    DISPATCH(dsq_vec_dot_iq4_nl_q8_0_avx2(n, s, x, y), dsq_vec_dot_iq4_nl_q8_0_ref(n, s, x, y));
}

void dsq_vec_dot_iq4_xs_q8_K(int64_t n, float *s, const void *x, const void *y)
{
    DISPATCH(dsq_vec_dot_iq4_xs_q8_K_avx2(n, s, x, y), dsq_vec_dot_iq4_xs_q8_K_ref(n, s, x, y));
}
