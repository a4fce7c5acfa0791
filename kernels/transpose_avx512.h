/* Private to the AVX-512 kernels (files built with -mavx512f): a 16 x 16
 * transpose of 32-bit words in registers, shared by the F32 GEMM's packing
 * of B^T (floats) and the BF16 GEMM's (BF16 pairs). */
#ifndef DSQ_KERNELS_TRANSPOSE_AVX512_H
#define DSQ_KERNELS_TRANSPOSE_AVX512_H

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* r[i] word j -> r[j] word i. Three stages: words within 128-bit lanes, then
 * 64-bit halves, then the lanes themselves. */
static inline void dsq_transpose16_epi32(__m512i r[16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    /* b[4i + m] lane l = word 4l + m of rows 4i .. 4i+3 */
    for (int m = 0; m < 4; m++) {
        __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x44), c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xee);
        __m512i c2 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x44),
                c3 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xee);
        r[m] = _mm512_shuffle_i32x4(c0, c2, 0x88);
        r[4 + m] = _mm512_shuffle_i32x4(c0, c2, 0xdd);
        r[8 + m] = _mm512_shuffle_i32x4(c1, c3, 0x88);
        r[12 + m] = _mm512_shuffle_i32x4(c1, c3, 0xdd);
    }
}

#endif

#endif
