/* AVX2 versions of the legacy row functions (q4_0 q4_1 q5_0 q5_1 q8_0 q8_1);
 * contract in quantizers/quant_avx2.h. The scalar references are in
 * quantizers/legacy.c; the dot products follow the structure of ggml's AVX2
 * kernels (ggml-cpu-quants.c) in our own code. Only called when the CPU has
 * AVX2 and FMA (dsq_cpu_has_avx2_fma). */
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

#define QK 32

/* ---------------------------------------------------------------- helpers */

static inline float hsum_ps(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xB1));
    return _mm_cvtsi128_si32(r);
}

static inline float hmax_ps(__m256 v)
{
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline float hmin_ps(__m256 v)
{
    __m128 r = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_min_ps(r, _mm_movehl_ps(r, r));
    r = _mm_min_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 16 packed nibbles to 32 bytes: low nibbles (elements 0-15), then high (16-31). */
static inline __m256i nibbles_32(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* bit k of a little-endian uint32 to byte k: 0xFF when set, 0 otherwise. */
static inline __m256i bits_32(const uint8_t *qh)
{
    uint32_t v;
    memcpy(&v, qh, sizeof v);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    const __m256i sel = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(sel, _mm256_set1_epi64x(-1));
}

/* Signed 8-bit x times signed 8-bit y, summed in pairs then in quads: 8 int32. */
static inline __m256i dot_i8_quads(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* Unsigned 8-bit x (< 128) times signed 8-bit y, as dot_i8_quads. */
static inline __m256i dot_u8_quads(__m256i x, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

/* 32 signed bytes times d into y[0..32): int8 -> float is exact, then one rounding. */
static inline void store_scaled_i8(float *y, __m256i q, __m256 d)
{
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d));
}

/* Same for unsigned levels with an offset: q*d + m, multiply then add as ggml does. */
static inline void store_scaled_u8_offset(float *y, __m256i q, __m256 d, __m256 m)
{
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++) {
        const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
        _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(_mm256_mul_ps(qf, d), m));
    }
}

/* The low byte of each int32 lane, as C's conversion to a 8-bit type keeps it
 * (x86 converts float to int32 first: out-of-range values become 0x80000000). */
static inline __m256i low_byte_signed(__m256i v) { return _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24); }

/* 32 int32 lanes (elements 0-7, 8-15, 16-23, 24-31) to 32 bytes, keeping low bytes. */
static inline __m256i pack_low_bytes(__m256i a0, __m256i a1, __m256i a2, __m256i a3)
{
    const __m256i m = _mm256_set1_epi32(0xFF);
    const __m256i p01 = _mm256_packus_epi32(_mm256_and_si256(a0, m), _mm256_and_si256(a1, m));
    const __m256i p23 = _mm256_packus_epi32(_mm256_and_si256(a2, m), _mm256_and_si256(a3, m));
    const __m256i b = _mm256_packus_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 16 int32 lanes (elements 0-7, 8-15) to 16 bytes, keeping low bytes. */
static inline __m128i pack_low_bytes16(__m256i a0, __m256i a1)
{
    const __m256i m = _mm256_set1_epi32(0xFF);
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(a0, m), _mm256_and_si256(a1, m)), 0xD8);
    return _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
}

/* qs[j] = L[j] | L[j+16] << 4 (as bytes) from 32 level lanes in element order. */
static inline void store_nibbles(uint8_t *qs, const __m256i L[4])
{
    const __m256i lo0 = _mm256_or_si256(L[0], _mm256_slli_epi32(L[2], 4));
    const __m256i lo1 = _mm256_or_si256(L[1], _mm256_slli_epi32(L[3], 4));
    _mm_storeu_si128((__m128i *)qs, pack_low_bytes16(lo0, lo1));
}

