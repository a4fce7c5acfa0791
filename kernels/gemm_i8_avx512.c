/* The AVX512-VNNI row kernel of dsq_gemm_i8 (kernels/gemm_i8.h): tiles of 4
 * weight rows x 4 tokens, 16 ZMM accumulators of vpdpbusd over 64 bytes of k
 * per step, A offset to u8 by an XOR with 0x80 as it is loaded, and
 * 128 * rowsum(B) taken off at the end. The k tail is a masked load: the zero
 * bytes it gives B make the padded products 0 whatever A's padding becomes.
 * Only called when dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX512_VNNI). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vnni")
#endif

#include "kernels/gemm_i8.h"

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

void dsq_gemm_i8_rows_avx512_vnni(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A,
                                  int64_t lda, int32_t *C, int64_t ldc)
{
    for (int64_t rb = r0; rb < r1; rb += RB) {
        int64_t re = rb + RB < r1 ? rb + RB : r1;
        for (int64_t t0 = 0; t0 < m; t0 += NT) {
            int nt = m - t0 < NT ? (int)(m - t0) : NT;
            const int8_t *At = A + t0 * lda;
            for (int64_t r = rb; r < re; r += NR) {
                int32_t *Ct = C + t0 * ldc + (r - r0);
                switch (re - r < NR ? re - r : NR) {
                case 1: TILE_NT(1); break;
                case 2: TILE_NT(2); break;
                case 3: TILE_NT(3); break;
                default: TILE_NT(4); break;
                }
            }
        }
    }
}

#endif
