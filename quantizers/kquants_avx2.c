/* AVX2 versions of the k-quant row functions, chosen at run time by
 * quantizers/kquants.c (quantizers) and quantizers/kquants_dot.c (dots).
 *
 * Quantizers: ggml's searches (make_qkx2/3_quants, make_qx_quants,
 * make_q3_quants) run once per sub-block, and sub-blocks are independent. Here
 * one SIMD lane carries one sub-block: 8 lanes = 8 sub-blocks of a super-block,
 * each lane doing exactly the scalar operations of kquants.c in the same order
 * (vertical adds only, never a horizontal reduction, no FMA), with masks and
 * blends where the scalar code branches. So the bytes are identical to the
 * scalar reference, which is identical to ggml's. A lane that took a branch
 * the scalar code skips computes garbage (Inf/NaN) that is then discarded.
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

/* Largest sub-block: 32 elements (q4_K, q5_K). */
#define KQ_MAXN 32

/* ---------------------------------------------------------------------------
 * Lane helpers
 * ------------------------------------------------------------------------- */

/* kq_nearest_int on every lane, same bit trick. */
KQ_AVX2 static inline __m256i kv_nearest(__m256 f)
{
    __m256i i = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(12582912.f)));
    i = _mm256_and_si256(i, _mm256_set1_epi32(0x007fffff));
    return _mm256_sub_epi32(i, _mm256_set1_epi32(0x00400000));
}

KQ_AVX2 static inline __m256i kv_clamp(__m256i v, int lo, int hi)
{
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

/* b where mask, else a. */
KQ_AVX2 static inline __m256 kv_sel(__m256 a, __m256 b, __m256 mask)
{
    return _mm256_blendv_ps(a, b, mask);
}

KQ_AVX2 static inline __m256i kv_seli(__m256i a, __m256i b, __m256 mask)
{
    return _mm256_blendv_epi8(a, b, _mm256_castps_si256(mask));
}

KQ_AVX2 static inline bool kv_any(__m256 mask)
{
    return _mm256_movemask_ps(mask) != 0;
}

KQ_AVX2 static inline __m256 kv_abs(__m256 v)
{
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

KQ_AVX2 static inline __m256 kv_gt(__m256 a, __m256 b)
{
    return _mm256_cmp_ps(a, b, _CMP_GT_OQ);
}

/* Lane j of out[i] = src[j*stride + i] for i < n: one sub-block per lane. */
KQ_AVX2 static void kv_load_lanes(const float *src, int stride, int n, __m256 *out)
{
    float t[8 * KQ_MAXN] __attribute__((aligned(32)));
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < n; i++) t[8 * i + j] = src[j * stride + i];
    for (int i = 0; i < n; i++) out[i] = _mm256_load_ps(t + 8 * i);
}

/* Inverse for the levels: dst[j*stride + i] = lane j of Lv[i]. */
KQ_AVX2 static void kv_store_levels_u8(const __m256i *Lv, int n, uint8_t *dst, int stride)
{
    int32_t t[8 * KQ_MAXN] __attribute__((aligned(32)));
    for (int i = 0; i < n; i++) _mm256_store_si256((__m256i *)(t + 8 * i), Lv[i]);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < n; i++) dst[j * stride + i] = (uint8_t)t[8 * i + j];
}

/* ---------------------------------------------------------------------------
 * Searches, one sub-block per lane (see the scalar twins in kquants.c)
 * ------------------------------------------------------------------------- */

