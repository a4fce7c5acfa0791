/* k-quant quantizers (q2_K .. q6_K, and q8_K for activations): the scalar
 * reference versions and the dispatch to the AVX2 ones (kquants_avx2.c).
 * Dequantizers and dot products are in kquants_dot.c.
 *
 * They follow ggml/src/ggml-quants.c at llama.cpp c392e509:
 * quantize_row_<t>_ref without an importance vector, quantize_row_<t>_impl
 * with one, and the helpers make_qx_quants, make_q3_quants, make_qkx2_quants,
 * make_qkx3_quants, make_qp_quants. Every float expression keeps ggml's operand
 * order and rounding steps (one rounding per operation, no FMA: the build uses
 * -ffp-contract=off), so the bytes equal ggml's; see ../shared/vectors/README.md.
 * Integer truncations (a level stored in a uint8_t before it is clamped, for
 * instance) are kept as well, because they decide bytes in corner cases. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "quantizers/kquants_internal.h"
#include "quantizers/kquants_ref.h"
#include "quantizers/quants.h"

static inline float kq_h2f(uint16_t h)
{
    return dsq_f16_to_f32(h);
}

static inline uint16_t kq_f2h(float f)
{
    return dsq_f32_to_f16(f);
}

/* ---------------------------------------------------------------------------
 * Searches (one sub-block each)
 * ------------------------------------------------------------------------- */

/* make_qx_quants with rmse_type 1: symmetric levels l in [-nmax, nmax-1] for a
 * scale chosen among 19 candidates by weighted least squares. Weights are qw,
 * or x^2 without qw. L receives l + nmax. */
