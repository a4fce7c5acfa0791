/* AVX512 (F+BW+VL) FP8 E4M3 decode (kernels/fp8.h): 16 codes per step
 * through F16 bit patterns, bit for bit the table's values. Only called when the
 * CPU has AVX512F, BW and VL. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl")
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

#endif
