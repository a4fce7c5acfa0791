/* The backend seam: every op the forward pass and the calibration passes run
 * goes through a dsq_backend table carried by the context (runtime/forward.h),
 * the way ggml dispatches through its backend interface. The CPU is the first
 * instance (runtime/cpu/backend_cpu.c); a CUDA backend is a second table with
 * the same ops over device buffers, and the model code does not change.
 *
 * Buffers are the backend's (alloc/free/copy); activations are F32 row-major,
 * one row per token. Each call gets the context's execution settings
 * (dsq_exec): its thread count (threads are per context, not per process)
 * and its product arithmetic. */
#ifndef DSQ_RUNTIME_BACKEND_H
#define DSQ_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/cpu/ops.h"
#include "runtime/linear.h"
#include "runtime/matmul_mode.h"

typedef struct dsq_exec {
    int threads;          /* <= 0: the backend's default */
    dsq_matmul_mode mode; /* how products (and attention's, and SwiGLU's exp) are computed */
} dsq_exec;

typedef struct dsq_backend {
    const char *name;
    /* n floats of backend memory (NULL when out of memory), and back */
    float *(*alloc)(size_t n);
    void (*free)(float *p);
    /* dst = src, n floats, both backend memory */
    void (*copy)(float *dst, const float *src, size_t n);
    /* out[t] = row tokens[t] of E (a host tensor of any storage type) */
    dsq_status (*embed)(const dsq_exec *e, const dsq_tensor *E, const int32_t *tokens, int n, float *out);
    /* y = x / rms(x) * w per row of dim (y may be x) */
    void (*rmsnorm)(const dsq_exec *e, const float *x, const float *w, float *y, int n, int64_t dim, float eps);
    /* rotates n_heads heads in each of n rows of x (stride floats apart) at positions pos0.. */
    void (*rope)(const dsq_exec *e, const dsq_rope *r, float *x, int n, int n_heads, int64_t stride, int pos0);
    /* causal attention of n queries over cache positions [0, pos0 + n) (runtime/cpu/ops.h) */
    dsq_status (*attention)(const dsq_exec *e, const dsq_attn_shape *s, const float *q, const float *kc,
                            const float *vc, float *out, int n, int pos0);
    /* out = silu(gate) * up, n floats (out may alias either) */
    void (*swiglu)(const dsq_exec *e, const float *gate, const float *up, float *out, size_t n);
    /* y += x */
    void (*add)(const dsq_exec *e, float *y, const float *x, size_t n);
    /* y = x W^T + b over any linear storage */
    dsq_status (*matmul)(const dsq_exec *e, const dsq_linear *W, const float *x, float *y, int n);
    /* per-head products with dense F32 weights (runtime/cpu/ops.h dsq_head_mm; MLA) */
    dsq_status (*head_matmul)(const dsq_exec *e, const dsq_head_mm *p, const float *x, float *y, int n);
    /* n rows of w floats: dst + r * ds = src + r * ss (column slices of wider rows) */
    void (*copy_rows)(float *dst, int64_t ds, const float *src, int64_t ss, int64_t w, int n);
    /* dst row r = src row idx[r] (rows of w floats), n rows */
    void (*gather_rows)(float *dst, const float *src, const int32_t *idx, int64_t w, int n);
    /* dst row idx[r] += wt[r] * src row r, n rows of w floats (idx distinct) */
    void (*scatter_add_rows)(float *dst, const float *src, const int32_t *idx, const float *wt, int64_t w, int n);
    /* MoE routing of n tokens from F32 router logits [n x n_routed] (runtime/cpu/ops.h dsq_cpu_moe_route) */
    dsq_status (*moe_route)(const dsq_exec *e, const dsq_arch_moe *m, const float *logits, const float *bias,
                            int32_t *idx, float *wt, int n);
} dsq_backend;

/* The CPU backend (OpenMP, AVX2 / AVX512-BF16 kernels chosen at run time). */
extern const dsq_backend dsq_backend_cpu;

#endif
