/* Private to kernels/ (gemm_i8_*.c): the row-block walk every SIMD path of
 * the INT8 GEMM shares, so that a path only writes its tile kernel. The
 * including file defines NR (weight rows per tile; the walk handles 1..4), NT
 * (tokens per tile), RB (weight rows per block) and TILE_NT(nr), which runs
 * its tile for nr rows and the nt tokens in scope (w, r, At, lda, Ct, ldc). */
#ifndef DSQ_KERNELS_GEMM_I8_ROWS_H
#define DSQ_KERNELS_GEMM_I8_ROWS_H

/* Defines fn: C[t, r - r0] = A[t] . B[r] for rows [r0, r1) and m tokens. */
#define DSQ_GEMM_I8_ROWS_FN(fn)                                                                                        \
    void fn(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A, int64_t lda, int32_t *C,       \
            int64_t ldc)                                                                                               \
    {                                                                                                                  \
        for (int64_t rb = r0; rb < r1; rb += RB) {                                                                     \
            int64_t re = rb + RB < r1 ? rb + RB : r1;                                                                  \
            for (int64_t t0 = 0; t0 < m; t0 += NT) {                                                                   \
                int nt = m - t0 < NT ? (int)(m - t0) : NT;                                                             \
                const int8_t *At = A + t0 * lda;                                                                       \
                for (int64_t r = rb; r < re; r += NR) {                                                                \
                    int32_t *Ct = C + t0 * ldc + (r - r0);                                                             \
                    switch (re - r < NR ? re - r : NR) {                                                               \
                    case 1: TILE_NT(1); break;                                                                         \
                    case 2: TILE_NT(2); break;                                                                         \
                    case 3: TILE_NT(3); break;                                                                         \
                    default: TILE_NT(4); break;                                                                        \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }

#endif
