/* The AVX-VNNI row kernel of dsq_gemm_i8 (kernels/gemm_i8.h): the VEX-encoded
 * vpdpbusd on YMM, for CPUs with AVX-VNNI but no AVX512 (Alder Lake and
 * later clients). The offset form of gemm_i8_avx512.c on 32 bytes per step,
 * tiles of 4 weight rows x 2 tokens; the k tail runs in scalar code with the
 * same u8 offset, so 128 * rowsum(B) is taken off every column alike. Only
 * called when dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX_VNNI). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mavxvnni (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_i8.h"
#include "kernels/gemm_i8_rows.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define NR 4
#define NT 2
#define RB 32

#define INLINE static inline __attribute__((always_inline))

INLINE int32_t hsum(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE void tile(int nr, int nt, const dsq_gemm_i8_w *w, int64_t r, const int8_t *A, int64_t lda, int32_t *C,
                 int64_t ldc)
{
    const __m256i off = _mm256_set1_epi8((char)0x80);
    __m256i acc[NR][NT];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) acc[i][j] = _mm256_setzero_si256();
    const int8_t *B = w->B + r * w->ldb;
    int64_t k = w->k, c = 0;
    for (; c + 32 <= k; c += 32) {
        __m256i b[NR];
        for (int i = 0; i < nr; i++) b[i] = _mm256_loadu_si256((const __m256i *)(B + i * w->ldb + c));
        for (int j = 0; j < nt; j++) {
            __m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(A + j * lda + c)), off);
            for (int i = 0; i < nr; i++) acc[i][j] = _mm256_dpbusd_avx_epi32(acc[i][j], a, b[i]);
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) {
            int32_t t = hsum(acc[i][j]);
            for (int64_t cc = c; cc < k; cc++) t += (int32_t)(uint8_t)(A[j * lda + cc] ^ 0x80) * B[i * w->ldb + cc];
            C[j * ldc + i] = t - 128 * w->row_sums[r + i];
        }
}

#define TILE_NT(nr)                                                                                                    \
    if (nt == 1)                                                                                                       \
        tile(nr, 1, w, r, At, lda, Ct, ldc);                                                                           \
    else                                                                                                               \
        tile(nr, 2, w, r, At, lda, Ct, ldc);

DSQ_GEMM_I8_ROWS_FN(dsq_gemm_i8_rows_avx_vnni)

#endif