/* q5 packing: low nibbles like q4, 5th bits (bit 4 of each level byte) into qh. */
static inline void store_q5(uint8_t *qs, uint8_t *qh, const __m256i L[4])
{
    const __m256i m = _mm256_set1_epi32(0x0F);
    const __m256i lowL[4] = {_mm256_and_si256(L[0], m), _mm256_and_si256(L[1], m), _mm256_and_si256(L[2], m),
                             _mm256_and_si256(L[3], m)};
    store_nibbles(qs, lowL);
    const __m256i bytes = pack_low_bytes(L[0], L[1], L[2], L[3]);
    const uint32_t bits = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(bytes, 3));
    memcpy(qh, &bits, sizeof bits);
}

static inline void load_block(const float *x, __m256 v[4])
{
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
}

/* The first element whose value equals v (±0 compare equal), as the scalar
 * "if (x < min) min = x" keeps the first of equal candidates. */
static inline float first_equal(const float *x, const __m256 blk[4], float v)
{
    const __m256 t = _mm256_set1_ps(v);
    for (int k = 0; k < 4; k++) {
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(blk[k], t, _CMP_EQ_OQ));
        if (mask) return x[8 * k + __builtin_ctz((unsigned)mask)];
    }
    return v;
}

/* The element of largest |x| with its sign, first one on ties; +0 for an all-zero block. */
static inline float block_signed_absmax(const float *x, const __m256 blk[4])
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a = _mm256_and_ps(blk[0], abs_mask);
    for (int k = 1; k < 4; k++) a = _mm256_max_ps(a, _mm256_and_ps(blk[k], abs_mask));
    const float amax = hmax_ps(a);
    if (!(amax > 0)) return 0.0f;
    const __m256 t = _mm256_set1_ps(amax);
    for (int k = 0; k < 4; k++) {
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(blk[k], abs_mask), t, _CMP_EQ_OQ));
        if (mask) return x[8 * k + __builtin_ctz((unsigned)mask)];
    }
    return 0.0f;
}

static inline void block_min_max(const float *x, const __m256 blk[4], float *min, float *max)
{
    __m256 mn = blk[0], mx = blk[0];
    for (int k = 1; k < 4; k++) {
        mn = _mm256_min_ps(mn, blk[k]);
        mx = _mm256_max_ps(mx, blk[k]);
    }
    *min = first_equal(x, blk, hmin_ps(mn));
    *max = first_equal(x, blk, hmax_ps(mx));
}

/* Levels trunc(v*id + add) as C's float-to-8-bit conversion gives them, capped at cap. */
static inline void trunc_levels(const __m256 v[4], __m256 sub, __m256 id, __m256 add, int cap, __m256i L[4])
{
    for (int k = 0; k < 4; k++) {
        const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v[k], sub), id), add);
        const __m256i i8 = low_byte_signed(_mm256_cvttps_epi32(t));
        L[k] = cap ? _mm256_min_epi32(i8, _mm256_set1_epi32(cap)) : i8;
    }
}

/* ------------------------------------------------------- plain quantizers */

void dsq_quantize_row_q4_0_plain_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q4_0 *y = vy;
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        __m256 v[4];
        __m256i L[4];
        load_block(xb, v);
        const float d = block_signed_absmax(xb, v) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        trunc_levels(v, zero, _mm256_set1_ps(id), _mm256_set1_ps(8.5f), 15, L);
        store_nibbles(y[i].qs, L);
    }
}

void dsq_quantize_row_q5_0_plain_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q5_0 *y = vy;
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        __m256 v[4];
        __m256i L[4];
        load_block(xb, v);
        const float d = block_signed_absmax(xb, v) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        trunc_levels(v, zero, _mm256_set1_ps(id), _mm256_set1_ps(16.5f), 31, L);
        store_q5(y[i].qs, y[i].qh, L);
    }
}

void dsq_quantize_row_q4_1_plain_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        __m256 v[4];
        __m256i L[4];
        load_block(xb, v);
        float min, max;
        block_min_max(xb, v, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        y[i].m = dsq_f32_to_f16(min);
        trunc_levels(v, _mm256_set1_ps(min), _mm256_set1_ps(id), _mm256_set1_ps(0.5f), 15, L);
        store_nibbles(y[i].qs, L);
    }
}