static float kq_make_qx(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = kq_clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = kq_clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + kq_clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse: symmetric rounding, then up to five passes of
 * coordinate descent on the x^2-weighted error. L receives l + nmax. */
static float kq_make_q3(int n, int nmax, const float *x, uint8_t *Lout)
{
    int8_t L[16]; /* signed levels while searching; n <= 16 */
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(Lout, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = kq_clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            int nl = kq_clampi(kq_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) Lout[i] = (uint8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* make_qkx2_quants and make_qkx3_quants (identical when weights are given, as
 * they always are here): asymmetric levels L in [0, nmax] with a min <= 0,
 * fitting scale and min by weighted least squares over nstep+1 candidate
 * ranges. Returns the scale; *the_min receives -min. */
static float kq_make_qkx(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                         float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)kq_clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = kq_clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * (float)Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            cur += w[i] * diff;
        }
        if (cur < best) {
            memcpy(L, Laux, (size_t)n);
            best = cur;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* make_qp_quants: levels in [0, nmax] for n non-negative values (the sub-block
 * scales or mins of an _impl quantizer). L is uint8_t on purpose: ggml stores
 * unclamped and negative levels into it and reads them back wrapped. */
static float kq_make_qp(int n, int nmax, const float *x, uint8_t *L, const float *w)
{
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (!max) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)kq_nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * (float)L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = kq_nearest_int(iscale_is * x[i]);
            if (l > nmax) l = nmax;
            float diff = x[i] - scale_is * (float)l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = kq_nearest_int(iscale * x[i]);
        if (l > nmax) l = nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            int nl = kq_nearest_int(x[i] * sl2 / slx);
            if (nl > nmax) nl = nmax;
            if (nl == L[i]) continue;
            slx += w[i] * x[i] * (float)nl;
            sl2 += w[i] * (float)nl * (float)nl;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    return sumlx / suml2;
}

/* ---------------------------------------------------------------------------
 * Scale encoding, requantization and packing (shared with the AVX2 file)
 * ------------------------------------------------------------------------- */

static void kq_plan_init(dsq_kq_plan *p, int n_sub, int sub, int lo, int hi, int off)
{
    p->n_sub = n_sub;
    p->sub = sub;
    p->lo = lo;
    p->hi = hi;
    p->off = off;
    memset(p->dm, 0, sizeof p->dm);
}

void dsq_kq_requant_ref(const float *x, uint8_t *L, const dsq_kq_plan *p)
{
    for (int j = 0; j < p->n_sub; j++) {
        const float d = p->d[j], dm = p->dm[j];
        if (!d) continue;
        for (int i = j * p->sub; i < (j + 1) * p->sub; i++)
            L[i] = (uint8_t)(kq_clampi(kq_nearest_int((x[i] + dm) / d), p->lo, p->hi) + p->off);
    }
}

/* Two-bit fields of q2_K and q3_K: byte 32h+l holds elements 128h+l+32k at bits 2k. */
static void kq_pack_2bit(uint8_t *qs, const uint8_t *L)
{
    for (int j = 0; j < KQ_QK; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void dsq_kq_q2_plan_ref(dsq_block_q2_K *y, const float *scales, const float *mins, dsq_kq_plan *p)
{
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)kq_nearest_int(iscale * scales[j]);
        y->d = kq_f2h(max_scale / 15.f);
    } else {
        memset(y->scales, 0, 16);
        y->d = kq_f2h(0.f);
    }
    if (max_min > 0) {
        float iscale = 15.f / max_min;
        for (int j = 0; j < 16; j++)
            y->scales[j] = (uint8_t)(y->scales[j] | ((unsigned)kq_nearest_int(iscale * mins[j]) << 4));
        y->dmin = kq_f2h(max_min / 15.f);
    } else {
        y->dmin = kq_f2h(0.f);
    }
    kq_plan_init(p, 16, 16, 0, 3, 0);
    for (int j = 0; j < 16; j++) {
        p->d[j] = kq_h2f(y->d) * (float)(y->scales[j] & 0xF);
        p->dm[j] = kq_h2f(y->dmin) * (float)(y->scales[j] >> 4);
    }
}

void dsq_kq_q2_plan_imat(dsq_block_q2_K *y, const float *scales, const float *mins, const float *sw, dsq_kq_plan *p)
{
    uint8_t Ls[16], Lm[16];
    float dm = kq_make_qp(16, 15, scales, Ls, sw);
    float mm = kq_make_qp(16, 15, mins, Lm, sw);
    y->d = kq_f2h(dm);
    y->dmin = kq_f2h(mm);
    dm = kq_h2f(y->d);
    mm = kq_h2f(y->dmin);
    for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    kq_plan_init(p, 16, 16, 0, 3, 0);
    for (int j = 0; j < 16; j++) {
        p->d[j] = dm * (float)(y->scales[j] & 0xF);
        p->dm[j] = mm * (float)(y->scales[j] >> 4);
    }
}

void dsq_kq_q2_pack(dsq_block_q2_K *y, const uint8_t *L)
{
    kq_pack_2bit(y->qs, L);
}

/* Levels 0..63 of the sixteen q3_K sub-blocks into the 12 scale bytes, and the plan. */
static void kq_q3_put_scales(dsq_block_q3_K *y, const int *lv, dsq_kq_plan *p)
{
    uint8_t *s = y->scales;
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        int l = lv[j];
        if (j < 8)
            s[j] = (uint8_t)(l & 0xF);
        else
            s[j - 8] = (uint8_t)(s[j - 8] | ((l & 0xF) << 4));
        l >>= 4;
        s[j % 4 + 8] = (uint8_t)(s[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    kq_plan_init(p, 16, 16, -4, 3, 4);
    for (int j = 0; j < 16; j++) p->d[j] = kq_h2f(y->d) * (float)(int8_t)(dsq_kq_q3_scale(s, j) - 32);
}

void dsq_kq_q3_plan_ref(dsq_block_q3_K *y, const float *scales, dsq_kq_plan *p)
{
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        float a = fabsf(scales[j]);
        if (a > amax) {
            amax = a;
            max_scale = scales[j];
        }
    }
    int lv[16] = {0};
    if (max_scale) {
        float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) {
            int8_t l = (int8_t)kq_nearest_int(iscale * scales[j]);
            lv[j] = kq_clampi(l, -32, 31) + 32;
        }
        y->d = kq_f2h(1 / iscale);
    } else {
        y->d = kq_f2h(0.f);
    }
    kq_q3_put_scales(y, lv, p);
}

void dsq_kq_q3_plan_imat(dsq_block_q3_K *y, const float *scales, const float *sw, dsq_kq_plan *p)
{
    uint8_t Ls[16];
    float d_block = kq_make_qx(16, 32, scales, Ls, sw);
    int lv[16];
    for (int j = 0; j < 16; j++) lv[j] = Ls[j];
    y->d = kq_f2h(d_block);
    kq_q3_put_scales(y, lv, p);
}

/* Levels 0..7: the high bit goes to hmask (element e: byte e%32, bit e/32), the rest to qs. */
void dsq_kq_q3_pack(dsq_block_q3_K *y, const uint8_t *L)
{
    uint8_t Lu[KQ_QK];
    memset(y->hmask, 0, sizeof y->hmask);
    for (int j = 0; j < KQ_QK; j++) {
        y->hmask[j % 32] = (uint8_t)(y->hmask[j % 32] | ((L[j] >> 2) << (j / 32)));
        Lu[j] = L[j] & 3;
    }
    kq_pack_2bit(y->qs, Lu);
}

/* q4_K/q5_K 6-bit scale and min levels into 12 bytes, with ggml's uint8 arithmetic. */
static void kq_pack_scale_min(uint8_t *s, const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] = (uint8_t)(s[j - 4] | ((ls[j] >> 4) << 6));
            s[j] = (uint8_t)(s[j] | ((lm[j] >> 4) << 6));
        }
    }
}

