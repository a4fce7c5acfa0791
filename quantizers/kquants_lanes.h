/* The k-quant row quantizers with one sub-block per SIMD lane, written once
 * for KQ_W lanes: 8 (AVX2, quantizers/kquants_avx2.c) or 16 (AVX-512F,
 * quantizers/kquants_avx512.c). The includer defines KQ_W, KQ_TARGET (the
 * function attribute of its instruction set, or nothing when its command line
 * carries it) and KQ_ROW(t) (the exported name of type t's row function).
 *
 * ggml's searches (make_qkx2/3_quants, make_qx_quants, make_q3_quants) run once
 * per sub-block, and sub-blocks are independent. Each lane does exactly the
 * scalar operations of kquants.c in the same order (vertical adds only, never a
 * horizontal reduction, no FMA), with masks and blends where the scalar code
 * branches, so the bytes are the scalar reference's, which are ggml's, whatever
 * the width. A lane that took a branch the scalar code skips computes garbage
 * (Inf/NaN) that is then discarded. q2_K, q3_K and q6_K have 16 sub-blocks of
 * 16 per super-block (two passes of 8 lanes, or one of 16); q4_K and q5_K have
 * 8 of 32, so 16 lanes carry two super-blocks at once. */
#ifndef DSQ_QUANTIZERS_KQUANTS_LANES_H
#define DSQ_QUANTIZERS_KQUANTS_LANES_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quantizers/kquants_internal.h"

/* Largest sub-block: 32 elements (q4_K, q5_K). */
#define KQ_MAXN 32

/* ---------------------------------------------------------------------------
 * Lane operations: vectors of floats (kv_f), of int32 (kv_i) and lane masks
 * (kv_m: a vector of all-ones/zero lanes on AVX2, a bit mask on AVX-512).
 * ------------------------------------------------------------------------- */