void dsq_quantize_row_q5_1_plain_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *xb = x + i * QK;
        __m256 v[4];
        __m256i L[4];
        load_block(xb, v);
        float min, max;
        block_min_max(xb, v, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dsq_f32_to_f16(d);
        y[i].m = dsq_f32_to_f16(min);
        trunc_levels(v, _mm256_set1_ps(min), _mm256_set1_ps(id), _mm256_set1_ps(0.5f), 0, L);
        store_q5(y[i].qs, y[i].qh, L);
    }
}

/* roundf (halves away from zero) of each lane, as the int32 the scalar gets. */
static inline __m256i roundf_epi32(__m256 p)
{
    const __m256 sign = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), _mm256_sub_ps(p, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
    return _mm256_cvttps_epi32(r);
}

/* One q8 block: returns d; qs gets the 32 levels, *sum their sum. */
static inline float q8_block(const float *xb, int8_t *qs, int *sum)
{
    __m256 v[4];
    load_block(xb, v);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a = _mm256_and_ps(v[0], abs_mask);
    for (int k = 1; k < 4; k++) a = _mm256_max_ps(a, _mm256_and_ps(v[k], abs_mask));
    const float d = hmax_ps(a) / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        q[k] = roundf_epi32(_mm256_mul_ps(v[k], idv));
        s = _mm256_add_epi32(s, low_byte_signed(q[k]));
    }
    _mm256_storeu_si256((__m256i *)qs, pack_low_bytes(q[0], q[1], q[2], q[3]));
    *sum = hsum_epi32(s);
    return d;
}

void dsq_quantize_row_q8_0_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        int sum;
        y[i].d = dsq_f32_to_f16(q8_block(x + i * QK, y[i].qs, &sum));
    }
}

void dsq_quantize_row_q8_1_avx2(const float *x, void *vy, int64_t n)
{
    dsq_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        int sum;
        const float d = q8_block(x + i * QK, y[i].qs, &sum);
        y[i].d = dsq_f32_to_f16(d);
        y[i].s = dsq_f32_to_f16(sum * d);
    }
}

/* ------------------------------------- imatrix quantizers, a block per lane */

/* ggml's per-element importance weight qw * sqrt(sigma2 + x^2), transposed. */
static void imat_weights8(const float *qw, float sigma2, const __m256 X[32], __m256 W[32])
{
    __m256 Q[32];
    dsq_avx2_load_blocks8(qw, Q);
    const __m256 s2 = _mm256_set1_ps(sigma2);
    for (int j = 0; j < 32; j++) W[j] = _mm256_mul_ps(Q[j], _mm256_sqrt_ps(_mm256_add_ps(s2, _mm256_mul_ps(X[j], X[j]))));
}

/* make_qx_quants(32, nmax, x, L, rmse_type 1, w) for 8 blocks at once; L gets
 * the stored levels (l + nmax, or 0 for an all-zero block). Returns the scales. */
