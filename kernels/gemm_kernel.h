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
/* The edges of the 12x32 kernel without padded copies: C[mr x nr] (+)=
 * A[mr x kc] * the panels at Bp (one for nr <= 16, two adjacent ones up to
 * 32; columns past nr are the packing's zeros), 1 <= mr <= 12: only mr rows
 * of A are read and only nr columns of C touched (masked), with the same
 * arithmetic per element. */
/* One packed panel of B^T: dst[p * 16 + c] = B[c * ldb + p] for c < nc <= 16
 * and p < kc, zeros in columns nc..15; 16 x 16 blocks transposed in
 * registers (a float at a time, it was a tenth of a calibration pass). */
void dsq_gemm_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, float *dst);
void dsq_gemm_kernel_avx512_edge(int64_t mr, int64_t nr, int64_t kc, const float *A, int64_t lda, const float *Bp,
                                 float *C, int64_t ldc, bool accumulate);

#endif