#if KQ_W == 8
typedef __m256 kv_f;
typedef __m256i kv_i;
typedef __m256 kv_m;
#define kv_set1 _mm256_set1_ps
#define kv_zero _mm256_setzero_ps
#define kv_add _mm256_add_ps
#define kv_sub _mm256_sub_ps
#define kv_mul _mm256_mul_ps
#define kv_div _mm256_div_ps
#define kv_min _mm256_min_ps
#define kv_max _mm256_max_ps
#define kv_sqrt _mm256_sqrt_ps
#define kv_cvt _mm256_cvtepi32_ps
#define kv_load _mm256_load_ps
#define kv_loadu _mm256_loadu_ps
#define kv_storeu _mm256_storeu_ps
#define ki_set1 _mm256_set1_epi32
#define ki_add _mm256_add_epi32
#define ki_sub _mm256_sub_epi32
#define ki_and _mm256_and_si256
#define ki_xor _mm256_xor_si256
#define ki_min _mm256_min_epi32
#define ki_max _mm256_max_epi32
#define kv_as_i _mm256_castps_si256
#define ki_as_f _mm256_castsi256_ps
#define km_none _mm256_setzero_ps
KQ_TARGET static inline void ki_store(int32_t *p, kv_i v) { _mm256_store_si256((__m256i *)p, v); }
KQ_TARGET static inline kv_m kv_gt(kv_f a, kv_f b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
KQ_TARGET static inline kv_m kv_lt(kv_f a, kv_f b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
KQ_TARGET static inline kv_m kv_eq(kv_f a, kv_f b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
KQ_TARGET static inline kv_m kv_neq(kv_f a, kv_f b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
KQ_TARGET static inline kv_m ki_eq(kv_i a, kv_i b) { return ki_as_f(_mm256_cmpeq_epi32(a, b)); }
KQ_TARGET static inline kv_m km_and(kv_m a, kv_m b) { return _mm256_and_ps(a, b); }
KQ_TARGET static inline kv_m km_or(kv_m a, kv_m b) { return _mm256_or_ps(a, b); }
/* b and not a */
KQ_TARGET static inline kv_m km_andnot(kv_m a, kv_m b) { return _mm256_andnot_ps(a, b); }
KQ_TARGET static inline kv_m km_not(kv_m a) { return _mm256_xor_ps(a, ki_as_f(_mm256_set1_epi32(-1))); }
KQ_TARGET static inline bool km_any(kv_m m) { return _mm256_movemask_ps(m) != 0; }
/* b where m, else a */
KQ_TARGET static inline kv_f kv_sel(kv_f a, kv_f b, kv_m m) { return _mm256_blendv_ps(a, b, m); }
KQ_TARGET static inline kv_i ki_sel(kv_i a, kv_i b, kv_m m) { return _mm256_blendv_epi8(a, b, kv_as_i(m)); }
/* 0 where m, else v */
KQ_TARGET static inline kv_f kv_zero_if(kv_m m, kv_f v) { return _mm256_andnot_ps(m, v); }
KQ_TARGET static inline kv_i ki_zero_if(kv_m m, kv_i v) { return _mm256_andnot_si256(kv_as_i(m), v); }
/* Eight int32 lanes in 0..255 to eight bytes, in order. */
KQ_TARGET static inline void ki_store_u8(uint8_t *dst, kv_i v)
{
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packus_epi16(w, w));
}
#elif KQ_W == 16
typedef __m512 kv_f;
typedef __m512i kv_i;
typedef __mmask16 kv_m;
#define kv_set1 _mm512_set1_ps
#define kv_zero _mm512_setzero_ps
#define kv_add _mm512_add_ps
#define kv_sub _mm512_sub_ps
#define kv_mul _mm512_mul_ps
#define kv_div _mm512_div_ps
#define kv_min _mm512_min_ps
#define kv_max _mm512_max_ps
#define kv_sqrt _mm512_sqrt_ps
#define kv_cvt _mm512_cvtepi32_ps
#define kv_load _mm512_load_ps
#define kv_loadu _mm512_loadu_ps
#define kv_storeu _mm512_storeu_ps
#define ki_set1 _mm512_set1_epi32
#define ki_add _mm512_add_epi32
#define ki_sub _mm512_sub_epi32
#define ki_and _mm512_and_si512
#define ki_xor _mm512_xor_si512
#define ki_min _mm512_min_epi32
#define ki_max _mm512_max_epi32
#define kv_as_i _mm512_castps_si512
#define ki_as_f _mm512_castsi512_ps
#define km_none() ((kv_m)0)
KQ_TARGET static inline void ki_store(int32_t *p, kv_i v) { _mm512_store_si512(p, v); }
KQ_TARGET static inline kv_m kv_gt(kv_f a, kv_f b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
KQ_TARGET static inline kv_m kv_lt(kv_f a, kv_f b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
KQ_TARGET static inline kv_m kv_eq(kv_f a, kv_f b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
KQ_TARGET static inline kv_m kv_neq(kv_f a, kv_f b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
KQ_TARGET static inline kv_m ki_eq(kv_i a, kv_i b) { return _mm512_cmpeq_epi32_mask(a, b); }
KQ_TARGET static inline kv_m km_and(kv_m a, kv_m b) { return (kv_m)(a & b); }
KQ_TARGET static inline kv_m km_or(kv_m a, kv_m b) { return (kv_m)(a | b); }
KQ_TARGET static inline kv_m km_andnot(kv_m a, kv_m b) { return (kv_m)(~a & b); }
KQ_TARGET static inline kv_m km_not(kv_m a) { return (kv_m)~a; }
KQ_TARGET static inline bool km_any(kv_m m) { return m != 0; }
KQ_TARGET static inline kv_f kv_sel(kv_f a, kv_f b, kv_m m) { return _mm512_mask_blend_ps(m, a, b); }
KQ_TARGET static inline kv_i ki_sel(kv_i a, kv_i b, kv_m m) { return _mm512_mask_blend_epi32(m, a, b); }
KQ_TARGET static inline kv_f kv_zero_if(kv_m m, kv_f v) { return _mm512_maskz_mov_ps(km_not(m), v); }
KQ_TARGET static inline kv_i ki_zero_if(kv_m m, kv_i v) { return _mm512_maskz_mov_epi32(km_not(m), v); }
KQ_TARGET static inline void ki_store_u8(uint8_t *dst, kv_i v)
{
    _mm_storeu_si128((__m128i *)dst, _mm512_cvtepi32_epi8(v));
}
#else
#error "KQ_W must be 8 or 16"
#endif

/* Sign bit and magnitude by integer operations (AVX512F has no float and/xor). */
KQ_TARGET static inline kv_f kv_abs(kv_f v) { return ki_as_f(ki_and(kv_as_i(v), ki_set1(0x7fffffff))); }
KQ_TARGET static inline kv_f kv_negate(kv_f v) { return ki_as_f(ki_xor(kv_as_i(v), ki_set1((int)0x80000000u))); }

/* kq_nearest_int on every lane, same bit trick. */
KQ_TARGET static inline kv_i kv_nearest(kv_f f)
{
    kv_i i = kv_as_i(kv_add(f, kv_set1(12582912.f)));
    return ki_sub(ki_and(i, ki_set1(0x007fffff)), ki_set1(0x00400000));
}

KQ_TARGET static inline kv_i ki_clamp(kv_i v, int lo, int hi) { return ki_min(ki_max(v, ki_set1(lo)), ki_set1(hi)); }

/* Lane j of out[i] = src[j*stride + i] for i < n: one sub-block per lane. */
KQ_TARGET static void kv_load_lanes(const float *src, int stride, int n, kv_f *out)
{
    float t[KQ_W * KQ_MAXN] __attribute__((aligned(64)));
    for (int j = 0; j < KQ_W; j++)
        for (int i = 0; i < n; i++) t[KQ_W * i + j] = src[j * stride + i];
    for (int i = 0; i < n; i++) out[i] = kv_load(t + KQ_W * i);
}

/* Inverse for the levels: dst[j*stride + i] = lane j of Lv[i]. */
KQ_TARGET static void kv_store_levels_u8(const kv_i *Lv, int n, uint8_t *dst, int stride)
{
    int32_t t[KQ_W * KQ_MAXN] __attribute__((aligned(64)));
    for (int i = 0; i < n; i++) ki_store(t + KQ_W * i, Lv[i]);
    for (int j = 0; j < KQ_W; j++)
        for (int i = 0; i < n; i++) dst[j * stride + i] = (uint8_t)t[KQ_W * i + j];
}

/* Lane j = v[(j * sub) / KQ_QK]: a per-super-block value on the lanes of its sub-blocks. */
KQ_TARGET static kv_f kv_per_block(const float *v, int sub)
{
    float t[KQ_W] __attribute__((aligned(64)));
    for (int j = 0; j < KQ_W; j++) t[j] = v[(j * sub) / KQ_QK];
    return kv_load(t);
}

/* ---------------------------------------------------------------------------
 * Searches, one sub-block per lane (see the scalar twins in kquants.c)
 * ------------------------------------------------------------------------- */

/* kq_make_qkx on KQ_W sub-blocks. */
KQ_TARGET static void kv_make_qkx(int n, int nmax, const kv_f *xv, const kv_f *wv, kv_i *Lv, kv_f *scale_out,
                                  kv_f *the_min_out, float rmin, float rdelta, int nstep, bool use_mad)
{
    const kv_f zero = kv_zero();
    kv_f mn = xv[0], mx = xv[0];
    kv_f sum_w = wv[0];
    kv_f sum_x = kv_mul(wv[0], xv[0]);
    for (int i = 1; i < n; i++) {
        mn = kv_min(xv[i], mn); /* (x < mn) ? x : mn, as the scalar if */
        mx = kv_max(xv[i], mx);
        sum_w = kv_add(sum_w, wv[i]);
        sum_x = kv_add(sum_x, kv_mul(wv[i], xv[i]));
    }
    mn = kv_sel(mn, zero, kv_gt(mn, zero));
    const kv_m flat = kv_eq(mx, mn);

    kv_f iscale = kv_div(kv_set1((float)nmax), kv_sub(mx, mn));
    kv_f scale = kv_div(kv_set1(1.f), iscale);
    kv_f best = zero;
    for (int i = 0; i < n; i++) {
        kv_i l = ki_clamp(kv_nearest(kv_mul(iscale, kv_sub(xv[i], mn))), 0, nmax);
        Lv[i] = l;
        kv_f diff = kv_sub(kv_add(kv_mul(scale, kv_cvt(l)), mn), xv[i]);
        diff = use_mad ? kv_abs(diff) : kv_mul(diff, diff);
        best = kv_add(best, kv_mul(wv[i], diff));
    }

    kv_i Laux[KQ_MAXN];
    kv_f Lf[KQ_MAXN];
    for (int is = 0; is <= nstep; is++) {
        float c = rmin + rdelta * (float)is + (float)nmax;
        iscale = kv_div(kv_set1(c), kv_sub(mx, mn));
        kv_f sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; i++) {
            Laux[i] = ki_clamp(kv_nearest(kv_mul(iscale, kv_sub(xv[i], mn))), 0, nmax);
            Lf[i] = kv_cvt(Laux[i]);
            kv_f wl = kv_mul(wv[i], Lf[i]);
            sum_l = kv_add(sum_l, wl);
            sum_l2 = kv_add(sum_l2, kv_mul(wl, Lf[i]));
            sum_xl = kv_add(sum_xl, kv_mul(wl, xv[i]));
        }
        kv_f D = kv_sub(kv_mul(sum_w, sum_l2), kv_mul(sum_l, sum_l));
        kv_m ok = km_andnot(flat, kv_gt(D, zero));
        if (!km_any(ok)) continue;
        kv_f ts = kv_div(kv_sub(kv_mul(sum_w, sum_xl), kv_mul(sum_x, sum_l)), D);
        kv_f tm = kv_div(kv_sub(kv_mul(sum_l2, sum_x), kv_mul(sum_l, sum_xl)), D);
        kv_m mpos = kv_gt(tm, zero);
        tm = kv_sel(tm, zero, mpos);
        ts = kv_sel(ts, kv_div(sum_xl, sum_l2), mpos);
        kv_f cur = zero;
        for (int i = 0; i < n; i++) {
            kv_f diff = kv_sub(kv_add(kv_mul(ts, Lf[i]), tm), xv[i]);
            diff = use_mad ? kv_abs(diff) : kv_mul(diff, diff);
            cur = kv_add(cur, kv_mul(wv[i], diff));
        }
        kv_m upd = km_and(ok, kv_lt(cur, best));
        if (!km_any(upd)) continue;
        for (int i = 0; i < n; i++) Lv[i] = ki_sel(Lv[i], Laux[i], upd);
        best = kv_sel(best, cur, upd);
        scale = kv_sel(scale, ts, upd);
        mn = kv_sel(mn, tm, upd);
    }
    for (int i = 0; i < n; i++) Lv[i] = ki_zero_if(flat, Lv[i]);
    *scale_out = kv_zero_if(flat, scale);
    *the_min_out = kv_negate(mn); /* -min, sign of zero included */
}

/* Signed max (largest |x|, first one on ties) and the all-zero mask. */
KQ_TARGET static void kv_signed_max(int n, const kv_f *xv, kv_f *max_out, kv_m *tiny_out)
{
    kv_f amax = kv_zero(), max = kv_zero();
    for (int i = 0; i < n; i++) {
        kv_f ax = kv_abs(xv[i]);
        kv_m m = kv_gt(ax, amax);
        amax = kv_sel(amax, ax, m);
        max = kv_sel(max, xv[i], m);
    }
    *max_out = max;
    *tiny_out = kv_lt(amax, kv_set1(KQ_GROUP_MAX_EPS));
}

/* make_qx's choice of one candidate scale, in the scalar order: taken where
 * its sums beat the best so far (and the lane is not all-zero). */
KQ_TARGET static inline void kv_qx_take(int n, int nmax, const kv_f *xv, kv_f iscale, kv_f sumlx, kv_f suml2, kv_m tiny,
                                        kv_i *Lv, kv_f *scale, kv_f *best)
{
    const kv_f zero = kv_zero();
    kv_m upd = km_and(kv_gt(suml2, zero), kv_gt(kv_mul(sumlx, sumlx), kv_mul(*best, suml2)));
    upd = km_andnot(tiny, upd);
    if (!km_any(upd)) return;
    for (int i = 0; i < n; i++) {
        kv_i cand = ki_clamp(kv_nearest(kv_mul(iscale, xv[i])), -nmax, nmax - 1);
        Lv[i] = ki_sel(Lv[i], ki_add(cand, ki_set1(nmax)), upd);
    }
    kv_f ns = kv_div(sumlx, suml2);
    *scale = kv_sel(*scale, ns, upd);
    *best = kv_sel(*best, kv_mul(ns, sumlx), upd);
}

/* kq_make_qx on KQ_W sub-blocks; wv NULL means weights x^2. Lv receives l + nmax. */
KQ_TARGET static void kv_make_qx(int n, int nmax, const kv_f *xv, const kv_f *wv, kv_i *Lv, kv_f *scale_out)
{
    const kv_f zero = kv_zero();
    const kv_i vnmax = ki_set1(nmax);
    kv_f max;
    kv_m tiny;
    kv_signed_max(n, xv, &max, &tiny);
    kv_f wx[KQ_MAXN], w[KQ_MAXN];
    for (int i = 0; i < n; i++) {
        w[i] = wv ? wv[i] : kv_mul(xv[i], xv[i]);
        wx[i] = kv_mul(w[i], xv[i]);
    }
    kv_f iscale = kv_div(kv_set1((float)-nmax), max);
    kv_f sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        kv_i l = ki_clamp(kv_nearest(kv_mul(iscale, xv[i])), -nmax, nmax - 1);
        Lv[i] = ki_add(l, vnmax);
        kv_f lf = kv_cvt(l);
        sumlx = kv_add(sumlx, kv_mul(wx[i], lf));
        suml2 = kv_add(suml2, kv_mul(kv_mul(w[i], lf), lf));
    }
    kv_f scale = kv_sel(zero, kv_div(sumlx, suml2), kv_neq(suml2, zero));
    kv_f best = kv_mul(scale, sumlx);
    /* The candidate levels as floats: clamped first, then rounded by the
     * float form of the same trick (add and subtract 1.5 * 2^23). For |v| <
     * 2^22 both give round-half-even of v, and every lane that can be taken
     * has |v| <= nmax + 1 (|x| <= |max|, which is >= GROUP_MAX_EPS); tiny
     * lanes are garbage either way and dropped. Two operations fewer per
     * value in the loop the time goes to. */
    const kv_f lo = kv_set1((float)-nmax), hi = kv_set1((float)(nmax - 1)), magic = kv_set1(12582912.f);
    /* The 18 candidate scales' sums do not depend on each other (only the
     * choice among them is sequential), so two are summed per pass over the
     * values: four accumulation chains in flight instead of two. */
    static const int steps[18] = {-9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int k = 0; k < 18; k += 2) {
        const int ia = steps[k], ib = steps[k + 1];
        const kv_f isa = kv_div(kv_set1(-((float)nmax + 0.1f * (float)ia)), max);
        const kv_f isb = kv_div(kv_set1(-((float)nmax + 0.1f * (float)ib)), max);
        kv_f lxa = zero, l2a = zero, lxb = zero, l2b = zero;
        for (int i = 0; i < n; i++) {
            kv_f la = kv_sub(kv_add(kv_min(kv_max(kv_mul(isa, xv[i]), lo), hi), magic), magic);
            kv_f lb = kv_sub(kv_add(kv_min(kv_max(kv_mul(isb, xv[i]), lo), hi), magic), magic);
            lxa = kv_add(lxa, kv_mul(wx[i], la));
            l2a = kv_add(l2a, kv_mul(kv_mul(w[i], la), la));
            lxb = kv_add(lxb, kv_mul(wx[i], lb));
            l2b = kv_add(l2b, kv_mul(kv_mul(w[i], lb), lb));
        }
        kv_qx_take(n, nmax, xv, isa, lxa, l2a, tiny, Lv, &scale, &best);
        kv_qx_take(n, nmax, xv, isb, lxb, l2b, tiny, Lv, &scale, &best);
    }
    for (int i = 0; i < n; i++) Lv[i] = ki_zero_if(tiny, Lv[i]);
    *scale_out = kv_zero_if(tiny, scale);
}

/* kq_make_q3 on KQ_W sub-blocks. A lane whose pass changed nothing would stop
 * in the scalar code; running it again changes nothing either, so the passes
 * go on while any lane still changes. Lv receives l + nmax. */
KQ_TARGET static void kv_make_q3(int n, int nmax, const kv_f *xv, kv_i *Lv, kv_f *scale_out)
{
    const kv_f zero = kv_zero();
    kv_f max;
    kv_m tiny;
    kv_signed_max(n, xv, &max, &tiny);
    const kv_m live = km_not(tiny);
    kv_f w[KQ_MAXN], wx[KQ_MAXN];
    kv_f iscale = kv_div(kv_set1((float)-nmax), max);
    kv_f sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        w[i] = kv_mul(xv[i], xv[i]);
        wx[i] = kv_mul(w[i], xv[i]);
        Lv[i] = ki_clamp(kv_nearest(kv_mul(iscale, xv[i])), -nmax, nmax - 1);
        kv_f lf = kv_cvt(Lv[i]);
        sumlx = kv_add(sumlx, kv_mul(wx[i], lf));
        suml2 = kv_add(suml2, kv_mul(kv_mul(w[i], lf), lf));
    }
    for (int itry = 0; itry < 5; itry++) {
        kv_m changed = km_none();
        for (int i = 0; i < n; i++) {
            kv_f lf = kv_cvt(Lv[i]);
            kv_f slx = kv_sub(sumlx, kv_mul(wx[i], lf));
            kv_f sl2 = kv_sub(suml2, kv_mul(kv_mul(w[i], lf), lf));
            kv_i nl = ki_clamp(kv_nearest(kv_div(kv_mul(xv[i], sl2), slx)), -nmax, nmax - 1);
            kv_m diff = km_not(ki_eq(nl, Lv[i]));
            kv_f nf = kv_cvt(nl);
            kv_f slx2 = kv_add(slx, kv_mul(wx[i], nf));
            kv_f sl22 = kv_add(sl2, kv_mul(kv_mul(w[i], nf), nf));
            kv_m better = kv_gt(kv_mul(kv_mul(slx2, slx2), suml2), kv_mul(kv_mul(sumlx, sumlx), sl22));
            kv_m acc = km_and(km_and(kv_gt(slx, zero), diff), km_and(kv_gt(sl22, zero), better));
            acc = km_and(acc, live);
            Lv[i] = ki_sel(Lv[i], nl, acc);
            sumlx = kv_sel(sumlx, slx2, acc);
            suml2 = kv_sel(suml2, sl22, acc);
            changed = km_or(changed, acc);
        }
        if (!km_any(changed)) break;
    }
    for (int i = 0; i < n; i++) Lv[i] = ki_zero_if(tiny, ki_add(Lv[i], ki_set1(nmax)));
    *scale_out = kv_zero_if(tiny, kv_div(sumlx, suml2));
}

/* dsq_kq_requant_ref with vector arithmetic: elementwise, so any lane layout
 * gives the scalar results. */
KQ_TARGET static void kv_requant(const float *x, uint8_t *L, const dsq_kq_plan *p)
{
    const kv_i lo = ki_set1(p->lo), hi = ki_set1(p->hi), off = ki_set1(p->off);
    for (int j = 0; j < p->n_sub; j++) {
        if (!p->d[j]) continue;
        const kv_f d = kv_set1(p->d[j]), dm = kv_set1(p->dm[j]);
        for (int i = j * p->sub; i < (j + 1) * p->sub; i += KQ_W) {
            kv_f v = kv_div(kv_add(kv_loadu(x + i), dm), d);
            ki_store_u8(L + i, ki_add(ki_min(ki_max(kv_nearest(v), lo), hi), off));
        }
    }
}

/* ---------------------------------------------------------------------------
 * Row quantizers
 * ------------------------------------------------------------------------- */

/* Per lane: sum of x^2 over the sub-block, in the scalar order. */
KQ_TARGET static kv_f kv_sum_sq(int n, const kv_f *xv)
{
    kv_f s = kv_zero();
    for (int i = 0; i < n; i++) s = kv_add(s, kv_mul(xv[i], xv[i]));
    return s;
}

/* The _impl weights qw * sqrt(sigma2 + x^2) per lane, and their per-lane sums. */
KQ_TARGET static kv_f kv_imat_weights(int n, const kv_f *xv, const kv_f *qv, kv_f s2, kv_f *wv)
{
    kv_f sw = kv_zero();
    for (int i = 0; i < n; i++) wv[i] = kv_mul(qv[i], kv_sqrt(kv_add(s2, kv_mul(xv[i], xv[i]))));
    for (int i = 0; i < n; i++) sw = kv_add(sw, wv[i]);
    return sw;
}

static float kv_block_sum_sq(const float *x)
{
    float s = 0;
    for (int i = 0; i < KQ_QK; i++) s += x[i] * x[i];
    return s;
}

/* Sub-blocks of 16 (q2_K, q3_K, q6_K): KQ_W of them per pass, 16 / KQ_W
 * passes per super-block. */
#define KQ_PASSES16 (16 / KQ_W)

void KQ_TARGET KQ_ROW(q2_K)(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q2_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], mins[16], sw[16];
    dsq_kq_plan p;
    kv_f xv[16], wv[16], qv[16], sc, mn;
    kv_i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        float sigma2 = qw ? kv_block_sum_sq(x) / KQ_QK : 0;
        for (int g = 0; g < KQ_PASSES16; g++) {
            kv_load_lanes(x + 16 * KQ_W * g, 16, 16, xv);
            if (!qw) {
                for (int l = 0; l < 16; l++) wv[l] = kv_abs(xv[l]);
                kv_make_qkx(16, 3, xv, wv, Lv, &sc, &mn, -0.5f, 0.1f, 15, true);
            } else {
                kv_load_lanes(qw + KQ_QK * i + 16 * KQ_W * g, 16, 16, qv);
                kv_storeu(sw + KQ_W * g, kv_imat_weights(16, xv, qv, kv_set1(sigma2), wv));
                kv_make_qkx(16, 3, xv, wv, Lv, &sc, &mn, -0.9f, 0.05f, 36, false);
            }
            kv_storeu(scales + KQ_W * g, sc);
            kv_storeu(mins + KQ_W * g, mn);
            kv_store_levels_u8(Lv, 16, L + 16 * KQ_W * g, 16);
        }
        if (qw)
            dsq_kq_q2_plan_imat(&y[i], scales, mins, sw, &p);
        else
            dsq_kq_q2_plan_ref(&y[i], scales, mins, &p);
        kv_requant(x, L, &p);
        dsq_kq_q2_pack(&y[i], L);
    }
}

void KQ_TARGET KQ_ROW(q3_K)(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q3_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16], sw[16];
    dsq_kq_plan p;
    kv_f xv[16], wv[16], qv[16], sc;
    kv_i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        float sigma2 = qw ? 2 * kv_block_sum_sq(x) / KQ_QK : 0;
        for (int g = 0; g < KQ_PASSES16; g++) {
            kv_load_lanes(x + 16 * KQ_W * g, 16, 16, xv);
            if (!qw) {
                kv_make_q3(16, 4, xv, Lv, &sc);
            } else {
                kv_load_lanes(qw + KQ_QK * i + 16 * KQ_W * g, 16, 16, qv);
                kv_storeu(sw + KQ_W * g, kv_imat_weights(16, xv, qv, kv_set1(sigma2), wv));
                kv_make_qx(16, 4, xv, wv, Lv, &sc);
            }
            kv_storeu(scales + KQ_W * g, sc);
            kv_store_levels_u8(Lv, 16, L + 16 * KQ_W * g, 16);
        }
        if (qw)
            dsq_kq_q3_plan_imat(&y[i], scales, sw, &p);
        else
            dsq_kq_q3_plan_ref(&y[i], scales, &p);
        kv_requant(x, L, &p);
        dsq_kq_q3_pack(&y[i], L);
    }
}

