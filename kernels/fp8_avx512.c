/* AVX512 (F+BW+VL) FP8 E4M3 decode (kernels/fp8.h): 16 codes per step from
 * integer operations, bit for bit the table's values. Only called when the
 * CPU has AVX512F, BW and VL. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl")
#endif

#include "kernels/fp8.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* The values of 16 codes (the low 16 bytes of c, zero-extended). */
INLINE __m512 decode16(__m128i c8)
{
    __m512i c = _mm512_cvtepu8_epi32(c8);
    __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
    __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    /* exponent field 0: m * 2^-9 (exact); 0 stays +0 before the sign */
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    __mmask16 is_sub = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(8));
    __m512i v = _mm512_mask_blend_epi32(is_sub, normal, _mm512_castps_si512(sub));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(v, sign));
}

INLINE __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

void dsq_fp8_decode_row_avx512(const uint8_t *codes, int64_t n, float scale, float *dst)
{
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m128i c = _mm_maskz_loadu_epi8(k, codes + i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(decode16(c), s));
    }
}

float dsq_fp8_dot_avx512(const uint8_t *codes, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i c = _mm512_loadu_si512(codes + i);
        a0 = _mm512_fmadd_ps(decode16(_mm512_castsi512_si128(c)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(decode16(_mm512_extracti32x4_epi32(c, 1)), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(decode16(_mm512_extracti32x4_epi32(c, 2)), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(decode16(_mm512_extracti32x4_epi32(c, 3)), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m128i c = _mm_maskz_loadu_epi8(k, codes + i);
        a0 = _mm512_fmadd_ps(decode16(c), _mm512_maskz_loadu_ps(k, x + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

#endif
