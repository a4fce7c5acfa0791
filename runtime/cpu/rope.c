/* RoPE tables and rotation. Frequencies follow transformers'
 * modeling_rope_utils (float32 steps as torch takes them) so HF checkpoints
 * match their reference; llama.cpp computes the same angles (ggml_rope_yarn
 * in ggml-cpu/ops.cpp) up to float rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "runtime/cpu/ops.h"

#define MAX_HEAD_DIM 1024

double dsq_yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0; }

/* transformers' _compute_yarn_parameters (truncate = true). */
static void yarn_freqs(const dsq_arch *a, const float *pos_freqs, float *inv, int half, float *mscale)
{
    double factor = a->rope_factor, base = a->rope_theta, dim = 2.0 * half;
    double orig = a->rope_original_max_pos > 0 ? (double)a->rope_original_max_pos : (double)a->max_position_embeddings;
    double fast = a->yarn_beta_fast > 0 ? a->yarn_beta_fast : 32, slow = a->yarn_beta_slow > 0 ? a->yarn_beta_slow : 1;
    double lo = floor(dim * log(orig / (fast * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(dim * log(orig / (slow * 2 * M_PI)) / (2 * log(base)));
    if (lo < 0) lo = 0;
    if (hi > dim - 1) hi = dim - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        float ramp = ((float)i - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extra = 1.0f - ramp;
        float interp = 1.0f / ((float)factor * pos_freqs[i]), extrap = 1.0f / pos_freqs[i];
        inv[i] = interp * (1.0f - extra) + extrap * extra;
    }
    double ms = a->mla.yarn_mscale, msa = a->mla.yarn_mscale_all_dim;
    if (a->yarn_attn_factor > 0)
        *mscale = (float)a->yarn_attn_factor;
    else if (ms > 0 && msa > 0) /* DeepSeek: the ratio of the two */
        *mscale = (float)(dsq_yarn_mscale(factor, ms) / dsq_yarn_mscale(factor, msa));
    else
        *mscale = (float)dsq_yarn_mscale(factor, 1.0);
}

static dsq_status scale_freqs(dsq_rope *r, const dsq_arch *a, const float *pos_freqs, const float *freq_factors)
{
    int half = r->head_dim / 2;
    for (int i = 0; i < half; i++) r->inv_freq[i] = 1.0f / pos_freqs[i];
    if (a->rope_scaling == DSQ_ROPE_SCALING_LINEAR && a->rope_factor > 0)
        for (int i = 0; i < half; i++) r->inv_freq[i] /= (float)a->rope_factor;
    if (a->rope_scaling == DSQ_ROPE_SCALING_YARN) yarn_freqs(a, pos_freqs, r->inv_freq, half, &r->mscale);
    float own[MAX_HEAD_DIM / 2];
    if (!freq_factors && a->rope_scaling == DSQ_ROPE_SCALING_LLAMA3) {
        DSQ_TRY(dsq_arch_llama3_rope_freqs(a, own, half));
        freq_factors = own;
    }
    if (freq_factors)
        for (int i = 0; i < half; i++) {
            if (!(freq_factors[i] > 0) || !isfinite(freq_factors[i]))
                return dsq_fail(DSQ_ERR_FORMAT, "rope frequency factor %d is %g", i, (double)freq_factors[i]);
            r->inv_freq[i] /= freq_factors[i];
        }
    return DSQ_OK;
}

dsq_status dsq_rope_init(dsq_rope *r, const dsq_arch *a, dsq_rope_layout layout, const float *freq_factors)
{
    memset(r, 0, sizeof *r);
    if (a->head_dim <= 0 || a->head_dim % 2 || a->head_dim > MAX_HEAD_DIM)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "rope: head_dim %lld (must be even, at most %d)", (long long)a->head_dim,
                        MAX_HEAD_DIM);
    if (!(a->rope_theta > 0) || !isfinite(a->rope_theta))
        return dsq_fail(DSQ_ERR_FORMAT, "rope: theta %g", a->rope_theta);
    r->layout = layout;
    r->head_dim = (int)a->head_dim;
    r->head_stride = r->head_dim;
    r->mscale = 1.0f;
    int half = r->head_dim / 2;
    r->inv_freq = malloc((size_t)half * sizeof(float));
    if (!r->inv_freq) return dsq_fail(DSQ_ERR_NOMEM, "rope: out of memory");
    float pos_freqs[MAX_HEAD_DIM / 2];
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)r->head_dim; /* torch.arange(0, dim, 2).float() / dim */
        pos_freqs[i] = (float)pow(a->rope_theta, (double)e);
    }
    dsq_status s = scale_freqs(r, a, pos_freqs, freq_factors);
    if (s != DSQ_OK) dsq_rope_free(r);
    return s;
}

void dsq_rope_free(dsq_rope *r)
{
    free(r->inv_freq);
    free(r->table);
    r->inv_freq = NULL;
    r->table = NULL;
    r->table_pos = 0;
}

/* The angles' cos and sin at position pos, before mscale. */
static void angles(const dsq_rope *r, int pos, float *c, float *s)
{
    for (int i = 0; i < r->head_dim / 2; i++) {
        float theta = (float)pos * r->inv_freq[i]; /* one float product, as torch's freqs */
        c[i] = (float)cos((double)theta);
        s[i] = (float)sin((double)theta);
    }
}

dsq_status dsq_rope_table(dsq_rope *r, int n_pos)
{
    const int half = r->head_dim / 2;
    float *t = n_pos > 0 ? malloc((size_t)n_pos * 2 * (size_t)half * sizeof *t) : NULL;
    if (n_pos > 0 && !t) return dsq_fail(DSQ_ERR_NOMEM, "rope: out of memory for the angles of %d positions", n_pos);
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads())
    for (int p = 0; p < n_pos; p++) angles(r, p, t + (size_t)p * 2 * half, t + (size_t)p * 2 * half + half);
    free(r->table);
    r->table = t;
    r->table_pos = n_pos;
    return DSQ_OK;
}

static void rotate_head(const dsq_rope *r, float *x, const float *c, const float *s)
{
    int half = r->head_dim / 2;
    if (r->layout == DSQ_ROPE_NORM) {
        for (int i = 0; i < half; i++) {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * c[i] - x1 * s[i];
            x[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
    } else {
        for (int i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c[i] - x1 * s[i];
            x[i + half] = x0 * s[i] + x1 * c[i];
        }
    }
}

void dsq_cpu_rope(const dsq_rope *r, float *x, int n_tok, int n_heads, int64_t row_stride, int pos0)
{
    int half = r->head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads()) if (n_tok > 16)
    for (int t = 0; t < n_tok; t++) {
        float c[MAX_HEAD_DIM / 2], s[MAX_HEAD_DIM / 2];
        const int pos = pos0 + t;
        if (pos < r->table_pos) {
            memcpy(c, r->table + (size_t)pos * 2 * half, (size_t)half * sizeof *c);
            memcpy(s, r->table + (size_t)pos * 2 * half + half, (size_t)half * sizeof *s);
        } else {
            angles(r, pos, c, s);
        }
        for (int i = 0; i < half; i++) c[i] *= r->mscale, s[i] *= r->mscale;
        for (int h = 0; h < n_heads; h++)
            rotate_head(r, x + (int64_t)t * row_stride + (int64_t)h * r->head_stride, c, s);
    }
}
