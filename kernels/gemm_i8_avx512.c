/* The AVX512-VNNI row kernel of dsq_gemm_i8 (kernels/gemm_i8.h): tiles of 4
 * weight rows x 4 tokens, 16 ZMM accumulators of vpdpbusd over 64 bytes of k
 * per step, A offset to u8 by an XOR with 0x80 as it is loaded, and
 * 128 * rowsum(B) taken off at the end. The k tail is a masked load: the zero
 * bytes it gives B make the padded products 0 whatever A's padding becomes.
 * Only called when dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX512_VNNI).
 * Also the AVX512 INT8 activation quantizer (dsq_gemm_i8_quantize_act: F and
 * BW only) and the int8 x F32 row dot (F, BW, VL). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_i8.h"
#include "kernels/gemm_i8_rows.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define NR 4  /* weight rows per tile */
#define NT 4  /* tokens per tile */
#define RB 32 /* weight rows per block: 4 tokens' rows of A stay in L1 across a block */

#define INLINE static inline __attribute__((always_inline))

/* C[j][i] for a tile of nr rows x nt tokens (compile-time constants after inlining). */
INLINE void tile(int nr, int nt, const dsq_gemm_i8_w *w, int64_t r, const int8_t *A, int64_t lda, int32_t *C,
                 int64_t ldc)
{
    const __m512i off = _mm512_set1_epi8((char)0x80);
    __m512i acc[NR][NT];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) acc[i][j] = _mm512_setzero_si512();
    const int8_t *B = w->B + r * w->ldb;
    int64_t k = w->k, c = 0;
    for (; c + 64 <= k; c += 64) {
        __m512i b[NR], a[NT];
        for (int i = 0; i < nr; i++) b[i] = _mm512_loadu_si512(B + i * w->ldb + c);
        for (int j = 0; j < nt; j++) a[j] = _mm512_xor_si512(_mm512_loadu_si512(A + j * lda + c), off);
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nt; j++) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a[j], b[i]);
    }
    if (c < k) {
        __mmask64 m = ~(__mmask64)0 >> (64 - (k - c));
        __m512i b[NR], a[NT];
        for (int i = 0; i < nr; i++) b[i] = _mm512_maskz_loadu_epi8(m, B + i * w->ldb + c);
        for (int j = 0; j < nt; j++) a[j] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, A + j * lda + c), off);
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nt; j++) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a[j], b[i]);
    }
    for (int i = 0; i < nr; i++) {
        int32_t corr = 128 * w->row_sums[r + i];
        for (int j = 0; j < nt; j++) C[j * ldc + i] = _mm512_reduce_add_epi32(acc[i][j]) - corr;
    }
}

#define TILE_NT(nr)                                                                                                    \
    switch (nt) {                                                                                                      \
    case 1: tile(nr, 1, w, r, At, lda, Ct, ldc); break;                                                                \
    case 2: tile(nr, 2, w, r, At, lda, Ct, ldc); break;                                                                \
    case 3: tile(nr, 3, w, r, At, lda, Ct, ldc); break;                                                                \
    default: tile(nr, 4, w, r, At, lda, Ct, ldc); break;                                                               \
    }

DSQ_GEMM_I8_ROWS_FN(dsq_gemm_i8_rows_avx512_vnni)

float dsq_gemm_i8_quantize_act_avx512(const float *x, int64_t n, float scale_in, int8_t *codes)
{
    float s = scale_in;
    if (!(s > 0.0f)) {
        /* max(|x|, m) keeps m when |x| is NaN, as the reference's "fabsf(x) > amax" does */
        __m512 m = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
        if (i < n) {
            __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i)), m);
        }
        s = _mm512_reduce_max_ps(m) / 127.0f;
        if (s == 0.0f) s = 1.0f;
    }
    /* rint(x / s) with the true division, then max(r, -128) (a NaN r gives the
     * second operand, -128, as the reference's !(r >= -128) does) and min 127 */
    const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), vs),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        _mm512_mask_cvtsepi32_storeu_epi8(codes + i, k, _mm512_cvtps_epi32(r));
    }
    return s;
}

float dsq_gemm_i8_dot_f32_avx512(const int8_t *w, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(w + i));
        __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
        a0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, w + i)));
        a0 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(k, x + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

#endif
