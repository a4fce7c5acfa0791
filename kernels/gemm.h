/* Single-threaded F32 matrix product for the CPU backend: C = A * op(B),
 * cache-blocked (panels of B packed per K block, 6x16 register tiles), with
 * an AVX2/FMA micro-kernel chosen at run time (and a 12x32 AVX-512 one where
 * the CPU has it, bit for bit the same results) and a scalar reference of the
 * same shape. Callers split the work across threads (runtime/linear.c over
 * output column tiles, attention over heads). */
#ifndef DSQ_KERNELS_GEMM_H
#define DSQ_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSQ_GEMM_MR 6
#define DSQ_GEMM_NR 16
#define DSQ_GEMM_KC 256

typedef enum dsq_gemm_b {
    DSQ_GEMM_BT, /* B is [n x k] row-major (a weight matrix): C = A * B^T */
    DSQ_GEMM_BN, /* B is [k x n] row-major: C = A * B */
} dsq_gemm_b;

/* Floats of scratch dsq_gemm_f32 needs for n output columns and depth k. */
size_t dsq_gemm_scratch_floats(int64_t n, int64_t k);

/* C[m x n] (+)= A[m x k] * op(B). Leading dimensions are in floats.
 * accumulate: add to C instead of overwriting it. scratch: at least
 * dsq_gemm_scratch_floats(n, k) floats, 32-byte aligned. */
void dsq_gemm_f32(dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float *C, int64_t ldc, bool accumulate, float *scratch);

/* Allocates scratch suitably aligned (free with free()); NULL on failure. */
float *dsq_gemm_scratch_alloc(size_t floats);

#endif
