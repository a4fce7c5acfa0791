/* INTn group quantization of a linear weight: the number format behind the
 * AutoAWQ, GPTQ and compressed-tensors pack-quantized artifacts. RTN is this
 * core applied directly; AWQ and GPTQ choose what it is applied to.
 *
 * A weight W is [rows = out_features x cols = in_features] F32, row-major (the
 * Hugging Face nn.Linear layout). Each row is cut along the input dimension into
 * groups of `group_size` columns (or one group per row: group_size -1). Every
 * (row, group) has a scale s and an integer zero point z in [0, maxq], with
 * maxq = 2^bits - 1; each weight gets an unsigned code q in [0, maxq] and
 * dequantizes to (q - z) * s. Symmetric quantization fixes z = 2^(bits-1) for
 * every group, which is how all three formats store signed codes.
 *
 * Two rules decide s and z, each exactly as its reference writes it (float32
 * arithmetic in the same order; round = round-half-to-even like torch.round):
 *
 * AWQ rule (casper-hansen/AutoAWQ awq/quantize/quantizer.py, pseudo_quantize_tensor):
 *   asym: s = max(max_g - min_g, 1e-5) / maxq        (raw group min/max)
 *         z = clamp(-round(min_g / s), 0, maxq)
 *         q = clamp(round(w / s) + z, 0, maxq)
 *   sym:  s = max(max|w_g|, 1e-5) / (2^(bits-1) - 1)
 *         q = clamp(round(w / s), -2^(bits-1), 2^(bits-1) - 1) + 2^(bits-1)
 *   clip c (AWQ auto_clip): the group is first clamped to [-c*max|w_g|, c*max|w_g|].
 *
 * GPTQ rule (IST-DASLab/gptq quant.py, Quantizer.find_params + quantize):
 *   xmin = min(min_g, 0), xmax = max(max_g, 0)
 *   sym:  xmax = max(|xmin|, xmax); if xmin < 0 then xmin = -xmax
 *   if xmin == 0 and xmax == 0: xmin = -1, xmax = 1
 *   s = (xmax - xmin) / maxq
 *   z = sym ? (maxq + 1) / 2 : round(-xmin / s)
 *   q = clamp(round(w / s) + z, 0, maxq)
 *   clip c (GPTQ's MSE grid shrink p): xmin and xmax are multiplied by c before s, z.
 *   Quirk kept on purpose: a symmetric group with no negative value keeps
 *   xmin = 0, so s = xmax/maxq while z stays at the midpoint (its top half clips).
 *
 * NaN or Inf in the weight is an error naming the row and group. */
#ifndef DSQ_QUANTIZERS_INTQ_H
#define DSQ_QUANTIZERS_INTQ_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dsq_intq_rule {
    DSQ_INTQ_RULE_AWQ = 0,
    DSQ_INTQ_RULE_GPTQ = 1,
} dsq_intq_rule;

/* How a group's range is chosen before the rule turns it into s and z:
 * its min/max as the rule says, or the clip ratio of a searched grid that
 * minimizes the group's reconstruction error (quantizers/intq_search.h). */
typedef enum dsq_intq_grid {
    DSQ_INTQ_GRID_MINMAX = 0,
    DSQ_INTQ_GRID_MSE,         /* sum |w - q|^2.4 over ratios 1.00 .. 0.81 (GPTQ's and llm-compressor's mse) */
    DSQ_INTQ_GRID_IMATRIX_MSE, /* sum imp * |w - q|^3 over ratios 1.00 .. 0.10 (llm-compressor's imatrix_mse) */
    DSQ_INTQ_GRID_N
} dsq_intq_grid;

typedef struct dsq_intq_params {
    int bits;           /* 2, 3, 4 or 8 */
    int group_size;     /* 32, 64, 128, or -1 for one group per row */
    bool sym;           /* symmetric: z = 2^(bits-1) everywhere */
    dsq_intq_rule rule; /* how s and z are chosen (see above) */
    float clip;         /* range ratio in (0, 1]; 0 means 1 (no clipping) */
    dsq_intq_grid grid; /* min/max (0) or a searched clip ratio per group */
} dsq_intq_params;