/* kq_make_qkx on 8 sub-blocks. */
KQ_AVX2 static void kv_make_qkx(int n, int nmax, const __m256 *xv, const __m256 *wv, __m256i *Lv, __m256 *scale_out,
                                __m256 *the_min_out, float rmin, float rdelta, int nstep, bool use_mad)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 mn = xv[0], mx = xv[0];
    __m256 sum_w = wv[0];
    __m256 sum_x = _mm256_mul_ps(wv[0], xv[0]);
    for (int i = 1; i < n; i++) {
        mn = _mm256_min_ps(xv[i], mn); /* (x < mn) ? x : mn, as the scalar if */
        mx = _mm256_max_ps(xv[i], mx);
        sum_w = _mm256_add_ps(sum_w, wv[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wv[i], xv[i]));
    }
    mn = kv_sel(mn, zero, kv_gt(mn, zero));
    const __m256 flat = _mm256_cmp_ps(mx, mn, _CMP_EQ_OQ);

    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(mx, mn));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.f), iscale);
    __m256 best = zero;
    for (int i = 0; i < n; i++) {
        __m256i l = kv_clamp(kv_nearest(_mm256_mul_ps(iscale, _mm256_sub_ps(xv[i], mn))), 0, nmax);
        Lv[i] = l;
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(l)), mn), xv[i]);
        diff = use_mad ? kv_abs(diff) : _mm256_mul_ps(diff, diff);
        best = _mm256_add_ps(best, _mm256_mul_ps(wv[i], diff));
    }

    __m256i Laux[KQ_MAXN];
    __m256 Lf[KQ_MAXN];
    for (int is = 0; is <= nstep; is++) {
        float c = rmin + rdelta * (float)is + (float)nmax;
        iscale = _mm256_div_ps(_mm256_set1_ps(c), _mm256_sub_ps(mx, mn));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; i++) {
            Laux[i] = kv_clamp(kv_nearest(_mm256_mul_ps(iscale, _mm256_sub_ps(xv[i], mn))), 0, nmax);
            Lf[i] = _mm256_cvtepi32_ps(Laux[i]);
            __m256 wl = _mm256_mul_ps(wv[i], Lf[i]);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, Lf[i]));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xv[i]));
        }
        __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 ok = _mm256_andnot_ps(flat, kv_gt(D, zero));
        if (!kv_any(ok)) continue;
        __m256 ts = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 tm = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        __m256 mpos = kv_gt(tm, zero);
        tm = kv_sel(tm, zero, mpos);
        ts = kv_sel(ts, _mm256_div_ps(sum_xl, sum_l2), mpos);
        __m256 cur = zero;
        for (int i = 0; i < n; i++) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(ts, Lf[i]), tm), xv[i]);
            diff = use_mad ? kv_abs(diff) : _mm256_mul_ps(diff, diff);
            cur = _mm256_add_ps(cur, _mm256_mul_ps(wv[i], diff));
        }
        __m256 upd = _mm256_and_ps(ok, _mm256_cmp_ps(cur, best, _CMP_LT_OQ));
        if (!kv_any(upd)) continue;
        for (int i = 0; i < n; i++) Lv[i] = kv_seli(Lv[i], Laux[i], upd);
        best = kv_sel(best, cur, upd);
        scale = kv_sel(scale, ts, upd);
        mn = kv_sel(mn, tm, upd);
    }
    for (int i = 0; i < n; i++) Lv[i] = _mm256_andnot_si256(_mm256_castps_si256(flat), Lv[i]);
    *scale_out = _mm256_andnot_ps(flat, scale);
    *the_min_out = _mm256_xor_ps(mn, _mm256_set1_ps(-0.0f)); /* -min, sign of zero included */
}

/* Signed max (largest |x|, first one on ties) and the all-zero mask. */
KQ_AVX2 static void kv_signed_max(int n, const __m256 *xv, __m256 *max_out, __m256 *tiny_out)
{
    __m256 amax = _mm256_setzero_ps(), max = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) {
        __m256 ax = kv_abs(xv[i]);
        __m256 m = kv_gt(ax, amax);
        amax = kv_sel(amax, ax, m);
        max = kv_sel(max, xv[i], m);
    }
    *max_out = max;
    *tiny_out = _mm256_cmp_ps(amax, _mm256_set1_ps(KQ_GROUP_MAX_EPS), _CMP_LT_OQ);
}

