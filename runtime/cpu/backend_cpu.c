/* The CPU instance of the backend seam: the ops of runtime/cpu/ops.h on host
 * memory, each run with the calling context's thread count. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "runtime/backend.h"

/* The kernels read their team size from dsq_cpu_threads(), which is per
 * calling thread: setting it here gives each context its own. */
static void enter(const dsq_exec *e)
{
    if (e->threads > 0) dsq_cpu_set_threads(e->threads);
}

/* Cache-line aligned: the GEMM kernels store whole 64-byte rows of C (a ZMM
 * or an AMX tile row), which split across two lines on malloc's 16-byte
 * alignment (measured: the AMX BF16 linear at 512 tokens 776 -> 944 GFLOP/s). */
static float *cpu_alloc(size_t n)
{
    if (n > (SIZE_MAX - 63) / sizeof(float)) return NULL;
    size_t bytes = ((n ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes);
}

static void cpu_free(float *p) { free(p); }

static void cpu_copy(float *dst, const float *src, size_t n)
{
    if (dst != src) memcpy(dst, src, n * sizeof *dst);
}

static dsq_status cpu_embed(const dsq_exec *e, const dsq_tensor *E, const int32_t *tokens, int n, float *out)
{
    enter(e);
    return dsq_cpu_embed(E, tokens, n, out);
}

static void cpu_rmsnorm(const dsq_exec *e, const float *x, const float *w, float *y, int n, int64_t dim, float eps)
{
    enter(e);
    dsq_cpu_rmsnorm(x, w, y, n, dim, eps);
}

static void cpu_rope(const dsq_exec *e, const dsq_rope *r, float *x, int n, int n_heads, int64_t stride, int pos0)
{
    enter(e);
    dsq_cpu_rope(r, x, n, n_heads, stride, pos0);
}

static dsq_status cpu_attention(const dsq_exec *e, const dsq_attn_shape *s, const float *q, const float *kc,
                                const float *vc, float *out, int n, int pos0)
{
    enter(e);
    dsq_attn_shape sh = *s;
    sh.bf16 = e->mode == DSQ_MATMUL_BF16; /* BF16 passes run attention's products in BF16 too */
    return dsq_cpu_attention(&sh, q, kc, vc, out, n, pos0);
}

static void cpu_swiglu(const dsq_exec *e, const float *gate, const float *up, float *out, size_t n)
{
    enter(e);
    if (e->mode == DSQ_MATMUL_BF16) dsq_cpu_swiglu_fast(gate, up, out, n);
    else dsq_cpu_swiglu(gate, up, out, n);
}

static void cpu_add(const dsq_exec *e, float *y, const float *x, size_t n)
{
    (void)e;
    dsq_cpu_add(y, x, n);
}

static dsq_status cpu_matmul(const dsq_exec *e, const dsq_linear *W, const float *x, float *y, int n)
{
    enter(e);
    return dsq_cpu_matmul(W, x, y, n, e->mode);
}

static dsq_status cpu_head_matmul(const dsq_exec *e, const dsq_head_mm *p, const float *x, float *y, int n)
{
    enter(e);
    return dsq_cpu_head_matmul(p, x, y, n);
}

static dsq_status cpu_moe_route(const dsq_exec *e, const dsq_arch_moe *m, const float *logits, const float *bias,
                                int32_t *idx, float *wt, int n)
{
    enter(e);
    return dsq_cpu_moe_route(m, logits, bias, idx, wt, n);
}

const dsq_backend dsq_backend_cpu = {
    "cpu", cpu_alloc, cpu_free, cpu_copy, cpu_embed, cpu_rmsnorm, cpu_rope, cpu_attention, cpu_swiglu, cpu_add,
    cpu_matmul, cpu_head_matmul, dsq_cpu_copy_rows, dsq_cpu_gather_rows, dsq_cpu_scatter_add_rows, cpu_moe_route,
};
