/* The small per-row ops of the CPU backend; rope.c and attention.c hold the
 * larger ones, runtime/linear.c the matrix products. */
#include <math.h>
#include <string.h>

#include "quantizers/qtypes.h"
#include "kernels/cpu.h"
#include "kernels/vec.h"
#include "runtime/cpu/ops.h"

void dsq_cpu_rmsnorm(const float *x, const float *w, float *y, int n_tok, int64_t dim, float eps)
{
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads()) if (n_tok > 16)
    for (int t = 0; t < n_tok; t++) {
        const float *xr = x + (int64_t)t * dim;
        float *yr = y + (int64_t)t * dim;
        double ss = 0; /* double: llama.cpp sums in ggml_float too */
        for (int64_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
        for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * scale * w[i];
    }
}

void dsq_cpu_swiglu(const float *gate, const float *up, float *out, size_t n)
{
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads()) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void dsq_cpu_swiglu_fast(const float *gate, const float *up, float *out, size_t n)
{
    const size_t chunk = 16384;
    int64_t nchunks = (int64_t)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads()) if (nchunks > 4)
    for (int64_t c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * chunk, m = n - i0 < chunk ? n - i0 : chunk;
        dsq_vec_swiglu((int64_t)m, gate + i0, up + i0, out + i0);
    }
}

void dsq_cpu_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

dsq_status dsq_cpu_embed(const dsq_tensor *E, const int32_t *tokens, int n_tok, float *out)
{
    if (E->n_dims != 2) return dsq_fail(DSQ_ERR_FORMAT, "embedding %s: 2 dims expected", E->name);
    int64_t vocab = E->shape[0], dim = E->shape[1];
    uint64_t rb = 0;
    DSQ_TRY(dsq_type_nbytes(E->type, (uint64_t)dim, &rb));
    for (int t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= vocab)
            return dsq_fail(DSQ_ERR_ARG, "token id %d at position %d is outside the vocabulary (%lld entries)",
                            (int)tokens[t], t, (long long)vocab);
        dsq_status s = dsq_dequantize(E->type, (const uint8_t *)E->data + (uint64_t)tokens[t] * rb, out + (int64_t)t * dim,
                                      1, dim);
        if (s != DSQ_OK) return dsq_fail_context(s, "embedding %s", E->name);
    }
    return DSQ_OK;
}

dsq_status dsq_cpu_matmul(const dsq_linear *W, const float *x, float *y, int n_tok, dsq_matmul_mode mode)
{
    if (mode == DSQ_MATMUL_LLAMACPP) return dsq_linear_forward_gemv(W, x, y, n_tok);
    if (mode == DSQ_MATMUL_BF16 && n_tok > DSQ_LINEAR_GEMV_MAX_TOKENS) return dsq_linear_forward_bf16(W, x, y, n_tok);
    if (mode == DSQ_MATMUL_INT8ACT) return dsq_linear_forward_int8act(W, x, y, n_tok);
    return dsq_linear_forward(W, x, y, n_tok);
}
