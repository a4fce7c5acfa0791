/* The CPU backend's ops, which runtime/cpu/backend_cpu.c puts behind the
 * backend table (runtime/backend.h); model code calls them only through that
 * table. Activations are F32, row-major, one row per token. Parallel ops use
 * dsq_cpu_threads() OpenMP threads (the calling context's count). */
#ifndef DSQ_RUNTIME_CPU_OPS_H
#define DSQ_RUNTIME_CPU_OPS_H

#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/hf_config.h"
#include "runtime/linear.h"
#include "runtime/matmul_mode.h"

/* ---- RoPE ----
 * NORM: rotates interleaved pairs (x[2i], x[2i+1]) (ggml's ROPE NORM; the
 *       Q/K rows of GGUF "llama" tensors are permuted for it by the converter).
 * NEOX: rotates (x[i], x[i + d/2]) (HF rotate_half; GGUF "qwen2").
 * Both use theta_i = pos * inv_freq[i], inv_freq[i] = base^(-2i/d), adjusted
 * by the scaling: linear (/factor), llama3 (per-frequency factors as in
 * rope_freqs.weight) or yarn (ramp between interpolation and extrapolation,
 * cos/sin times the attention factor), after transformers'
 * modeling_rope_utils and llama.cpp's ggml_rope_yarn. */
typedef enum dsq_rope_layout {
    DSQ_ROPE_NORM = 0,
    DSQ_ROPE_NEOX = 1,
} dsq_rope_layout;

typedef struct dsq_rope {
    dsq_rope_layout layout;
    int head_dim;
    float *inv_freq; /* head_dim / 2 */
    float mscale;    /* multiplies cos and sin (yarn), else 1 */
    int head_stride; /* floats from one head's start to the next (dsq_rope_init: head_dim) */
    /* cos and sin of the first table_pos positions' angles, head_dim / 2 of
     * each per position (dsq_rope_table; before mscale), or NULL */
    float *table;
    int table_pos;
} dsq_rope;

/* freq_factors: head_dim/2 divisors of the frequencies (GGUF rope_freqs.weight)
 * or NULL to derive them from the architecture (llama3 scaling). */
dsq_status dsq_rope_init(dsq_rope *r, const dsq_arch *a, dsq_rope_layout layout, const float *freq_factors);
void dsq_rope_free(dsq_rope *r);
/* Tabulates the angles' cos and sin for positions [0, n_pos), so rotations
 * there look them up instead of calling cos and sin (the same floats). */
dsq_status dsq_rope_table(dsq_rope *r, int n_pos);
/* yarn's attention factor 0.1 * mscale * ln(factor) + 1 (1 when factor <= 1). */
double dsq_yarn_mscale(double factor, double mscale);

/* Rotates n_heads heads of head_dim in each of n_tok rows of x (row_stride
 * floats apart, heads head_stride apart: MLA rotates only the rope part at
 * the end of each query head); token t is at position pos0 + t. */
void dsq_cpu_rope(const dsq_rope *r, float *x, int n_tok, int n_heads, int64_t row_stride, int pos0);

/* ---- element-wise and per-row ops ---- */

/* Per-head products: for h < n_heads and each of n rows,
 * y[t, h] = W_h x[t, h], x[t, h] the `in` floats at x + t * x_stride +
 * h * x_head, W_h [out x in] row-major at W + h * w_head, y[t, h] the `out`
 * floats at y + t * y_stride + h * y_head (MLA's absorbed q and values). */
typedef struct dsq_head_mm {
    int n_heads;
    int64_t out, in;
    const float *W;
    int64_t w_head;
    int64_t x_stride, x_head, y_stride, y_head;
} dsq_head_mm;
dsq_status dsq_cpu_head_matmul(const dsq_head_mm *p, const float *x, float *y, int n);

/* Row moves (runtime/backend.h copy_rows, gather_rows, scatter_add_rows). */
void dsq_cpu_copy_rows(float *dst, int64_t ds, const float *src, int64_t ss, int64_t w, int n);
void dsq_cpu_gather_rows(float *dst, const float *src, const int32_t *idx, int64_t w, int n);
void dsq_cpu_scatter_add_rows(float *dst, const float *src, const int32_t *idx, const float *wt, int64_t w, int n);

