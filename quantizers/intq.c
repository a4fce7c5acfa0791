/* INTn group quantization (RTN core shared by AWQ, GPTQ and the packers).
 * The formulas and their sources are in intq.h. */
#include "quantizers/intq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/finite.h"
#include "quantizers/intq_internal.h"
#include "quantizers/intq_search.h"

static const int k_group_sizes[] = {32, 64, 128};

static bool bits_ok(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 8; }

bool dsq_intq_fits(const dsq_intq_params *p, int64_t cols)
{
    if (!p || !bits_ok(p->bits) || cols <= 0 || cols > INT32_MAX) return false;
    if (!(p->clip == 0.0f || (p->clip > 0.0f && p->clip <= 1.0f))) return false;
    if (!dsq_intq_grid_get(p->grid)) return false;
    if (p->group_size == -1 || p->group_size == cols) return true;
    for (size_t i = 0; i < sizeof k_group_sizes / sizeof k_group_sizes[0]; i++)
        if (p->group_size == k_group_sizes[i]) return cols % p->group_size == 0;
    return false;
}

dsq_status dsq_intq_check(const dsq_intq_params *p, int64_t cols)
{
    if (!p) return dsq_fail(DSQ_ERR_ARG, "intq: no parameters");
    if (!bits_ok(p->bits)) return dsq_fail(DSQ_ERR_ARG, "intq: %d bits is not supported (2, 3, 4 or 8)", p->bits);
    if (cols <= 0 || cols > INT32_MAX)
        return dsq_fail(DSQ_ERR_ARG, "intq: input width %lld is out of range", (long long)cols);
    if (!(p->clip == 0.0f || (p->clip > 0.0f && p->clip <= 1.0f)))
        return dsq_fail(DSQ_ERR_ARG, "intq: clip ratio %g is not in (0, 1]", (double)p->clip);
    if (!dsq_intq_grid_get(p->grid)) return dsq_fail(DSQ_ERR_ARG, "intq: unknown group grid %d", (int)p->grid);
    if (p->group_size == -1 || p->group_size == cols) return DSQ_OK; /* one group per row, however spelled */
    bool known = false;
    for (size_t i = 0; i < sizeof k_group_sizes / sizeof k_group_sizes[0]; i++)
        if (p->group_size == k_group_sizes[i]) known = true;
    if (known && cols % p->group_size == 0) return DSQ_OK;
    char valid[64] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof k_group_sizes / sizeof k_group_sizes[0]; i++)
        if (cols % k_group_sizes[i] == 0)
            len += (size_t)snprintf(valid + len, sizeof valid - len, "%d, ", k_group_sizes[i]);
    snprintf(valid + len, sizeof valid - len, "-1 (one group per row)");
    if (!known)
        return dsq_fail(DSQ_ERR_ARG, "intq: group size %d is not supported; valid for input width %lld: %s",
                        p->group_size, (long long)cols, valid);
    return dsq_fail(DSQ_ERR_ARG, "intq: group size %d does not divide the input width %lld; valid group sizes: %s",
                    p->group_size, (long long)cols, valid);
}

static float effective_clip(const dsq_intq_params *p, float clip)
{
    float c = p->clip > 0.0f ? p->clip : 1.0f;
    return c * clip;
}

void dsq_intq_min_max(const float *w, int64_t n, float *mn_out, float *mx_out)
{
    float mn = w[0], mx = w[0];
    /* comparisons, not fminf/fmaxf (library calls at -O2): values are finite here */
    for (int64_t i = 1; i < n; i++) {
        mn = w[i] < mn ? w[i] : mn;
        mx = w[i] > mx ? w[i] : mx;
    }
    *mn_out = mn;
    *mx_out = mx;
}

void dsq_intq_rule_params(const float *w, int64_t n, const dsq_intq_params *p, float clip, float *scale, int *zero,
                          float *t_out)
{
    float mn, mx;
    dsq_intq_min_max(w, n, &mn, &mx);
    dsq_intq_range_params(mn, mx, p, clip, scale, zero, t_out);
}