/* kq_make_qx on 8 sub-blocks; wv NULL means weights x^2. Lv receives l + nmax. */
KQ_AVX2 static void kv_make_qx(int n, int nmax, const __m256 *xv, const __m256 *wv, __m256i *Lv, __m256 *scale_out)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256i vnmax = _mm256_set1_epi32(nmax);
    __m256 max, tiny;
    kv_signed_max(n, xv, &max, &tiny);
    __m256 wx[KQ_MAXN], w[KQ_MAXN];
    for (int i = 0; i < n; i++) {
        w[i] = wv ? wv[i] : _mm256_mul_ps(xv[i], xv[i]);
        wx[i] = _mm256_mul_ps(w[i], xv[i]);
    }
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        __m256i l = kv_clamp(kv_nearest(_mm256_mul_ps(iscale, xv[i])), -nmax, nmax - 1);
        Lv[i] = _mm256_add_epi32(l, vnmax);
        __m256 lf = _mm256_cvtepi32_ps(l);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
    }
    __m256 scale = kv_sel(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    __m256i cand[KQ_MAXN];
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        float c = -((float)nmax + 0.1f * (float)is);
        iscale = _mm256_div_ps(_mm256_set1_ps(c), max);
        sumlx = suml2 = zero;
        for (int i = 0; i < n; i++) {
            cand[i] = kv_clamp(kv_nearest(_mm256_mul_ps(iscale, xv[i])), -nmax, nmax - 1);
            __m256 lf = _mm256_cvtepi32_ps(cand[i]);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
        }
        __m256 upd = _mm256_and_ps(kv_gt(suml2, zero),
                                   kv_gt(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2)));
        upd = _mm256_andnot_ps(tiny, upd);
        if (!kv_any(upd)) continue;
        for (int i = 0; i < n; i++) Lv[i] = kv_seli(Lv[i], _mm256_add_epi32(cand[i], vnmax), upd);
        __m256 ns = _mm256_div_ps(sumlx, suml2);
        scale = kv_sel(scale, ns, upd);
        best = kv_sel(best, _mm256_mul_ps(ns, sumlx), upd);
    }
    for (int i = 0; i < n; i++) Lv[i] = _mm256_andnot_si256(_mm256_castps_si256(tiny), Lv[i]);
    *scale_out = _mm256_andnot_ps(tiny, scale);
}

/* kq_make_q3 on 8 sub-blocks. A lane whose pass changed nothing would stop in
 * the scalar code; running it again changes nothing either, so the passes go
 * on while any lane still changes. Lv receives l + nmax. */
KQ_AVX2 static void kv_make_q3(int n, int nmax, const __m256 *xv, __m256i *Lv, __m256 *scale_out)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 max, tiny;
    kv_signed_max(n, xv, &max, &tiny);
    const __m256 live = _mm256_xor_ps(tiny, _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
    __m256 w[KQ_MAXN], wx[KQ_MAXN];
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        w[i] = _mm256_mul_ps(xv[i], xv[i]);
        wx[i] = _mm256_mul_ps(w[i], xv[i]);
        Lv[i] = kv_clamp(kv_nearest(_mm256_mul_ps(iscale, xv[i])), -nmax, nmax - 1);
        __m256 lf = _mm256_cvtepi32_ps(Lv[i]);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
    }
    for (int itry = 0; itry < 5; itry++) {
        __m256 changed = zero;
        for (int i = 0; i < n; i++) {
            __m256 lf = _mm256_cvtepi32_ps(Lv[i]);
            __m256 slx = _mm256_sub_ps(sumlx, _mm256_mul_ps(wx[i], lf));
            __m256 sl2 = _mm256_sub_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
            __m256i nl = kv_clamp(kv_nearest(_mm256_div_ps(_mm256_mul_ps(xv[i], sl2), slx)), -nmax, nmax - 1);
            __m256 diff = _mm256_xor_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(nl, Lv[i])),
                                        _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
            __m256 nf = _mm256_cvtepi32_ps(nl);
            __m256 slx2 = _mm256_add_ps(slx, _mm256_mul_ps(wx[i], nf));
            __m256 sl22 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(w[i], nf), nf));
            __m256 better = kv_gt(_mm256_mul_ps(_mm256_mul_ps(slx2, slx2), suml2),
                                  _mm256_mul_ps(_mm256_mul_ps(sumlx, sumlx), sl22));
            __m256 acc = _mm256_and_ps(_mm256_and_ps(kv_gt(slx, zero), diff), _mm256_and_ps(kv_gt(sl22, zero), better));
            acc = _mm256_and_ps(acc, live);
            Lv[i] = kv_seli(Lv[i], nl, acc);
            sumlx = kv_sel(sumlx, slx2, acc);
            suml2 = kv_sel(suml2, sl22, acc);
            changed = _mm256_or_ps(changed, acc);
        }
        if (!kv_any(changed)) break;
    }
    for (int i = 0; i < n; i++)
        Lv[i] = _mm256_andnot_si256(_mm256_castps_si256(tiny), _mm256_add_epi32(Lv[i], _mm256_set1_epi32(nmax)));
    *scale_out = _mm256_andnot_ps(tiny, _mm256_div_ps(sumlx, suml2));
}

