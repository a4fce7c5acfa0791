/* A linear layer y = x W^T (+ b) over any weight storage, so that one forward
 * pass runs the original model and every quantized artifact.
 *
 * The storage is a tagged struct with a function table: dense F32/F16/BF16
 * rows, every GGUF block type of the quant-type table, INT groups
 * (linear_intq.c) and 8-bit INT8/FP8 weights (linear_w8.c). Weights are usually views into
 * an mmap (nothing copied); `owned` holds what a storage had to allocate.
 *
 * Two compute paths (runtime/linear.c):
 *  - batched (n_tok > DSQ_LINEAR_GEMV_MAX_TOKENS): tiles of W are turned into
 *    F32 and multiplied with a blocked GEMM (kernels/gemm.h), OpenMP over
 *    tiles of output rows; F32 activations throughout.
 *  - decode (few tokens): each token's activation is prepared once (for GGUF
 *    block types quantized to the type's vec_dot_type, as llama.cpp does) and
 *    dotted with every row; OpenMP over rows. The two paths therefore differ
 *    by the activation rounding of the vec_dot types.
 *  - int8 batches (dsq_linear_forward_int8act, and the decode path's own
 *    batches): the Q8_0-paired block types keep the decode path's rounding
 *    and multiply in int8 (runtime/cpu/qgemm_i8.h). */
#ifndef DSQ_RUNTIME_LINEAR_H
#define DSQ_RUNTIME_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "quantizers/intq.h"
#include "quantizers/w8.h"

/* Up to this many rows the decode path is cheaper: the batched one turns all
 * of W into F32 on every call. */
#define DSQ_LINEAR_GEMV_MAX_TOKENS 7

typedef enum dsq_linear_kind {
    DSQ_LINEAR_DENSE = 0, /* F32, F16 or BF16 rows */
    DSQ_LINEAR_GGML,      /* a GGUF block type (Q4_0 .. Q6_K, IQ4_NL, IQ4_XS, ...) */
    DSQ_LINEAR_INTQ,      /* INTn groups from AWQ / GPTQ / compressed-tensors (linear_intq.c) */
    DSQ_LINEAR_W8,        /* INT8 / FP8 E4M3 with per-tensor/channel/block scales (linear_w8.c) */
} dsq_linear_kind;

typedef struct dsq_linear dsq_linear;

typedef struct dsq_linear_vtable {
    const char *name;
    /* F32 copy of rows [r0, r0 + nr) into dst (nr x in, row-major). */
    void (*rows_f32)(const dsq_linear *W, int64_t r0, int64_t nr, float *dst);
    /* Bytes of one token's prepared activation; 0 when dot_rows reads x itself. */
    size_t (*act_bytes)(const dsq_linear *W);
    void (*act_prepare)(const dsq_linear *W, const float *x, void *act);
    /* y[r - r0] = row r . x for r in [r0, r1). NULL: no decode path (GEMM is used). */
    void (*dot_rows)(const dsq_linear *W, const float *x, const void *act, int64_t r0, int64_t r1, float *y);
    /* Frees storage-specific state in priv (NULL when none). */
    void (*release)(dsq_linear *W);
    /* Optional: the input the storage's numerics multiply, xq[n_tok x in]
     * from x (FP8 activations rounded with their scales). Every path then runs
     * on xq. NULL: x itself. */
    dsq_status (*input_f32)(const dsq_linear *W, const float *x, float *xq, int n_tok);
    /* Optional: the storage's own product, used by every path instead of the
     * generic ones (INT8 activations times INT8 weights in int32,
     * kernels/gemm_i8.h; FP8 times FP8 with exact products). batched: called
     * for the gemm and bf16 paths, else for the decode path. NULL: the
     * generic paths. */
    dsq_status (*forward)(const dsq_linear *W, const float *x, float *y, int n_tok, bool batched);
    /* Optional: dot_rows for nt <= 4 (DSQ_QGEMM_TOKENS) tokens at once, their
     * prepared activations act_stride bytes apart, y[t * ldy + r - r0];
     * bit-identical to dot_rows token by token. NULL: dot_rows per token. */
    void (*dot_rows_multi)(const dsq_linear *W, const void *act, size_t act_stride, int nt, int64_t r0, int64_t r1,
                           float *y, int64_t ldy);
} dsq_linear_vtable;

struct dsq_linear {
    dsq_linear_kind kind;
    const dsq_linear_vtable *vt;
    int64_t in, out;  /* W is [out x in] */
    dsq_type type;    /* element or block type of data */
    const void *data; /* out rows of row_bytes each */
    size_t row_bytes;
    const float *bias;     /* [out] or NULL */
    void *owned;           /* freed by dsq_linear_release: a copy of data, if any */
    float *owned_bias;     /* freed by dsq_linear_release */
    void *priv;            /* state of later storage kinds */
    uint16_t *bf16_packed; /* dsq_linear_bf16_pack's copy, or NULL */
    void *q8_packed;       /* dsq_linear_q8_pack's copy, or NULL */
};

/* A view of [out x in] weights of type t (nothing copied). Fails for a type no
 * storage handles, or a row length that is not a multiple of its block. */