/* Super-blocks of q4_K/q5_K per pass: 8 sub-blocks of 32 each. */
#define KQ_BLOCKS45 (KQ_W / 8)

/* The sub-block searches of KQ_BLOCKS45 q4_K (nmax 15) or q5_K (nmax 31)
 * super-blocks at x (importance qw or NULL). */
KQ_TARGET static void kv_q45_search(const float *x, const float *qw, int nmax, uint8_t *L, float *scales, float *mins,
                                    float *sw)
{
    kv_f xv[32], wv[32], qv[32], sc, mn;
    kv_i Lv[32];
    kv_load_lanes(x, 32, 32, xv);
    if (!qw) {
        kv_f av_x = kv_sqrt(kv_div(kv_sum_sq(32, xv), kv_set1(32.f)));
        for (int l = 0; l < 32; l++) wv[l] = kv_add(av_x, kv_abs(xv[l]));
        if (nmax == 15)
            kv_make_qkx(32, 15, xv, wv, Lv, &sc, &mn, -1.f, 0.1f, 20, false);
        else
            kv_make_qkx(32, 31, xv, wv, Lv, &sc, &mn, -0.5f, 0.1f, 15, false);
    } else {
        float sigma2[KQ_BLOCKS45];
        for (int b = 0; b < KQ_BLOCKS45; b++) sigma2[b] = 2 * kv_block_sum_sq(x + KQ_QK * b) / KQ_QK;
        kv_load_lanes(qw, 32, 32, qv);
        kv_storeu(sw, kv_imat_weights(32, xv, qv, kv_per_block(sigma2, 32), wv));
        kv_make_qkx(32, nmax, xv, wv, Lv, &sc, &mn, -0.9f, 0.05f, 36, false);
    }
    kv_storeu(scales, sc);
    kv_storeu(mins, mn);
    kv_store_levels_u8(Lv, 32, L, 32);
}