static __m256 qx_quants8(int nmax, const __m256 X[32], const __m256 W[32], __m256i L[32])
{
    __m256 amax, max;
    dsq_avx2_signed_absmax(X, 32, &amax, &max);
    const __m256 zero_blk = _mm256_cmp_ps(amax, _mm256_set1_ps(DSQ_GROUP_MAX_EPS), _CMP_LT_OQ);
    const __m256i lo = _mm256_set1_epi32(-nmax), hi = _mm256_set1_epi32(nmax - 1);
    __m256 scale = _mm256_setzero_ps(), best = _mm256_setzero_ps();
    for (int is = -10; is <= 9; ++is) {
        if (is == 0) continue;
        /* is = -10 stands for the first pass at iscale = -nmax/max */
        const float num = is == -10 ? (float)-nmax : -(nmax + 0.1f * is);
        const __m256 iscale = _mm256_div_ps(_mm256_set1_ps(num), max);
        __m256 sumlx = _mm256_setzero_ps(), suml2 = _mm256_setzero_ps();
        __m256i Lt[32];
        for (int j = 0; j < 32; j++) {
            Lt[j] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, dsq_avx2_nearest_int(_mm256_mul_ps(iscale, X[j]))));
            const __m256 l = _mm256_cvtepi32_ps(Lt[j]);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(W[j], X[j]), l));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(W[j], l), l));
        }
        if (is == -10) {
            scale = dsq_avx2_select_nonzero(suml2, _mm256_div_ps(sumlx, suml2), _mm256_setzero_ps());
            best = _mm256_mul_ps(scale, sumlx);
            for (int j = 0; j < 32; j++) L[j] = Lt[j];
            continue;
        }
        const __m256 take = _mm256_and_ps(_mm256_cmp_ps(suml2, _mm256_setzero_ps(), _CMP_GT_OQ),
                                          _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
        const __m256 new_scale = _mm256_div_ps(sumlx, suml2);
        scale = _mm256_blendv_ps(scale, new_scale, take);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(new_scale, sumlx), take);
        for (int j = 0; j < 32; j++) L[j] = _mm256_blendv_epi8(L[j], Lt[j], _mm256_castps_si256(take));
    }
    const __m256i zmask = _mm256_castps_si256(zero_blk);
    for (int j = 0; j < 32; j++) L[j] = _mm256_andnot_si256(zmask, _mm256_add_epi32(L[j], _mm256_set1_epi32(nmax)));
    return _mm256_andnot_ps(zero_blk, scale);
}

/* Weighted squared error of levels Lv at (scale, min), summed in element order. */
static inline __m256 qkx3_error8(const __m256 X[32], const __m256 W[32], const __m256i Lv[32], __m256 scale, __m256 min)
{
    __m256 err = _mm256_setzero_ps();
    for (int j = 0; j < 32; j++) {
        const __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lv[j])), min), X[j]);
        err = _mm256_add_ps(err, _mm256_mul_ps(W[j], _mm256_mul_ps(diff, diff)));
    }
    return err;
}

/* make_qkx3_quants(32, nmax, x, w, L, &the_min, Laux, -0.9, 0.05, 36, false) for
 * 8 blocks at once. Returns the scales; *min_out gets min (= -the_min). */
static __m256 qkx3_quants8(int nmax, const __m256 X[32], const __m256 W[32], __m256i L[32], __m256 *min_out)
{
    const float rmin = -0.9f, rdelta = 0.05f;
    const int nstep = 36;
    __m256 min = X[0], max = X[0], sum_w = W[0], sum_x = _mm256_mul_ps(W[0], X[0]);
    for (int j = 1; j < 32; j++) {
        min = _mm256_min_ps(X[j], min); /* x < min ? x : min */
        max = _mm256_max_ps(X[j], max);
        sum_w = _mm256_add_ps(sum_w, W[j]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(W[j], X[j]));
    }
    min = _mm256_blendv_ps(min, _mm256_setzero_ps(), _mm256_cmp_ps(min, _mm256_setzero_ps(), _CMP_GT_OQ));
    const __m256 min0 = min;
    const __m256 flat = _mm256_cmp_ps(max, min, _CMP_LE_OQ);
    const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(nmax);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
    for (int j = 0; j < 32; j++)
        L[j] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, dsq_avx2_nearest_int(_mm256_mul_ps(iscale, _mm256_sub_ps(X[j], min)))));
    __m256 best = qkx3_error8(X, W, L, scale, min);
    for (int is = 0; is <= nstep; ++is) {
        iscale = _mm256_div_ps(_mm256_set1_ps(rmin + rdelta * is + nmax), _mm256_sub_ps(max, min));
        __m256 sum_l = _mm256_setzero_ps(), sum_l2 = _mm256_setzero_ps(), sum_xl = _mm256_setzero_ps();
        __m256i La[32];
        for (int j = 0; j < 32; j++) {
            La[j] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, dsq_avx2_nearest_int(_mm256_mul_ps(iscale, _mm256_sub_ps(X[j], min)))));
            const __m256 l = _mm256_cvtepi32_ps(La[j]);
            const __m256 wl = _mm256_mul_ps(W[j], l);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, X[j]));
        }
        const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        const __m256 pos = _mm256_cmp_ps(this_min, _mm256_setzero_ps(), _CMP_GT_OQ);
        this_min = _mm256_blendv_ps(this_min, _mm256_setzero_ps(), pos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), pos);
        const __m256 err = qkx3_error8(X, W, La, this_scale, this_min);
        const __m256 take = _mm256_and_ps(_mm256_cmp_ps(D, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_cmp_ps(err, best, _CMP_LT_OQ));
        best = _mm256_blendv_ps(best, err, take);
        scale = _mm256_blendv_ps(scale, this_scale, take);
        min = _mm256_blendv_ps(min, this_min, take);
        for (int j = 0; j < 32; j++) L[j] = _mm256_blendv_epi8(L[j], La[j], _mm256_castps_si256(take));
    }
    const __m256i fmask = _mm256_castps_si256(flat);
    for (int j = 0; j < 32; j++) L[j] = _mm256_andnot_si256(fmask, L[j]);
    *min_out = _mm256_blendv_ps(min, min0, flat);
    return _mm256_andnot_ps(flat, scale);
}