/* ---- MoE routing (DeepSeek-V2/V3) ----
 * For each of n tokens, from its F32 router logits: scores by m->scoring
 * (softmax over the experts, or sigmoid each); for group-limited methods the
 * topk_group best groups of n_routed / n_group experts (V2's
 * group_limited_greedy ranks a group by its best score, V3's noaux_tc by the
 * sum of its two best scores + bias), the other groups masked at -inf; then
 * the top_k experts by score (+ bias for noaux_tc: the bias, when given,
 * only selects). Weights are the selected experts' unbiased scores,
 * divided by their sum + 1e-20 when norm_topk_prob, times routed_scaling
 * (transformers' DeepseekV3TopkRouter / DeepseekV2TopkRouter, vLLM's
 * grouped_topk). idx, wt: n x top_k. */
dsq_status dsq_cpu_moe_route(const dsq_arch_moe *m, const float *logits, const float *bias, int32_t *idx, float *wt,
                             int n);

/* y = x / sqrt(mean(x^2) + eps) * w, per row of dim (y may be x). */
void dsq_cpu_rmsnorm(const float *x, const float *w, float *y, int n_tok, int64_t dim, float eps);
/* out = silu(gate) * up (out may alias either). */
void dsq_cpu_swiglu(const float *gate, const float *up, float *out, size_t n);
/* The same with the polynomial exp of kernels/vec.h (BF16 passes). */
void dsq_cpu_swiglu_fast(const float *gate, const float *up, float *out, size_t n);
/* y += x */
void dsq_cpu_add(float *y, const float *x, size_t n);
/* out[t] = row tokens[t] of E (any storage type, dequantized). */
dsq_status dsq_cpu_embed(const dsq_tensor *E, const int32_t *tokens, int n_tok, float *out);

/* y = x W^T + b (runtime/linear.h), as mode says. */
dsq_status dsq_cpu_matmul(const dsq_linear *W, const float *x, float *y, int n_tok, dsq_matmul_mode mode);

/* ---- attention ----
 * Causal softmax(q k^T / sqrt(head_dim)) v for n queries at positions
 * pos0 .. pos0+n-1 over cache positions [0, pos0 + n) (only the last `window`
 * positions when window > 0, Mistral's sliding window). Grouped-query: query
 * head h reads kv head h / (n_heads / n_kv_heads).
 * Query/key heads and value heads may differ in width (MLA): head_dim is
 * the query/key width, head_dim_v the value width (0: the same).
 * q: [n x n_heads*head_dim]; kc: [pos0+n x n_kv_heads*head_dim];
 * vc: [pos0+n x n_kv_heads*head_dim_v]; out: [n x n_heads*head_dim_v]. */
typedef struct dsq_attn_shape {
    int n_heads, n_kv_heads, head_dim;
    int window;     /* 0: none */
    bool bf16;      /* blocked path: Q K^T and P V in BF16 products with the polynomial exp (calibration passes) */
    int head_dim_v; /* 0: head_dim */
    float scale;    /* of q.k; 0: 1 / sqrt(head_dim) (MLA: 1 / sqrt(qk head) times yarn's mscale squared) */
    /* floats between cache rows of values; 0: n_kv_heads * head_dim_v. MLA's
     * absorbed form reads the values as the first kv_lora_rank floats of
     * the latent cache rows it also reads as keys. */
    int64_t v_stride;
} dsq_attn_shape;

dsq_status dsq_cpu_attention(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, float *out,
                             int n, int pos0);
/* The two implementations (the op picks by n): one query at a time with dot
 * products, and blocks of queries with the GEMM kernel. */
dsq_status dsq_cpu_attention_rows(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, float *out,
                                  int n, int pos0);
dsq_status dsq_cpu_attention_blocked(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc,
                                     float *out, int n, int pos0);
/* The blocked BF16 path without a window packs every kv head's keys and
 * values once (on, the default) or per query block (off): the same bits;
 * tests compare the two. Not thread-safe: set it before any attention runs. */
void dsq_cpu_attention_set_kv_packing(bool on);

#endif