/* q4_K (nmax 15) or q5_K (nmax 31) rows; a last pass short of super-blocks
 * searches a copy of the last one in the empty lanes and drops it. */
KQ_TARGET static void kv_row_q45(const float *x, void *vy, int64_t n, const float *qw, int nmax)
{
    uint8_t L[KQ_QK * KQ_BLOCKS45];
    float scales[KQ_W], mins[KQ_W], sw[KQ_W];
    float xpad[KQ_QK * KQ_BLOCKS45], wpad[KQ_QK * KQ_BLOCKS45];
    dsq_kq_plan p;
    const int64_t nb = n / KQ_QK;
    for (int64_t i = 0; i < nb; i += KQ_BLOCKS45) {
        const int k = nb - i < KQ_BLOCKS45 ? (int)(nb - i) : KQ_BLOCKS45;
        const float *xs = x + KQ_QK * i, *ws = qw ? qw + KQ_QK * i : NULL;
        if (k < KQ_BLOCKS45) {
            for (int b = 0; b < KQ_BLOCKS45; b++) {
                memcpy(xpad + KQ_QK * b, xs + KQ_QK * (b < k ? b : k - 1), KQ_QK * sizeof(float));
                if (ws) memcpy(wpad + KQ_QK * b, ws + KQ_QK * (b < k ? b : k - 1), KQ_QK * sizeof(float));
            }
            xs = xpad;
            ws = ws ? wpad : NULL;
        }
        kv_q45_search(xs, ws, nmax, L, scales, mins, sw);
        for (int b = 0; b < k; b++) {
            const float *xb = x + KQ_QK * (i + b);
            uint8_t *Lb = L + KQ_QK * b;
            if (nmax == 15) {
                dsq_block_q4_K *y = (dsq_block_q4_K *)vy + i + b;
                if (qw)
                    dsq_kq_q45_plan_imat(y->scales, &y->d, &y->dmin, scales + 8 * b, mins + 8 * b, sw + 8 * b, 15,
                                         false, &p);
                else
                    dsq_kq_q45_plan_ref(y->scales, &y->d, &y->dmin, scales + 8 * b, mins + 8 * b, 15, &p);
                kv_requant(xb, Lb, &p);
                dsq_kq_q4_pack(y, Lb);
            } else {
                dsq_block_q5_K *y = (dsq_block_q5_K *)vy + i + b;
                if (qw)
                    dsq_kq_q45_plan_imat(y->scales, &y->d, &y->dmin, scales + 8 * b, mins + 8 * b, sw + 8 * b, 31,
                                         true, &p);
                else
                    dsq_kq_q45_plan_ref(y->scales, &y->d, &y->dmin, scales + 8 * b, mins + 8 * b, 31, &p);
                kv_requant(xb, Lb, &p);
                dsq_kq_q5_pack(y, Lb);
            }
        }
    }
}