dsq_status dsq_linear_init(dsq_linear *W, dsq_type t, const void *data, int64_t out, int64_t in);
/* The same from a 2-D tensor view (shape {out, in}); checks nbytes. */
dsq_status dsq_linear_from_tensor(dsq_linear *W, const dsq_tensor *t);
/* Bias from any plain float type (F32 is kept as a view, others converted). */
dsq_status dsq_linear_set_bias(dsq_linear *W, dsq_type t, const void *bias, int64_t n);
void dsq_linear_release(dsq_linear *W);

/* y[n_tok x out] = x[n_tok x in] W^T + b, choosing the path by n_tok. */
dsq_status dsq_linear_forward(const dsq_linear *W, const float *x, float *y, int n_tok);
/* The two paths, for tests and benchmarks. The decode path at any n_tok
 * (llama.cpp's activation rounding): batches of the block types that pair
 * with Q8_0 activations (Q8_0, Q4_0, Q5_0, IQ4_NL) run the block-scaled int8
 * GEMM (runtime/cpu/qgemm_i8.h) where the CPU has it, the same arithmetic. */
dsq_status dsq_linear_forward_gemm(const dsq_linear *W, const float *x, float *y, int n_tok);
dsq_status dsq_linear_forward_gemv(const dsq_linear *W, const float *x, float *y, int n_tok);
/* Q8_0 weights packed once for the int8 kernel (runtime/cpu/qgemm_i8.h),
 * which every product on Q8_0-rounded activations then reads instead of the
 * blocks (the decode steps too: the same sums, in the kernel's order; 6% more
 * bytes than the blocks). A no-op for other storages and where the CPU has no
 * such kernel. The F32-activation paths keep reading data. */
dsq_status dsq_linear_q8_pack(dsq_linear *W);

/* dsq_linear_forward, except that batches of the Q8_0-paired block types take
 * the decode path's arithmetic too (Q8_0-rounded activations, the int8 GEMM
 * where the CPU has it): llama.cpp's results for those types at prefill
 * speed. Every other storage as dsq_linear_forward. */
dsq_status dsq_linear_forward_int8act(const dsq_linear *W, const float *x, float *y, int n_tok);
/* The batched path with x and W rounded to BF16 and F32 accumulation
 * (kernels/gemm_bf16.h): calibration passes, as torch runs a BF16 model. */
dsq_status dsq_linear_forward_bf16(const dsq_linear *W, const float *x, float *y, int n_tok);
/* A BF16 copy of W packed once (kernels/gemm_bf16.h) that
 * dsq_linear_forward_bf16 multiplies instead of converting and packing W on
 * every call: a calibration pass runs each linear once per sample with the
 * same weights. W's weights must stay unchanged until dsq_linear_bf16_unpack
 * (dsq_linear_release drops it too). Storages with their own product
 * (vt->forward) are left as they are. Same arithmetic, same bits. */
dsq_status dsq_linear_bf16_pack(dsq_linear *W);
void dsq_linear_bf16_unpack(dsq_linear *W);

/* F32 rows [r0, r0 + nr) of W (dst: nr x in). */
dsq_status dsq_linear_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst);

const char *dsq_linear_kind_name(dsq_linear_kind k);

/* ---- INT group storage (runtime/linear_intq.c) ----
 * The weights of an AutoAWQ / GPTQ / compressed-tensors linear: codes of 2, 3,
 * 4 or 8 bits (4-bit kept as nibbles, 8-bit as bytes, 2/3-bit as one byte
 * each), an F32 scale and an integer zero per (row, group), and optionally a
 * GPTQ act-order g_idx. Columns are stored sorted by group, so every group is
 * contiguous and the activation is permuted once per token instead.
 * Decode: W x = sum_g s_g (sum_{k in g} q_k x_k - z_g sum_{k in g} x_k), with
 * the group sums of x prepared once per token (AVX2/FMA or scalar). Batched:
 * tiles dequantized to F32 exactly as dsq_intq_dequantize does, then GEMM. */

/* Copies q (codes, scales, zeros, g_idx: validated here) into a new storage
 * owned by W; q may be freed afterwards. */
dsq_status dsq_linear_init_intq(dsq_linear *W, const dsq_intq *q);
bool dsq_linear_is_intq(const dsq_linear *W);
/* Bits per code of an INT group storage (0 for any other storage). */
int dsq_linear_intq_bits(const dsq_linear *W);

/* ---- 8-bit storage (runtime/linear_w8.c) ----
 * SmoothQuant W8A8 INT8 and FP8 E4M3 weights (quantizers/w8.h) with the
 * scheme's activation numerics: the input is quantized per token (or per
 * token group, or with the static scale) exactly as vLLM's kernels do before
 * the product; weight-only schemes multiply the unquantized input. INT8 x INT8
 * products accumulate in int32 (kernels/gemm_i8.h); FP8 codes decode through
 * a 256-entry table. */

/* Copies q (validated here) into a new storage owned by W. */
dsq_status dsq_linear_init_w8(dsq_linear *W, const dsq_w8q *q);
bool dsq_linear_is_w8(const dsq_linear *W);
/* The scheme of an 8-bit storage (NULL for any other storage). */
const dsq_w8_scheme *dsq_linear_w8_scheme(const dsq_linear *W);

#endif