/* dsq_kq_requant_ref with vector arithmetic: elementwise, so any lane layout
 * gives the scalar results. */
KQ_AVX2 static void kv_requant(const float *x, uint8_t *L, const dsq_kq_plan *p)
{
    const __m256i lo = _mm256_set1_epi32(p->lo), hi = _mm256_set1_epi32(p->hi), off = _mm256_set1_epi32(p->off);
    for (int j = 0; j < p->n_sub; j++) {
        if (!p->d[j]) continue;
        const __m256 d = _mm256_set1_ps(p->d[j]), dm = _mm256_set1_ps(p->dm[j]);
        for (int i = j * p->sub; i < (j + 1) * p->sub; i += 16) {
            __m256i l[2];
            for (int h = 0; h < 2; h++) {
                __m256 v = _mm256_div_ps(_mm256_add_ps(_mm256_loadu_ps(x + i + 8 * h), dm), d);
                l[h] = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(kv_nearest(v), lo), hi), off);
            }
            /* 16 int32 in 0..63 -> 16 bytes, in order */
            __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(l[0], l[1]), 0xD8);
            __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(L + i), b);
        }
    }
}

/* ---------------------------------------------------------------------------
 * Row quantizers
 * ------------------------------------------------------------------------- */

/* Per lane: sum of x^2 over the sub-block, in the scalar order. */
KQ_AVX2 static __m256 kv_sum_sq(int n, const __m256 *xv)
{
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) s = _mm256_add_ps(s, _mm256_mul_ps(xv[i], xv[i]));
    return s;
}

/* The _impl weights qw * sqrt(sigma2 + x^2) per lane, and their per-lane sums. */
KQ_AVX2 static __m256 kv_imat_weights(int n, const __m256 *xv, const __m256 *qv, float sigma2, __m256 *wv)
{
    __m256 s2 = _mm256_set1_ps(sigma2), sw = _mm256_setzero_ps();
    for (int i = 0; i < n; i++)
        wv[i] = _mm256_mul_ps(qv[i], _mm256_sqrt_ps(_mm256_add_ps(s2, _mm256_mul_ps(xv[i], xv[i]))));
    for (int i = 0; i < n; i++) sw = _mm256_add_ps(sw, wv[i]);
    return sw;
}

static float kv_block_sum_sq(const float *x)
{
    float s = 0;
    for (int i = 0; i < KQ_QK; i++) s += x[i] * x[i];
    return s;
}

void KQ_AVX2 dsq_kq_avx2_quantize_row_q2_K(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q2_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], mins[16], sw[16];
    dsq_kq_plan p;
    __m256 xv[16], wv[16], qv[16], sc, mn;
    __m256i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        float sigma2 = qw ? kv_block_sum_sq(x) / KQ_QK : 0;
        for (int g = 0; g < 2; g++) {
            kv_load_lanes(x + 128 * g, 16, 16, xv);
            if (!qw) {
                for (int l = 0; l < 16; l++) wv[l] = kv_abs(xv[l]);
                kv_make_qkx(16, 3, xv, wv, Lv, &sc, &mn, -0.5f, 0.1f, 15, true);
            } else {
                kv_load_lanes(qw + KQ_QK * i + 128 * g, 16, 16, qv);
                _mm256_storeu_ps(sw + 8 * g, kv_imat_weights(16, xv, qv, sigma2, wv));
                kv_make_qkx(16, 3, xv, wv, Lv, &sc, &mn, -0.9f, 0.05f, 36, false);
            }
            _mm256_storeu_ps(scales + 8 * g, sc);
            _mm256_storeu_ps(mins + 8 * g, mn);
            kv_store_levels_u8(Lv, 16, L + 128 * g, 16);
        }
        if (qw)
            dsq_kq_q2_plan_imat(&y[i], scales, mins, sw, &p);
        else
            dsq_kq_q2_plan_ref(&y[i], scales, mins, &p);
        kv_requant(x, L, &p);
        dsq_kq_q2_pack(&y[i], L);
    }
}

