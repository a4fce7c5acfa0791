/* The AVX2 row kernel of dsq_gemm_i8 (kernels/gemm_i8.h): vpmaddubsw +
 * vpmaddwd with the sign trick, tiles of 4 weight rows x 2 tokens (8 YMM
 * accumulators; the clamped rows, a token's bytes and |a| take the rest of
 * the 16 registers). Per 32 bytes of k: bc = max(b, -127) once per row,
 * u = |a| once per token, then per (row, token) v = vpsignb(bc, a),
 * p = vpmaddubsw(u, v) (pair sums within [-32512, 32512], see the header) and
 * vpmaddwd(p, 1) into int32. The k tail runs in scalar code on the same
 * clamped values, so the -128 fix-ups (-a at each listed column) apply to
 * every column alike. Only called when the CPU has AVX2. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
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
    const __m256i m127 = _mm256_set1_epi8(-127), ones = _mm256_set1_epi16(1);
    __m256i acc[NR][NT];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) acc[i][j] = _mm256_setzero_si256();
    const int8_t *B = w->B + r * w->ldb;
    int64_t k = w->k, c = 0;
    for (; c + 32 <= k; c += 32) {
        __m256i bc[NR];
        for (int i = 0; i < nr; i++)
            bc[i] = _mm256_max_epi8(_mm256_loadu_si256((const __m256i *)(B + i * w->ldb + c)), m127);
        for (int j = 0; j < nt; j++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(A + j * lda + c)), u = _mm256_abs_epi8(a);
            for (int i = 0; i < nr; i++) {
                __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(bc[i], a));
                acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(p, ones));
            }
        }
    }
    int32_t s[NR][NT];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) {
            int32_t t = hsum(acc[i][j]);
            for (int64_t cc = c; cc < k; cc++) {
                int8_t b = B[i * w->ldb + cc];
                t += (int32_t)A[j * lda + cc] * (b < -127 ? -127 : b);
            }
            s[i][j] = t;
        }
    for (int i = 0; i < nr; i++)
        for (int64_t e = w->m128_off[r + i]; e < w->m128_off[r + i + 1]; e++)
            for (int j = 0; j < nt; j++) s[i][j] -= A[j * lda + w->m128_col[e]];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) C[j * ldc + i] = s[i][j];
}

#define TILE_NT(nr)                                                                                                    \
    if (nt == 1)                                                                                                       \
        tile(nr, 1, w, r, At, lda, Ct, ldc);                                                                           \
    else                                                                                                               \
        tile(nr, 2, w, r, At, lda, Ct, ldc);

DSQ_GEMM_I8_ROWS_FN(dsq_gemm_i8_rows_avx2)

#endif
