/* Products of int8 blocks of 32 values with one float scale per block on both
 * sides: what llama.cpp computes for a GGUF block type whose vec_dot type is
 * Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL weights times Q8_0-rounded activations,
 * ggml-cpu's vec_dot_q8_0_q8_0 and kin):
 *
 *   y[t][r] = sum over blocks b, in order b = 0, 1, ..., of
 *             (float)I(t, r, b) * (dw[r][b] * da[t][b])
 *
 * with I the exact int32 sum of the block's 32 code products, each term added
 * to the F32 sum by one fused multiply-add. Every path gives the reference's
 * bits: the integer sums do not depend on their order, |I| < 2^24 converts
 * exactly, and the scale product and the FMA are the same IEEE operations in
 * the same order.
 *
 * The weights are packed per call into panels of 32 rows (dsq_gemm_q8_pack),
 * the layout the AVX512-VNNI kernel reads: per block, for each 4 columns, the
 * 32 rows' 4 bytes offset to unsigned (code + 128, vpdpbusd's unsigned side),
 * then the 32 rows' scales. The offset is taken back per token and block as
 * -128 * (sum of the block's activation codes), the integer the accumulator
 * starts from, so it costs nothing in the loop.
 *
 * Paths: AVX512-VNNI (vpdpbusd, x86-64 with AVX512 F/BW/VNNI) and a scalar
 * loop over the same panels (every other CPU, and the tests' check of the
 * packing). Single-threaded; callers split rows or tokens. */
#ifndef DSQ_KERNELS_GEMM_Q8_H
#define DSQ_KERNELS_GEMM_Q8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSQ_GEMM_Q8_BLOCK 32 /* values per block */
#define DSQ_GEMM_Q8_NR 32    /* weight rows per packed panel */

/* Bytes of the panels for nr rows of k columns (k a multiple of 32). */
size_t dsq_gemm_q8_packed_bytes(int64_t nr, int64_t k);

/* Packs rows [0, nr) of codes q (row r at q + r * ldq, k bytes) and their block
 * scales d (row r at d + r * ldd, k / 32 floats) into P; rows past nr in the
 * last panel get zero codes and zero scales. */
void dsq_gemm_q8_pack(int64_t nr, int64_t k, const int8_t *q, int64_t ldq, const float *d, int64_t ldd, void *P);

/* s[b] = the sum of block b's 32 codes, for the k / 32 blocks of one row. */
void dsq_gemm_q8_block_sums(const int8_t *q, int64_t k, int32_t *s);

/* y[t * ldy + r] for t < m, r < nr: m activation rows (codes A + t * lda, block
 * scales da + t * ldd, block sums sa + t * ldd) times the nr packed rows P. */
void dsq_gemm_q8(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da, const int32_t *sa,
                 int64_t ldd, const void *P, float *y, int64_t ldy);

/* The same on unpacked weights (codes W + r * ldw, scales dw + r * lddw): the
 * definition above, written out. */
void dsq_gemm_q8_ref(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da, int64_t ldd,
                     const int8_t *W, int64_t ldw, const float *dw, int64_t lddw, float *y, int64_t ldy);

/* Whether dsq_gemm_q8 runs its AVX512-VNNI kernel now (the CPU has it and the
 * scalar reference is not forced by dsq_cpu_set_isa). */
bool dsq_gemm_q8_simd(void);

/* The AVX512-VNNI kernel (internal to kernels/gemm_q8*.c), same contract. */
void dsq_gemm_q8_avx512(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da,
                        const int32_t *sa, int64_t ldd, const void *P, float *y, int64_t ldy);

#endif