void KQ_AVX2 dsq_kq_avx2_quantize_row_q3_K(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q3_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], sw[16];
    dsq_kq_plan p;
    __m256 xv[16], wv[16], qv[16], sc;
    __m256i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        float sigma2 = qw ? 2 * kv_block_sum_sq(x) / KQ_QK : 0;
        for (int g = 0; g < 2; g++) {
            kv_load_lanes(x + 128 * g, 16, 16, xv);
            if (!qw) {
                kv_make_q3(16, 4, xv, Lv, &sc);
            } else {
                kv_load_lanes(qw + KQ_QK * i + 128 * g, 16, 16, qv);
                _mm256_storeu_ps(sw + 8 * g, kv_imat_weights(16, xv, qv, sigma2, wv));
                kv_make_qx(16, 4, xv, wv, Lv, &sc);
            }
            _mm256_storeu_ps(scales + 8 * g, sc);
            kv_store_levels_u8(Lv, 16, L + 128 * g, 16);
        }
        if (qw)
            dsq_kq_q3_plan_imat(&y[i], scales, sw, &p);
        else
            dsq_kq_q3_plan_ref(&y[i], scales, &p);
        kv_requant(x, L, &p);
        dsq_kq_q3_pack(&y[i], L);
    }
}

/* The eight sub-block searches of q4_K (nmax 15) or q5_K (nmax 31). */
KQ_AVX2 static void kv_q45_search(const float *x, const float *qw, int nmax, uint8_t *L, float *scales, float *mins,
                                  float *sw)
{
    __m256 xv[32], wv[32], qv[32], sc, mn;
    __m256i Lv[32];
    kv_load_lanes(x, 32, 32, xv);
    if (!qw) {
        __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(kv_sum_sq(32, xv), _mm256_set1_ps(32.f)));
        for (int l = 0; l < 32; l++) wv[l] = _mm256_add_ps(av_x, kv_abs(xv[l]));
        if (nmax == 15)
            kv_make_qkx(32, 15, xv, wv, Lv, &sc, &mn, -1.f, 0.1f, 20, false);
        else
            kv_make_qkx(32, 31, xv, wv, Lv, &sc, &mn, -0.5f, 0.1f, 15, false);
    } else {
        float sigma2 = 2 * kv_block_sum_sq(x) / KQ_QK;
        kv_load_lanes(qw, 32, 32, qv);
        _mm256_storeu_ps(sw, kv_imat_weights(32, xv, qv, sigma2, wv));
        kv_make_qkx(32, nmax, xv, wv, Lv, &sc, &mn, -0.9f, 0.05f, 36, false);
    }
    _mm256_storeu_ps(scales, sc);
    _mm256_storeu_ps(mins, mn);
    kv_store_levels_u8(Lv, 32, L, 32);
}

void KQ_AVX2 dsq_kq_avx2_quantize_row_q4_K(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q4_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[8], mins[8], sw[8];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        kv_q45_search(x, qw ? qw + KQ_QK * i : NULL, 15, L, scales, mins, sw);
        if (qw)
            dsq_kq_q45_plan_imat(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, sw, 15, false, &p);
        else
            dsq_kq_q45_plan_ref(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, 15, &p);
        kv_requant(x, L, &p);
        dsq_kq_q4_pack(&y[i], L);
    }
}

void KQ_AVX2 dsq_kq_avx2_quantize_row_q5_K(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q5_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[8], mins[8], sw[8];
    dsq_kq_plan p;
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        kv_q45_search(x, qw ? qw + KQ_QK * i : NULL, 31, L, scales, mins, sw);
        if (qw)
            dsq_kq_q45_plan_imat(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, sw, 31, true, &p);
        else
            dsq_kq_q45_plan_ref(y[i].scales, &y[i].d, &y[i].dmin, scales, mins, 31, &p);
        kv_requant(x, L, &p);
        dsq_kq_q5_pack(&y[i], L);
    }
}

void KQ_AVX2 dsq_kq_avx2_quantize_row_q6_K(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q6_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16];
    dsq_kq_plan p;
    __m256 xv[16], qv[16], sc;
    __m256i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        for (int g = 0; g < 2; g++) {
            kv_load_lanes(x + 128 * g, 16, 16, xv);
            if (qw) kv_load_lanes(qw + KQ_QK * i + 128 * g, 16, 16, qv);
            kv_make_qx(16, 32, xv, qw ? qv : NULL, Lv, &sc);
            _mm256_storeu_ps(scales + 8 * g, sc);
            kv_store_levels_u8(Lv, 16, L + 128 * g, 16);
        }
        if (!dsq_kq_q6_plan(&y[i], scales, &p)) continue;
        kv_requant(x, L, &p);
        dsq_kq_q6_pack(&y[i], L);
    }
}

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