static void kq_q45_put_plan(const uint8_t *s12, uint16_t d16, uint16_t dmin16, int nmax, dsq_kq_plan *p)
{
    kq_plan_init(p, 8, 32, 0, nmax, 0);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        dsq_kq_scale_min(j, s12, &sc, &m);
        p->d[j] = kq_h2f(d16) * (float)sc;
        p->dm[j] = kq_h2f(dmin16) * (float)m;
    }
}

void dsq_kq_q45_plan_ref(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins, int nmax,
                     dsq_kq_plan *p)
{
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)kq_nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)kq_nearest_int(inv_min * mins[j]);
        if (ls[j] > 63) ls[j] = 63;
        if (lm[j] > 63) lm[j] = 63;
    }
    kq_pack_scale_min(s12, ls, lm);
    *d = kq_f2h(max_scale / 63.f);
    *dmin = kq_f2h(max_min / 63.f);
    kq_q45_put_plan(s12, *d, *dmin, nmax, p);
}

void dsq_kq_q45_plan_imat(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins,
                      const float *sw, int nmax, bool clamp63, dsq_kq_plan *p)
{
    uint8_t ls[8], lm[8];
    float d_block = kq_make_qp(8, 63, scales, ls, sw);
    float m_block = kq_make_qp(8, 63, mins, lm, sw);
    if (clamp63)
        for (int j = 0; j < 8; j++) {
            if (ls[j] > 63) ls[j] = 63;
            if (lm[j] > 63) lm[j] = 63;
        }
    kq_pack_scale_min(s12, ls, lm);
    *d = kq_f2h(d_block);
    *dmin = kq_f2h(m_block);
    kq_q45_put_plan(s12, *d, *dmin, nmax, p);
}

void dsq_kq_q4_pack(dsq_block_q4_K *y, const uint8_t *L)
{
    uint8_t *q = y->qs;
    for (int j = 0; j < KQ_QK; j += 64, q += 32)
        for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

void dsq_kq_q5_pack(dsq_block_q5_K *y, const uint8_t *L)
{
    uint8_t *ql = y->qs;
    memset(y->qh, 0, sizeof y->qh);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < KQ_QK; n += 64, ql += 32) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                y->qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                y->qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
}

