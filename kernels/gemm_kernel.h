/* Private to kernels/ (gemm*.c): the micro-kernels behind dsq_gemm_f32.
 * The 6x16 ones: C[6 x 16] (+)= A[6 x kc] (rows lda apart) * Bp, where Bp is
 * a packed panel of kc rows of 16 floats (32-byte aligned). The 12x32 one:
 * C[12 x 32] (+)= A[12 x kc] * [Bp | Bp + 16 kc], two adjacent panels
 * (any alignment), with the 6x16 kernels' arithmetic per element. */
#define DSQ_GEMM_WIDE_MR 12
#define DSQ_GEMM_WIDE_NR 32
#ifndef DSQ_KERNELS_GEMM_KERNEL_H
#define DSQ_KERNELS_GEMM_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

void dsq_gemm_kernel_scalar(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate);
void dsq_gemm_kernel_avx2(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                          bool accumulate);

void dsq_gemm_kernel_avx512(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate);

#endif