void dsq_intq_range_params(float mn, float mx, const dsq_intq_params *p, float clip, float *scale, int *zero,
                           float *t_out)
{
    const int maxq = dsq_intq_maxq(p->bits);
    const int mid = 1 << (p->bits - 1);
    *t_out = INFINITY;
    if (p->rule == DSQ_INTQ_RULE_AWQ) {
        if (clip < 1.0f) {
            /* auto_clip: clamp(w, -t, t) with t = amax * ratio, then the plain rule. */
            float t = fmaxf(fabsf(mn), fabsf(mx)) * clip;
            mn = fminf(fmaxf(mn, -t), t);
            mx = fminf(fmaxf(mx, -t), t);
            *t_out = t;
        }
        if (p->sym) {
            float amax = fmaxf(fabsf(mn), fabsf(mx));
            *scale = fmaxf(amax, 1e-5f) / (float)(mid - 1);
            *zero = mid;
        } else {
            float s = fmaxf(mx - mn, 1e-5f) / (float)maxq;
            float z = -rintf(mn / s);
            *scale = s;
            *zero = z < 0.0f ? 0 : z > (float)maxq ? maxq : (int)z;
        }
        return;
    }
    /* GPTQ find_params: the range always contains 0. */
    float xmin = fminf(mn, 0.0f), xmax = fmaxf(mx, 0.0f);
    if (p->sym) {
        xmax = fmaxf(fabsf(xmin), xmax);
        if (xmin < 0.0f) xmin = -xmax;
    }
    if (xmin == 0.0f && xmax == 0.0f) {
        xmin = -1.0f;
        xmax = 1.0f;
    }
    if (clip < 1.0f) {
        xmin = clip * xmin;
        xmax = clip * xmax;
    }
    float s = (xmax - xmin) / (float)maxq;
    *scale = s;
    if (p->sym) {
        *zero = (maxq + 1) / 2;
    } else {
        /* xmin <= 0 <= xmax, so -xmin/s lies in [0, maxq]; clamp guards rounding only. */
        float z = rintf(-xmin / s);
        *zero = z < 0.0f ? 0 : z > (float)maxq ? maxq : (int)z;
    }
}

dsq_status dsq_intq_group_params(const float *w, int64_t n, const dsq_intq_params *p, float clip, float *scale,
                                 int *zero)
{
    if (!w || n <= 0 || !p || !scale || !zero) return dsq_fail(DSQ_ERR_ARG, "intq: bad group arguments");
    if (!bits_ok(p->bits)) return dsq_fail(DSQ_ERR_ARG, "intq: %d bits is not supported (2, 3, 4 or 8)", p->bits);
    float c = effective_clip(p, clip);
    if (!(c > 0.0f && c <= 1.0f)) return dsq_fail(DSQ_ERR_ARG, "intq: clip ratio %g is not in (0, 1]", (double)c);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i])) return dsq_fail(DSQ_ERR_NUMERIC, "intq: group value %lld is not finite", (long long)i);
    float t;
    dsq_intq_rule_params(w, n, p, c, scale, zero, &t);
    return DSQ_OK;
}