void KQ_TARGET KQ_ROW(q4_K)(const float *x, void *vy, int64_t n, const float *qw)
{
    kv_row_q45(x, vy, n, qw, 15);
}

void KQ_TARGET KQ_ROW(q5_K)(const float *x, void *vy, int64_t n, const float *qw)
{
    kv_row_q45(x, vy, n, qw, 31);
}

void KQ_TARGET KQ_ROW(q6_K)(const float *x, void *vy, int64_t n, const float *qw)
{
    dsq_block_q6_K *y = vy;
    uint8_t L[KQ_QK];
    float scales[16];
    dsq_kq_plan p;
    kv_f xv[16], qv[16], sc;
    kv_i Lv[16];
    for (int64_t i = 0; i < n / KQ_QK; i++, x += KQ_QK) {
        for (int g = 0; g < KQ_PASSES16; g++) {
            kv_load_lanes(x + 16 * KQ_W * g, 16, 16, xv);
            if (qw) kv_load_lanes(qw + KQ_QK * i + 16 * KQ_W * g, 16, 16, qv);
            kv_make_qx(16, 32, xv, qw ? qv : NULL, Lv, &sc);
            kv_storeu(scales + KQ_W * g, sc);
            kv_store_levels_u8(Lv, 16, L + 16 * KQ_W * g, 16);
        }
        if (!dsq_kq_q6_plan(&y[i], scales, &p)) continue;
        kv_requant(x, L, &p);
        dsq_kq_q6_pack(&y[i], L);
    }
}

#endif