/* Lane k's 32 levels of a transposed set. */
static void lane_levels(const __m256i L[32], int k, uint8_t out[32])
{
    int32_t tmp[32][8];
    for (int j = 0; j < 32; j++) _mm256_storeu_si256((__m256i *)tmp[j], L[j]);
    for (int j = 0; j < 32; j++) out[j] = (uint8_t)tmp[j][k];
}

static void pack_q4_levels(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void pack_q5_levels(const uint8_t *L, uint8_t *qs, uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        h |= ((L[j] & 0x10u) >> 4) << j;
        h |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh, &h, sizeof h);
}

typedef enum { Q4_0, Q5_0, Q4_1, Q5_1 } imat_kind;

static int64_t imat_blocks(imat_kind kind, const float *x, void *vy, int64_t nb, const float *qw, float sigma2)
{
    const int nmax = kind == Q4_0 ? 8 : kind == Q5_0 ? 16 : kind == Q4_1 ? 15 : 31;
    const int64_t done = nb / 8 * 8;
    for (int64_t b = 0; b < done; b += 8) {
        __m256 X[32], W[32], minv = _mm256_setzero_ps();
        __m256i L[32];
        dsq_avx2_load_blocks8(x + b * QK, X);
        imat_weights8(qw + b * QK, sigma2, X, W);
        const __m256 sv = kind <= Q5_0 ? qx_quants8(nmax, X, W, L) : qkx3_quants8(nmax, X, W, L, &minv);
        float scale[8], min[8];
        _mm256_storeu_ps(scale, sv);
        _mm256_storeu_ps(min, minv);
        for (int k = 0; k < 8; k++) {
            uint8_t Lk[32];
            lane_levels(L, k, Lk);
            const int64_t i = b + k;
            switch (kind) {
            case Q4_0:
                ((dsq_block_q4_0 *)vy)[i].d = dsq_f32_to_f16(scale[k]);
                pack_q4_levels(Lk, ((dsq_block_q4_0 *)vy)[i].qs);
                break;
            case Q5_0:
                ((dsq_block_q5_0 *)vy)[i].d = dsq_f32_to_f16(scale[k]);
                pack_q5_levels(Lk, ((dsq_block_q5_0 *)vy)[i].qs, ((dsq_block_q5_0 *)vy)[i].qh);
                break;
            case Q4_1: {
                dsq_block_q4_1 *y = (dsq_block_q4_1 *)vy + i;
                const float the_min = -min[k];
                y->d = dsq_f32_to_f16(scale[k]);
                y->m = dsq_f32_to_f16(-the_min);
                pack_q4_levels(Lk, y->qs);
                break;
            }
            case Q5_1: {
                dsq_block_q5_1 *y = (dsq_block_q5_1 *)vy + i;
                const float the_min = -min[k];
                y->d = dsq_f32_to_f16(scale[k]);
                y->m = dsq_f32_to_f16(-the_min);
                pack_q5_levels(Lk, y->qs, y->qh);
                break;
            }
            }
        }
    }
    return done;
}