bool dsq_kq_q6_plan(dsq_block_q6_K *y, const float *scales, dsq_kq_plan *p)
{
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        float a = fabsf(scales[j]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[j];
        }
    }
    if (max_abs < KQ_GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        y->d = kq_f2h(0.f);
        return false;
    }
    float iscale = -128.f / max_scale;
    y->d = kq_f2h(1 / iscale);
    for (int j = 0; j < 16; j++) {
        int l = kq_nearest_int(iscale * scales[j]);
        y->scales[j] = (int8_t)(l < 127 ? l : 127);
    }
    kq_plan_init(p, 16, 16, -32, 31, 32);
    for (int j = 0; j < 16; j++) p->d[j] = kq_h2f(y->d) * (float)y->scales[j];
    return true;
}

void dsq_kq_q6_pack(dsq_block_q6_K *y, const uint8_t *L)
{
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < KQ_QK; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
            ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
            qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
        }
    }
}

/* ---------------------------------------------------------------------------
 * Scalar row quantizers: search, encode the scales, requantize, pack
 * ------------------------------------------------------------------------- */

/* Sum of squares in ggml's order (the _impl sigma2, q4_K/q5_K's av_x). */
static float kq_sum_sq(const float *x, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

/* The _impl weights qw * sqrt(sigma2 + x^2) of one sub-block and their sum. */
static float kq_imat_weights(const float *x, const float *qw, float sigma2, float *w, int n)
{
    float sumw = 0;
    for (int l = 0; l < n; l++) w[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
    for (int l = 0; l < n; l++) sumw += w[l];
    return sumw;
}

void dsq_quantize_row_q2_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q2_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], mins[16], sw[16], w[16];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        if (!qw) {
            for (int j = 0; j < 16; j++) {
                for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
                scales[j] = kq_make_qkx(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            }
            dsq_kq_q2_plan_ref(&y[i], scales, mins, &p);
        } else {
            /* q2_K's _impl uses sigma2 = sum/256, without the factor 2 of the others. */
            float sigma2 = kq_sum_sq(x, KQ_QK) / KQ_QK;
            for (int j = 0; j < 16; j++) {
                sw[j] = kq_imat_weights(x + 16 * j, qw + KQ_QK * i + 16 * j, sigma2, w, 16);
                scales[j] = kq_make_qkx(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
            }
            dsq_kq_q2_plan_imat(&y[i], scales, mins, sw, &p);
        }
        dsq_kq_requant_ref(x, L, &p);
        dsq_kq_q2_pack(&y[i], L);
    }
}

void dsq_quantize_row_q3_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q3_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], sw[16], w[16];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        if (!qw) {
            for (int j = 0; j < 16; j++) scales[j] = kq_make_q3(16, 4, x + 16 * j, L + 16 * j);
            dsq_kq_q3_plan_ref(&y[i], scales, &p);
        } else {
            float sigma2 = 2 * kq_sum_sq(x, KQ_QK) / KQ_QK;
            for (int j = 0; j < 16; j++) {
                sw[j] = kq_imat_weights(x + 16 * j, qw + KQ_QK * i + 16 * j, sigma2, w, 16);
                scales[j] = kq_make_qx(16, 4, x + 16 * j, L + 16 * j, w);
            }
            dsq_kq_q3_plan_imat(&y[i], scales, sw, &p);
        }
        dsq_kq_requant_ref(x, L, &p);
        dsq_kq_q3_pack(&y[i], L);
    }
}

/* The searches of q4_K (nmax 15) and q5_K (nmax 31) for one super-block. */
static void kq_q45_search(const float *x, const float *qw, int nmax, uint8_t *L, float *scales, float *mins,
                          float *sw)
{
    float w[32];
    if (!qw) {
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            float av_x = sqrtf(kq_sum_sq(xs, 32) / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
            if (nmax == 15)
                scales[j] = kq_make_qkx(32, 15, xs, w, L + 32 * j, &mins[j], -1.f, 0.1f, 20, false);
            else
                scales[j] = kq_make_qkx(32, 31, xs, w, L + 32 * j, &mins[j], -0.5f, 0.1f, 15, false);
        }
        return;
    }
    float sigma2 = 2 * kq_sum_sq(x, KQ_QK) / KQ_QK;
    for (int j = 0; j < 8; j++) {
        sw[j] = kq_imat_weights(x + 32 * j, qw + 32 * j, sigma2, w, 32);
        scales[j] = kq_make_qkx(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
    }
}

void dsq_quantize_row_q4_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q4_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[8], mins[8], sw[8];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        kq_q45_search(x, qw ? qw + KQ_QK * i : NULL, 15, L, scales, mins, sw);
        if (qw)
            dsq_kq_q45_plan_imat(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, sw, 15, false, &p);
        else
            dsq_kq_q45_plan_ref(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, 15, &p);
        dsq_kq_requant_ref(x, L, &p);
        dsq_kq_q4_pack(&y[i], L);
    }
}