dsq_status dsq_intq_alloc(const dsq_intq_params *p, int64_t rows, int64_t cols, dsq_intq *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_intq_check(p, cols));
    if (rows <= 0) return dsq_fail(DSQ_ERR_ARG, "intq: %lld rows", (long long)rows);
    int gs = p->group_size == -1 ? (int)cols : p->group_size;
    int64_t ng = cols / gs;
    int64_t dims[2] = {rows, cols}, gdims[2] = {rows, ng};
    uint64_t n, ngt;
    if (!dsq_mul_dims(dims, 2, &n) || !dsq_mul_dims(gdims, 2, &ngt) || n > SIZE_MAX / sizeof(float))
        return dsq_fail(DSQ_ERR_ARG, "intq: weight [%lld x %lld] is too large", (long long)rows, (long long)cols);
    out->rows = rows;
    out->cols = cols;
    out->bits = p->bits;
    out->group_size = gs;
    out->n_groups = ng;
    out->sym = p->sym;
    out->codes = calloc((size_t)n, 1);
    out->scales = calloc((size_t)ngt, sizeof(float));
    out->zeros = calloc((size_t)ngt, 1);
    if (!out->codes || !out->scales || !out->zeros) {
        dsq_intq_free(out);
        return dsq_fail(DSQ_ERR_NOMEM, "intq: out of memory for a [%lld x %lld] weight", (long long)rows,
                        (long long)cols);
    }
    return DSQ_OK;
}

void dsq_intq_free(dsq_intq *q)
{
    if (!q) return;
    free(q->codes);
    free(q->scales);
    free(q->zeros);
    free(q->g_idx);
    memset(q, 0, sizeof *q);
}

/* First non-finite value of w, reported by row and group. */
static dsq_status check_finite(const float *w, int64_t rows, int64_t cols, int gs)
{
    int64_t bad = -1;
    int64_t total = rows * cols;
#pragma omp parallel for reduction(max : bad) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = dsq_find_nonfinite(w + r * cols, cols);
        if (c >= 0) {
            int64_t at = total - (r * cols + c); /* max of this = first bad index */
            if (at > bad) bad = at;
        }
    }
    if (bad < 0) return DSQ_OK;
    int64_t i = total - bad, r = i / cols, c = i % cols;
    return dsq_fail(DSQ_ERR_NUMERIC, "intq: weight row %lld, group %lld (column %lld) is not finite", (long long)r,
                    (long long)(c / gs), (long long)c);
}

dsq_status dsq_intq_quantize(const float *w, int64_t rows, int64_t cols, const dsq_intq_params *p,
                             const float *group_clip, dsq_intq *out)
{
    return dsq_intq_quantize_weighted(w, rows, cols, p, group_clip, NULL, out);
}

/* The first importance entry that is negative or not finite, or -1. */
static int64_t bad_importance(const float *imp, int64_t cols)
{
    for (int64_t c = 0; imp && c < cols; c++)
        if (!(imp[c] >= 0.0f) || !isfinite(imp[c])) return c;
    return -1;
}

dsq_status dsq_intq_quantize_weighted(const float *w, int64_t rows, int64_t cols, const dsq_intq_params *p,
                                      const float *group_clip, const float *imp, dsq_intq *out)
{
    if (!w || !out) return dsq_fail(DSQ_ERR_ARG, "intq: no weight or output");
    DSQ_TRY(dsq_intq_alloc(p, rows, cols, out));
    const int gs = out->group_size;
    const int64_t ng = out->n_groups;
    const int maxq = dsq_intq_maxq(p->bits);
    dsq_status st = check_finite(w, rows, cols, gs);
    if (st == DSQ_OK && group_clip) {
        for (int64_t i = 0; i < rows * ng; i++)
            if (!(group_clip[i] > 0.0f && group_clip[i] <= 1.0f)) {
                st = dsq_fail(DSQ_ERR_ARG, "intq: clip ratio %g of row %lld, group %lld is not in (0, 1]",
                              (double)group_clip[i], (long long)(i / ng), (long long)(i % ng));
                break;
            }
    }
    int64_t bad = st == DSQ_OK ? bad_importance(imp, cols) : -1;
    if (bad >= 0)
        st = dsq_fail(DSQ_ERR_NUMERIC, "intq: importance of input column %lld is %g (finite, >= 0 wanted)",
                      (long long)bad, (double)imp[bad]);
    if (st != DSQ_OK) {
        dsq_intq_free(out);
        return st;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++) {
            const float *src = w + r * cols + g * gs;
            float clip = effective_clip(p, group_clip ? group_clip[r * ng + g] : 1.0f);
            clip *= dsq_intq_search_ratio(src, gs, imp ? imp + g * gs : NULL, p, clip, NULL);
            float s, t;
            int z;
            dsq_intq_rule_params(src, gs, p, clip, &s, &z, &t);
            out->scales[r * ng + g] = s;
            out->zeros[r * ng + g] = (uint8_t)z;
            uint8_t *dst = out->codes + r * cols + g * gs;
            for (int i = 0; i < gs; i++) {
                float v = src[i];
                if (t < INFINITY) v = fminf(fmaxf(v, -t), t);
                dst[i] = (uint8_t)dsq_intq_code(v, s, z, maxq);
            }
        }
    }
    return DSQ_OK;
}

