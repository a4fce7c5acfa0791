/* INT8 x INT8 -> INT32 products for W8A8 linears: C[m x n] = A[m x k] B[n x k]^T,
 * A the per-token quantized activations, B the INT8 weight rows (both
 * two's-complement int8 in [-128, 127]). Every path gives the scalar
 * reference's int32 results bit for bit (integer sums do not depend on the
 * order), so callers may pick any.
 *
 * Paths (chosen at run time, see dsq_gemm_i8_best_path):
 *  - AVX512-VNNI (vpdpbusd on ZMM) and AVX-VNNI (the same on YMM): vpdpbusd
 *    multiplies unsigned by signed bytes, so A is offset to u8 = a + 128 (one
 *    XOR with 0x80) and 128 * rowsum(B) is subtracted at the end. vpdpbusd
 *    adds its four u8*s8 products into int32 without saturating, so this is
 *    exact for every byte value.
 *  - AVX2 (vpmaddubsw + vpmaddwd, as llama.cpp's mul_sum_i8_pairs): the offset
 *    form would saturate vpmaddubsw's int16 pair sums (255 * 127 * 2 > 32767),
 *    so the sign trick is used instead: u = |a| (exact as u8, |-128| = 128),
 *    v = vpsignb(b, a) = b * sign(a), and u * v = a * b. vpsignb negates
 *    -128 to -128, so b = -128 is clamped to -127 first (vpmaxsb) and the
 *    difference, -a at each column where b = -128, is added from a per-row
 *    list made once (dsq_gemm_i8_prepare). With |u| <= 128 and |v| <= 127 a
 *    pair sum is within [-32512, 32512]: no saturation.
 *  - AMX-INT8 (tdpbssd: signed x signed byte tiles into int32): exact as it
 *    stands, on weights packed at preparation into its tile layout (another
 *    copy of B, made only where the CPU and OS run AMX). Used for 16 tokens and
 *    more; fewer fill a 16-row tile too sparsely to beat AVX512-VNNI.
 *  - scalar: the reference.
 *
 * The weights are prepared once (row sums, the -128 lists) and the prepared
 * form is a view of B: B must outlive it. The kernels are single-threaded over
 * a range of weight rows; dsq_gemm_i8_parallel splits the rows over OpenMP
 * threads (dsq_cpu_threads()). */
#ifndef DSQ_KERNELS_GEMM_I8_H
#define DSQ_KERNELS_GEMM_I8_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dsq_gemm_i8_path {
    DSQ_GEMM_I8_SCALAR = 0,
    DSQ_GEMM_I8_AVX2,
    DSQ_GEMM_I8_AVX_VNNI,
    DSQ_GEMM_I8_AVX512_VNNI,
    DSQ_GEMM_I8_AMX, /* AMX-INT8 tiles; dsq_gemm_i8_parallel uses it from 16 tokens */
    DSQ_GEMM_I8_N_PATHS
} dsq_gemm_i8_path;

typedef struct dsq_gemm_i8_w {
    int64_t n, k, ldb;
    const int8_t *B;   /* [n rows of ldb bytes], a view */
    int32_t *row_sums; /* [n]: sum of each row (the VNNI offset correction) */
    int64_t *m128_off; /* [n + 1]: row r's -128 columns are m128_col[m128_off[r] .. m128_off[r+1]) */
    int32_t *m128_col;
    int64_t kp;     /* AMX: k rounded up to 64 */
    uint8_t *amx_b; /* AMX: [ceil(n/16)] panels of [kp/4][16 rows][4] bytes, zero padded; NULL without AMX */
} dsq_gemm_i8_w;

/* Prepares B [n x k] (rows ldb bytes apart) for every path. */
dsq_status dsq_gemm_i8_prepare(dsq_gemm_i8_w *w, const int8_t *B, int64_t n, int64_t k, int64_t ldb);
void dsq_gemm_i8_w_free(dsq_gemm_i8_w *w);

/* "scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8". */
const char *dsq_gemm_i8_path_name(dsq_gemm_i8_path p);
/* Whether this CPU (and OS) runs path p. */
bool dsq_gemm_i8_path_available(dsq_gemm_i8_path p);
/* The fastest available path; scalar while dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR) holds. */
dsq_gemm_i8_path dsq_gemm_i8_best_path(void);

/* C[t * ldc + (r - r0)] = sum_c A[t * lda + c] * B[r][c] for t < m, r in [r0, r1),
 * on path p (which must be available). Single-threaded. */
void dsq_gemm_i8_rows(dsq_gemm_i8_path p, const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A,
                      int64_t lda, int32_t *C, int64_t ldc);
/* All n rows on the best path, rows split over threads. C is [m x ldc]. */
void dsq_gemm_i8_parallel(const dsq_gemm_i8_w *w, int64_t m, const int8_t *A, int64_t lda, int32_t *C, int64_t ldc);

/* The reference, needing no preparation: C[m x n] = A B^T. */
void dsq_gemm_i8_ref(int64_t m, int64_t n, int64_t k, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                     int32_t *C, int64_t ldc);

/* The INT8 activation rule of quantizers/w8.c (dsq_w8_act_quantize with
 * DSQ_W8_INT8), vectorized: scale_in > 0 is used as given, else amax / 127
 * (1 when x is all zero); codes = clamp(rint(x / s), -128, 127) with the same
 * IEEE division, rounding and NaN handling, so bytes and scale are the
 * reference's (tests/test_gemm_i8.c compares them). Returns false, writing
 * nothing, where no SIMD version runs (no AVX512F+BW, or the scalar reference
 * forced): the caller then calls dsq_w8_act_quantize itself (kernels/ sit
 * below quantizers/ and cannot). */
bool dsq_gemm_i8_quantize_act(const float *x, int64_t n, float scale_in, int8_t *codes, float *scale);

/* sum_i w[i] * x[i] in F32 for int8 w and F32 x: the decode path of INT8
 * weights whose scheme leaves x unquantized (weight-only, group activations);
 * AVX512 where present, else a scalar loop (the order of the sum is the
 * path's own). */
float dsq_gemm_i8_dot_f32(const int8_t *w, const float *x, int64_t n);

/* The SIMD row kernels (internal to kernels/gemm_i8*.c), same contract as dsq_gemm_i8_rows. */
void dsq_gemm_i8_rows_avx2(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A, int64_t lda,
                           int32_t *C, int64_t ldc);
void dsq_gemm_i8_rows_avx_vnni(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A, int64_t lda,
                               int32_t *C, int64_t ldc);
void dsq_gemm_i8_rows_avx512_vnni(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A,
                                  int64_t lda, int32_t *C, int64_t ldc);
void dsq_gemm_i8_rows_amx(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A, int64_t lda,
                          int32_t *C, int64_t ldc);
float dsq_gemm_i8_quantize_act_avx512(const float *x, int64_t n, float scale_in, int8_t *codes);
float dsq_gemm_i8_dot_f32_avx512(const int8_t *w, const float *x, int64_t n);

#endif
