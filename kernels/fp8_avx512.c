/* AVX512 (F+BW+VL) FP8 E4M3 decode (kernels/fp8.h): 16 codes per step
 * through F16 bit patterns, bit for bit the table's values; and the FP8
 * activation quantizer with dsq_w8_act_quantize's bytes. Only called when the
 * CPU has AVX512F, BW and VL. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f -mavx512bw -mavx512vl (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/fp8.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* The values of 16 codes (the low 16 bytes of c8), divided by 2^8, through
 * F16: the code's sign, exponent and mantissa bits placed at F16's sign bit,
 * the low 4 of its 5 exponent bits and its top 3 mantissa bits make an F16 of
 * value(code) * 2^-8 (exponent bias 15 instead of 7), subnormals included,
 * and vcvtph2ps widens it exactly. */
INLINE __m512 decode16_div256(__m128i c8)
{
    __m256i c = _mm256_cvtepu8_epi16(c8);
    __m256i h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(c, 8), _mm256_set1_epi16((short)0x8000)),
                                _mm256_and_si256(_mm256_slli_epi16(c, 7), _mm256_set1_epi16(0x3f80)));
    return _mm512_cvtph_ps(h);
}

INLINE __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

void dsq_fp8_decode_row_avx512(const uint8_t *codes, int64_t n, float scale, float *dst)
{
    const __m512 s = _mm512_set1_ps(scale), k256 = _mm512_set1_ps(256.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m128i c = _mm_maskz_loadu_epi8(k, codes + i);
        /* x 2^8 is exact, so the product with the scale is the table's */
        _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(_mm512_mul_ps(decode16_div256(c), k256), s));
    }
}

float dsq_fp8_dot_avx512(const uint8_t *codes, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i c = _mm512_loadu_si512(codes + i);
        a0 = _mm512_fmadd_ps(decode16_div256(_mm512_castsi512_si128(c)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(decode16_div256(_mm512_extracti32x4_epi32(c, 1)), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(decode16_div256(_mm512_extracti32x4_epi32(c, 2)), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(decode16_div256(_mm512_extracti32x4_epi32(c, 3)), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m128i c = _mm_maskz_loadu_epi8(k, codes + i);
        a0 = _mm512_fmadd_ps(decode16_div256(c), _mm512_maskz_loadu_ps(k, x + i), a0);
    }
    /* the sums were of value / 2^8: a power of two, undone exactly */
    return 256.0f * _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* E4M3 codes of 16 values already clamped to [-448, 448], rounded to nearest
 * even: from E4M3's smallest normal 2^-6 up, the F32 bits rebiased (exponent
 * 127 -> 7) and shifted right by 20 with round-half-even on the dropped bits;
 * below it, rint(|v| * 2^9) units of the subnormal step 2^-9 (exact scaling;
 * 8 units is the code of 2^-6 itself). */
INLINE __m512i encode16(__m512 v)
{
    __m512i b = _mm512_castps_si512(v);
    __m512i sign = _mm512_srli_epi32(_mm512_and_si512(b, _mm512_set1_epi32((int)0x80000000u)), 24);
    __m512i a = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
    __m512i r = _mm512_sub_epi32(a, _mm512_set1_epi32(120 << 23));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(1));
    __m512i normal = _mm512_srli_epi32(_mm512_add_epi32(r, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff), odd)), 20);
    __m512 units = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(121 << 23)); /* |v| < 2^-6 */
    __m512i mag = _mm512_mask_blend_epi32(sub, normal, _mm512_cvtps_epi32(units));
    return _mm512_or_si512(mag, sign);
}

float dsq_fp8_quantize_act_avx512(const float *x, int64_t n, float scale_in, uint8_t *codes)
{
    float s = scale_in;
    if (!(s > 0.0f)) {
        /* max(|x|, m) keeps m when |x| is NaN, as the reference's "fabsf(x) > amax" does */
        __m512 m = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16)
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask(n - i), x + i)), m);
        s = _mm512_reduce_max_ps(m) / 448.0f;
        if (s == 0.0f) s = 1.0f;
    }
    /* the reference's clamp: max(q, -448) gives -448 for a NaN q (second operand) */
    const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-448.0f), hi = _mm512_set1_ps(448.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), vs);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
        _mm512_mask_cvtepi32_storeu_epi8(codes + i, k, encode16(q));
    }
    return s;
}

#endif