/* Integer codes, scales and zeros of one [rows x cols] weight. Codes are in the
 * original column order; g_idx (NULL = column c is in group c / group_size)
 * maps a column to its group when GPTQ act-order made groups out of order. */
typedef struct dsq_intq {
    int64_t rows, cols;
    int bits;
    int group_size; /* effective: cols when the params said -1 */
    int64_t n_groups;
    bool sym;
    uint8_t *codes; /* [rows x cols], each <= maxq */
    float *scales;  /* [rows x n_groups] */
    uint8_t *zeros; /* [rows x n_groups], each <= maxq */
    int32_t *g_idx; /* [cols] or NULL */
} dsq_intq;

static inline int dsq_intq_maxq(int bits) { return (1 << bits) - 1; }

/* Checks bits and group size against a row length of `cols`. A group size that
 * does not divide cols is an error naming the width and the group sizes that do. */
dsq_status dsq_intq_check(const dsq_intq_params *p, int64_t cols);
/* The same question answered yes/no, recording no message (dsq_intq_check
 * says why not). */
bool dsq_intq_fits(const dsq_intq_params *p, int64_t cols);

/* Scale and zero of one group of n values under p (p->clip times `clip`; pass
 * 1 for none). `clip` lets a search (AWQ auto-clip, GPTQ MSE) try ratios. */
dsq_status dsq_intq_group_params(const float *w, int64_t n, const dsq_intq_params *p, float clip, float *scale,
                                 int *zero);

/* The code of one value: clamp(round(w / s) + z, 0, maxq). For the AWQ rule
 * with clipping, pass the value already clamped (dsq_intq_quantize does). */
static inline int dsq_intq_code(float w, float scale, int zero, int maxq)
{
    float r = rintf(w / scale) + (float)zero; /* rint: half to even, as torch.round */
    if (!(r >= 0.0f)) return 0;               /* also maps NaN to 0; inputs are checked first */
    if (r > (float)maxq) return maxq;
    return (int)r;
}

/* Allocates out's arrays for a [rows x cols] weight under p (codes, scales,
 * zeros zeroed; g_idx NULL). */
dsq_status dsq_intq_alloc(const dsq_intq_params *p, int64_t rows, int64_t cols, dsq_intq *out);
void dsq_intq_free(dsq_intq *q);

/* RTN: quantizes w [rows x cols] group by group. group_clip, when not NULL,
 * holds one extra clip ratio per (row, group) ([rows x n_groups], e.g. AWQ's
 * searched max-value shrink), applied on top of p->clip. A searched p->grid
 * picks each group's ratio on top of those (uniform weights). */
dsq_status dsq_intq_quantize(const float *w, int64_t rows, int64_t cols, const dsq_intq_params *p,
                             const float *group_clip, dsq_intq *out);
/* The same with the search's error weighted per input column by imp [cols]
 * (mean x^2 of the linear's input, or a Hessian diagonal; NULL: uniform;
 * negative or non-finite entries are an error). */
dsq_status dsq_intq_quantize_weighted(const float *w, int64_t rows, int64_t cols, const dsq_intq_params *p,
                                      const float *group_clip, const float *imp, dsq_intq *out);

/* w[r, c] = (codes[r, c] - zeros[r, g]) * scales[r, g], g = g_idx[c] or c / group_size. */
dsq_status dsq_intq_dequantize(const dsq_intq *q, float *w);

/* Group of column c. */
static inline int64_t dsq_intq_group_of(const dsq_intq *q, int64_t c)
{
    return q->g_idx ? (int64_t)q->g_idx[c] : c / q->group_size;
}

/* Consistency of a dsq_intq that came from elsewhere (an unpacker, a caller):
 * code/zero ranges, g_idx range, symmetric zeros at the midpoint, finite scales. */
dsq_status dsq_intq_validate(const dsq_intq *q);

#endif