int64_t dsq_quantize_q4_0_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2)
{
    return imat_blocks(Q4_0, x, y, nb, qw, sigma2);
}

int64_t dsq_quantize_q5_0_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2)
{
    return imat_blocks(Q5_0, x, y, nb, qw, sigma2);
}

int64_t dsq_quantize_q4_1_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2)
{
    return imat_blocks(Q4_1, x, y, nb, qw, sigma2);
}

int64_t dsq_quantize_q5_1_imat_blocks_avx2(const float *x, void *y, int64_t nb, const float *qw, float sigma2)
{
    return imat_blocks(Q5_1, x, y, nb, qw, sigma2);
}

/* ----------------------------------------------------------- dequantizers */

void dsq_dequantize_row_q4_0_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i q = _mm256_sub_epi8(nibbles_32(x[i].qs), _mm256_set1_epi8(8));
        store_scaled_i8(y + i * QK, q, _mm256_set1_ps(dsq_f16_to_f32(x[i].d)));
    }
}

void dsq_dequantize_row_q4_1_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled_u8_offset(y + i * QK, nibbles_32(x[i].qs), _mm256_set1_ps(dsq_f16_to_f32(x[i].d)),
                               _mm256_set1_ps(dsq_f16_to_f32(x[i].m)));
}

static inline __m256i q5_levels(const uint8_t *qs, const uint8_t *qh)
{
    return _mm256_or_si256(nibbles_32(qs), _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10)));
}

void dsq_dequantize_row_q5_0_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i q = _mm256_sub_epi8(q5_levels(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        store_scaled_i8(y + i * QK, q, _mm256_set1_ps(dsq_f16_to_f32(x[i].d)));
    }
}

void dsq_dequantize_row_q5_1_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled_u8_offset(y + i * QK, q5_levels(x[i].qs, x[i].qh), _mm256_set1_ps(dsq_f16_to_f32(x[i].d)),
                               _mm256_set1_ps(dsq_f16_to_f32(x[i].m)));
}

void dsq_dequantize_row_q8_0_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled_i8(y + i * QK, _mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_set1_ps(dsq_f16_to_f32(x[i].d)));
}

void dsq_dequantize_row_q8_1_avx2(const void *vx, float *y, int64_t n)
{
    const dsq_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled_i8(y + i * QK, _mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_set1_ps(dsq_f16_to_f32(x[i].d)));
}

/* ---------------------------------------------------------- dot products */

void dsq_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i qx = _mm256_sub_epi8(nibbles_32(x[i].qs), _mm256_set1_epi8(8));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * dsq_f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_quads(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

void dsq_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q4_1 *x = vx;
    const dsq_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * dsq_f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_quads(nibbles_32(x[i].qs), qy)), acc);
        mins += dsq_f16_to_f32(x[i].m) * dsq_f16_to_f32(y[i].s);
    }
    *s = hsum_ps(acc) + mins;
}

void dsq_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i qx = _mm256_sub_epi8(q5_levels(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * dsq_f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_quads(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

void dsq_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q5_1 *x = vx;
    const dsq_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * dsq_f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_quads(q5_levels(x[i].qs, x[i].qh), qy)), acc);
        mins += dsq_f16_to_f32(x[i].m) * dsq_f16_to_f32(y[i].s);
    }
    *s = hsum_ps(acc) + mins;
}

void dsq_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const dsq_block_q8_0 *x = vx;
    const dsq_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(dsq_f16_to_f32(x[i].d) * dsq_f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_quads(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

#else
typedef int dsq_legacy_avx2_unused; /* not an x86-64 GCC build: nothing to compile */
#endif
