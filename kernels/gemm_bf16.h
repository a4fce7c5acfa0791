/* BF16 matrix product for calibration passes: C = bf16(A) * bf16(op(B)) with
 * F32 accumulation, the arithmetic llm-compressor and AutoAWQ get from torch
 * when they run a BF16 model. On CPUs with AVX512-BF16 (vdpbf16ps: two
 * products per F32 lane per instruction) it runs at twice the rate of the F32
 * GEMM; elsewhere the same arithmetic runs in AVX2 lanes (two multiplies and
 * two adds per product pair: slower than the F32 GEMM, so `--compute auto`
 * picks F32 there, see dsq_cpu_use_bf16_gemm(); a forced BF16 run gets the
 * BF16 results at a usable speed), or in the scalar reference.
 *
 * Paths: the scalar reference; its AVX2 copy (kernels/gemm_bf16_avx2.c);
 * AVX512-BF16 (8 x 32 register tiles); AMX-BF16
 * (tdpbf16ps on 32 x 32 blocks, from 16 tokens up, kernels/gemm_bf16_amx.c).
 * The AVX512 and AVX2 kernels give the scalar kernel's bits (odd product of a pair
 * first); tdpbf16ps sums inside a tile step in an order Intel does not
 * specify to the bit (no per-pair or per-step rounding order reproduces
 * it), so the AMX path is held to the exact product of the BF16 operands
 * within F32 summation error instead (tests/test_gemm_bf16.c).
 *
 * Layout: A is already rounded to BF16, rows of lda (even) elements whose
 * entries from k to the next even count are zero (dsq_gemm_bf16_round_rows
 * writes it so). op(B) is F32 and rounded while it is packed: per KC block,
 * panels of NR columns hold k pairs interleaved, [pair][column][2], so one
 * 64-byte load feeds 16 columns with two k steps each. */
#ifndef DSQ_KERNELS_GEMM_BF16_H
#define DSQ_KERNELS_GEMM_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm.h"

#define DSQ_GEMM_BF16_MR 8
#define DSQ_GEMM_BF16_NR 32
#define DSQ_GEMM_BF16_KC 256 /* k values (128 pairs) per packed block */

typedef enum dsq_gemm_bf16_path {
    DSQ_GEMM_BF16_SCALAR,
    DSQ_GEMM_BF16_AVX512,
    DSQ_GEMM_BF16_AMX,
    DSQ_GEMM_BF16_AVX2, /* the scalar arithmetic in AVX2 lanes (CPUs without AVX512-BF16) */
    DSQ_GEMM_BF16_N_PATHS
} dsq_gemm_bf16_path;

const char *dsq_gemm_bf16_path_name(dsq_gemm_bf16_path p);
/* Whether this CPU (and OS) runs path p. */
bool dsq_gemm_bf16_path_available(dsq_gemm_bf16_path p);
/* The path dsq_gemm_bf16 takes for m rows of A: AMX from 16 rows where
 * available, else AVX512-BF16, else AVX2, else scalar (always scalar while
 * dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR) holds). */
dsq_gemm_bf16_path dsq_gemm_bf16_path_for(int64_t m);

/* Whether BF16 products outrun the F32 GEMM on this CPU, the choice of
 * `--compute auto`: only with AMX-BF16 (tiles at several times the F32
 * rate). AVX512-BF16 alone does not pay: on the Xeons measured (docs/
 * benchmarks.md, stop 39) vdpbf16ps zmm retires at a quarter of
 * vfmadd231ps's rate, 87 against 177 GFLOP/s of peak, and the BF16 kernel
 * runs at 0.6x the F32 GEMM. False while the scalar reference is forced. */
bool dsq_gemm_bf16_preferred(void);

/* Row length of A's BF16 copy for depth k (k rounded up to even). */
int64_t dsq_gemm_bf16_lda(int64_t k);
/* dst[r * ld + c] = bf16(src[r * lds + c]) for c < cols, zero up to ld. */
void dsq_gemm_bf16_round_rows(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst, int64_t ld);

/* Bytes of scratch dsq_gemm_bf16 needs for n output columns and depth k (any path). */
size_t dsq_gemm_bf16_scratch_bytes(int64_t n, int64_t k);

/* C[m x n] (+)= A[m x k] * op(B). A: BF16 as described above (lda even);
 * B and C: F32, leading dimensions in elements. scratch: 64-byte aligned,
 * dsq_gemm_bf16_scratch_bytes(n, k) bytes. Single-threaded. */