dsq_status dsq_intq_dequantize(const dsq_intq *q, float *w)
{
    if (!q || !w || !q->codes) return dsq_fail(DSQ_ERR_ARG, "intq: nothing to dequantize");
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < q->rows; r++) {
        for (int64_t c = 0; c < q->cols; c++) {
            int64_t g = r * q->n_groups + dsq_intq_group_of(q, c);
            w[r * q->cols + c] = (float)((int)q->codes[r * q->cols + c] - (int)q->zeros[g]) * q->scales[g];
        }
    }
    return DSQ_OK;
}

dsq_status dsq_intq_validate(const dsq_intq *q)
{
    if (!q || !q->codes || !q->scales || !q->zeros) return dsq_fail(DSQ_ERR_ARG, "intq: incomplete codes");
    if (!bits_ok(q->bits)) return dsq_fail(DSQ_ERR_FORMAT, "intq: %d bits", q->bits);
    if (q->rows <= 0 || q->cols <= 0 || q->cols > INT32_MAX || q->group_size <= 0 || q->n_groups <= 0)
        return dsq_fail(DSQ_ERR_FORMAT, "intq: bad shape [%lld x %lld], group size %d, %lld groups", (long long)q->rows,
                        (long long)q->cols, q->group_size, (long long)q->n_groups);
    if (!q->g_idx && (q->cols % q->group_size != 0 || q->n_groups != q->cols / q->group_size))
        return dsq_fail(DSQ_ERR_FORMAT, "intq: %lld groups do not tile width %lld by %d", (long long)q->n_groups,
                        (long long)q->cols, q->group_size);
    const int maxq = dsq_intq_maxq(q->bits), mid = 1 << (q->bits - 1);
    if (q->g_idx)
        for (int64_t c = 0; c < q->cols; c++)
            if (q->g_idx[c] < 0 || q->g_idx[c] >= q->n_groups)
                return dsq_fail(DSQ_ERR_FORMAT, "intq: g_idx[%lld] = %d is outside [0, %lld)", (long long)c,
                                q->g_idx[c], (long long)q->n_groups);
    for (int64_t i = 0; i < q->rows * q->n_groups; i++) {
        if (q->zeros[i] > maxq || (q->sym && q->zeros[i] != mid))
            return dsq_fail(DSQ_ERR_FORMAT, "intq: zero point %d of row %lld, group %lld is invalid for %s %d-bit",
                            q->zeros[i], (long long)(i / q->n_groups), (long long)(i % q->n_groups),
                            q->sym ? "symmetric" : "asymmetric", q->bits);
        if (!isfinite(q->scales[i]))
            return dsq_fail(DSQ_ERR_NUMERIC, "intq: scale of row %lld, group %lld is not finite",
                            (long long)(i / q->n_groups), (long long)(i % q->n_groups));
    }
    for (int64_t i = 0; i < q->rows * q->cols; i++)
        if (q->codes[i] > maxq)
            return dsq_fail(DSQ_ERR_FORMAT, "intq: code %d at row %lld, column %lld exceeds %d", q->codes[i],
                            (long long)(i / q->cols), (long long)(i % q->cols), maxq);
    return DSQ_OK;
}