void dsq_quantize_row_q5_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q5_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[8], mins[8], sw[8];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        kq_q45_search(x, qw ? qw + KQ_QK * i : NULL, 31, L, scales, mins, sw);
        if (qw)
            dsq_kq_q45_plan_imat(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, sw, 31, true, &p);
        else
            dsq_kq_q45_plan_ref(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, 31, &p);
        dsq_kq_requant_ref(x, L, &p);
        dsq_kq_q5_pack(&y[i], L);
    }
}

void dsq_quantize_row_q6_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q6_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        /* With an imatrix, q6_K weighs by the raw importance (no sigma2 term). */
        for (int j = 0; j < 16; j++)
            scales[j] = kq_make_qx(16, 32, x + 16 * j, L + 16 * j, qw ? qw + KQ_QK * i + 16 * j : NULL);
        if (!dsq_kq_q6_plan(&y[i], scales, &p)) continue;
        dsq_kq_requant_ref(x, L, &p);
        dsq_kq_q6_pack(&y[i], L);
    }
}

/* quantize_row_q8_K_ref: the activation quantizer of the k-quant dot products.
 * ggml leaves bsums unwritten for an all-zero block; here they are 0. */
void dsq_quantize_row_q8_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    dsq_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        float max = 0, amax = 0;
        for (int j = 0; j < KQ_QK; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (!amax) continue;
        float iscale = -127.f / max;
        for (int j = 0; j < KQ_QK; j++) {
            int v = kq_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------- */

bool dsq_kquants_simd_active(void)
{
#if DSQ_KQ_HAVE_AVX2
    return dsq_cpu_has(DSQ_CPU_AVX2);
#else
    return false;
#endif
}

#if DSQ_KQ_HAVE_AVX2
/* The widest copy the CPU runs; every copy gives the reference's bytes. */
#define KQ_QUANT(t)                                                                                \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw)                 \
    {                                                                                              \
        if (dsq_cpu_has(DSQ_CPU_AVX512F))                                                          \
            dsq_kq_avx512_quantize_row_##t(x, y, n, qw);                                           \
        else if (dsq_cpu_has(DSQ_CPU_AVX2))                                                        \
            dsq_kq_avx2_quantize_row_##t(x, y, n, qw);                                             \
        else                                                                                       \
            dsq_quantize_row_##t##_ref(x, y, n, qw);                                               \
    }
#define KQ_QUANT_AVX2(t)                                                                           \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw)                 \
    {                                                                                              \
        if (dsq_cpu_has(DSQ_CPU_AVX2))                                                             \
            dsq_kq_avx2_quantize_row_##t(x, y, n, qw);                                             \
        else                                                                                       \
            dsq_quantize_row_##t##_ref(x, y, n, qw);                                               \
    }
#else
#define KQ_QUANT(t)                                                                                \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw)                 \
    {                                                                                              \
        dsq_quantize_row_##t##_ref(x, y, n, qw);                                                   \
    }
#define KQ_QUANT_AVX2(t) KQ_QUANT(t)
#endif

KQ_QUANT(q2_K)
KQ_QUANT(q3_K)
KQ_QUANT(q4_K)
KQ_QUANT(q5_K)
KQ_QUANT(q6_K)
KQ_QUANT_AVX2(q8_K)