void dsq_gemm_bf16(dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const float *B,
                   int64_t ldb, float *C, int64_t ldc, bool accumulate, void *scratch);
/* The same on path p, which must be available (tests compare the paths). */
void dsq_gemm_bf16_on(dsq_gemm_bf16_path p, dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const uint16_t *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate, void *scratch);

/* op(B) = B^T packed once for many products (a linear's weights over a
 * calibration pass), op(B) [k x n]. pack_all packs B's rows [r0, r0 + nr)
 * (r0 a multiple of DSQ_GEMM_BF16_NR), given as nr F32 rows of k values ldb
 * apart from B, into P, which holds
 * dsq_gemm_bf16_packed_bytes(n, k) bytes; packing disjoint row ranges from
 * different threads is safe. dsq_gemm_bf16_packed then multiplies A by
 * columns [c0, c0 + nc) of the packed op(B) (c0 a multiple of NR), with the
 * same arithmetic as dsq_gemm_bf16 on the same path; scratch: 64-byte
 * aligned, dsq_gemm_bf16_scratch_bytes(0, k) bytes. */
size_t dsq_gemm_bf16_packed_bytes(int64_t n, int64_t k);
void dsq_gemm_bf16_pack_all(int64_t n, int64_t k, const float *B, int64_t ldb, int64_t r0, int64_t nr, uint16_t *P);
void dsq_gemm_bf16_packed(int64_t m, int64_t n, int64_t c0, int64_t nc, int64_t k, const uint16_t *A, int64_t lda,
                          const uint16_t *P, float *C, int64_t ldc, bool accumulate, void *scratch);

/* The micro-kernels (internal): C[MR x NR] (+)= A[MR x 2*np] * Bp, np pairs. */
void dsq_gemm_bf16_kernel_scalar(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                                 bool accumulate);
void dsq_gemm_bf16_kernel_avx2(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                               bool accumulate);
void dsq_gemm_bf16_kernel_avx512(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                                 bool accumulate);
/* The AMX block (internal): C[m x n] (+)= A[m x 2*np] * one packed KC block
 * whose panels hold npa pairs each (npa a multiple of 16, pairs past np
 * zero). apad: 32 * 2 * npa BF16 values; ctmp: 1024 floats. */
void dsq_gemm_bf16_block_amx(int64_t m, int64_t n, int64_t np, int64_t npa, const uint16_t *A, int64_t lda,
                             const uint16_t *Bp, float *C, int64_t ldc, bool accumulate, uint16_t *apad, float *ctmp);
/* The whole-depth AMX block (internal): C[mr x nr] (+)= the sum over nkb K
 * blocks of A_b[mr x 2*npa_b] * B_b, B_b one panel of a packed block, each
 * A_b readable for 32 rows (zero past the data) and 2*npa_b values (npa_b a
 * multiple of 16, zero past the depth); mr, nr <= 32; ctmp: 1024 floats.
 * Between dsq_gemm_bf16_amx_begin and _end on the calling thread. */
typedef struct dsq_gemm_bf16_amx_kblock {
    const uint16_t *A;
    int64_t lda; /* elements */
    const uint16_t *B;
    int64_t npa;
} dsq_gemm_bf16_amx_kblock;
/* A's mr rows (lda apart, 2*np values each from a K block's start) as 32
 * rows of 2*npa values, zeros past the data: the AMX paths' copy of a
 * clipped block, so tile loads never leave A and pad lanes multiply zeros. */
void dsq_gemm_bf16_pad_rows(const uint16_t *A, int64_t lda, int64_t mr, int64_t np, int64_t npa, uint16_t *pad);
void dsq_gemm_bf16_tile_amx(int64_t nkb, const dsq_gemm_bf16_amx_kblock *kb, int64_t mr, int64_t nr, float *C,
                            int64_t ldc, bool accumulate, float *ctmp);
void dsq_gemm_bf16_amx_begin(void);
void dsq_gemm_bf16_amx_end(void);
/* nc <= nr rows of B (ldb apart, kc values each) into one panel of nr
 * columns, [pair][column][2], pairs 0 .. ceil(kc/2)-1; the odd tail's pad
 * value is zero. Columns nc.. and later pairs are left as they are. */
void dsq_gemm_bf16_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, uint16_t *dst, int64_t nr);
void dsq_gemm_bf16_round_rows_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst,
                                     int64_t ld);

#endif
