/* SmoothQuant's scales, statistics and alpha search (calibration/smooth.h). */
#include "calibration/smooth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/linear.h"

double dsq_sq_default_alpha(const dsq_arch *a)
{
    /* mit-han-lab/smoothquant README table / examples/ppl_eval.sh */
    if (!strncmp(a->hf_architecture, "Mistral", 7) || !strcmp(a->model_type, "mistral")) return 0.8;
    if (a->family == DSQ_ARCH_LLAMA) return 0.85;
    return 0.5; /* not in the table (Qwen2): the paper's default */
}

dsq_status dsq_sq_check_model(const dsq_arch *a, const dsq_block_desc *d)
{
    (void)d;
    /* Gemma's RMSNorm multiplies by (1 + w): dividing w by s would be wrong.
     * Our block table has no offset norm; refuse such models by name. */
    if (!strncmp(a->hf_architecture, "Gemma", 5) || !strncmp(a->model_type, "gemma", 5))
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "smoothquant: %s uses offset (1 + w) RMSNorm weights; folding scales into them is not "
                        "supported",
                        a->hf_architecture);
    return DSQ_OK;
}

int64_t dsq_sq_amax_update(float *amax, const float *x, int64_t n, int64_t cols)
{
    for (int64_t t = 0; t < n; t++) {
        const float *r = x + t * cols;
        for (int64_t c = 0; c < cols; c++) {
            float v = fabsf(r[c]);
            if (!isfinite(v)) return t * cols + c;
            if (v > amax[c]) amax[c] = v;
        }
    }
    return -1;
}

void dsq_sq_weight_amax(const float *const *w, const int64_t *rows, int n, int64_t cols, float *wmax)
{
    for (int64_t c = 0; c < cols; c++) wmax[c] = 0.0f;
    for (int k = 0; k < n; k++)
        for (int64_t r = 0; r < rows[k]; r++)
            for (int64_t c = 0; c < cols; c++) {
                float v = fabsf(w[k][r * cols + c]);
                if (v > wmax[c]) wmax[c] = v;
            }
}

void dsq_sq_scales(const float *xmax, const float *wmax, int64_t cols, double alpha, float *s)
{
    for (int64_t c = 0; c < cols; c++) {
        double x = xmax[c] > DSQ_SQ_MIN ? xmax[c] : DSQ_SQ_MIN;
        double w = wmax[c] > DSQ_SQ_MIN ? wmax[c] : DSQ_SQ_MIN;
        double v = pow(x, alpha) / pow(w, 1.0 - alpha);
        s[c] = (float)(v > DSQ_SQ_MIN ? v : DSQ_SQ_MIN);
    }
}

dsq_status dsq_sq_fake_act(const dsq_w8_scheme *sch, float *x, int64_t n, int64_t cols)
{
    if (sch->act == DSQ_W8_ACT_NONE) return DSQ_OK;
    float stat = 0.0f; /* the static scale, from the max over these rows */
    if (sch->act == DSQ_W8_ACT_TENSOR) {
        for (int64_t i = 0; i < n * cols; i++)
            if (fabsf(x[i]) > stat) stat = fabsf(x[i]);
        stat = dsq_w8_static_scale(sch->kind, stat);
    }
    int64_t run = sch->act == DSQ_W8_ACT_GROUP ? sch->act_group : cols;
    uint8_t *codes = malloc((size_t)run);
    if (!codes) return dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    for (int64_t t = 0; t < n; t++)
        for (int64_t c0 = 0; c0 < cols; c0 += run) {
            float *v = x + t * cols + c0;
            int64_t len = c0 + run < cols ? run : cols - c0;
            float sc = dsq_w8_act_quantize(sch->kind, v, len, stat, codes);
            for (int64_t i = 0; i < len; i++) v[i] = dsq_w8_code_value(sch->kind, codes[i]) * sc;
        }
    free(codes);
    return DSQ_OK;
}

void dsq_sq_eval_free(dsq_sq_eval *e)
{
    for (int k = 0; k < DSQ_BLOCK_MAX_LINEARS; k++) free(e->yref[k]);
    free(e->xs);
    free(e->ws);
    free(e->y);
    memset(e, 0, sizeof *e);
}

static dsq_status product(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n, float *y)
{
    dsq_linear L;
    DSQ_TRY(dsq_linear_init(&L, DSQ_TYPE_F32, w, rows, cols));
    return dsq_linear_forward(&L, x, y, (int)n);
}

dsq_status dsq_sq_eval_init(dsq_sq_eval *e, const float *x, int64_t n, int64_t cols, const float *const *w,
                            const int64_t *rows, int nw, const dsq_w8_scheme *sch)
{
    memset(e, 0, sizeof *e);
    if (nw <= 0 || nw > DSQ_BLOCK_MAX_LINEARS || n <= 0 || n > (1 << 30))
        return dsq_fail(DSQ_ERR_ARG, "smoothquant: %d linears over %lld tokens cannot be evaluated", nw, (long long)n);
    e->x = x, e->n = n, e->cols = cols, e->nw = nw, e->sch = *sch;
    int64_t maxr = 0;
    for (int k = 0; k < nw; k++) {
        e->w[k] = w[k];
        e->rows[k] = rows[k];
        maxr = rows[k] > maxr ? rows[k] : maxr;
    }
    e->xs = malloc((size_t)(n * cols) * sizeof *e->xs);
    e->ws = malloc((size_t)(maxr * cols) * sizeof *e->ws);
    e->y = malloc((size_t)(n * maxr) * sizeof *e->y);
    dsq_status st = e->xs && e->ws && e->y ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    for (int k = 0; k < nw && st == DSQ_OK; k++) {
        if (!(e->yref[k] = malloc((size_t)(n * rows[k]) * sizeof(float))))
            st = dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
        else
            st = product(w[k], rows[k], cols, x, n, e->yref[k]);
    }
    if (st != DSQ_OK) dsq_sq_eval_free(e);
    return st;
}

/* ws = dequant(quant(W diag(s))) under the weight half of the scheme. */
static dsq_status fake_weight(const dsq_sq_eval *e, int k, const float *s)
{
    int64_t rows = e->rows[k], cols = e->cols;
    memcpy(e->ws, e->w[k], (size_t)(rows * cols) * sizeof *e->ws);
    if (s)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) e->ws[r * cols + c] *= s[c];
    dsq_w8q q;
    DSQ_TRY(dsq_w8q_quantize(e->ws, rows, cols, &e->sch, "smoothquant candidate", &q));
    dsq_status st = dsq_w8q_dequantize(&q, e->ws);
    dsq_w8q_free(&q);
    return st;
}

dsq_status dsq_sq_eval_error(dsq_sq_eval *e, const float *s, double *err)
{
    int64_t n = e->n, cols = e->cols;
    memcpy(e->xs, e->x, (size_t)(n * cols) * sizeof *e->xs);
    if (s)
        for (int64_t t = 0; t < n; t++)
            for (int64_t c = 0; c < cols; c++) e->xs[t * cols + c] /= s[c];
    DSQ_TRY(dsq_sq_fake_act(&e->sch, e->xs, n, cols));
    double acc = 0;
    int64_t count = 0;
    for (int k = 0; k < e->nw; k++) {
        DSQ_TRY(fake_weight(e, k, s));
        DSQ_TRY(product(e->ws, e->rows[k], cols, e->xs, n, e->y));
        for (int64_t i = 0; i < n * e->rows[k]; i++) {
            double d = (double)e->y[i] - (double)e->yref[k][i];
            acc += d * d;
        }
        count += n * e->rows[k];
    }
    *err = acc / (double)count;
    return DSQ_OK;
}

static double grid_alpha(int i, double start) { return i == 0 ? start : (double)(i - 1) / DSQ_SQ_GRID_STEPS; }

dsq_status dsq_sq_grid_errors(dsq_sq_eval *e, const float *xmax, const float *wmax, double start_alpha, double weight,
                              double *err)
{
    float *s = malloc((size_t)e->cols * sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    dsq_status st = DSQ_OK;
    for (int i = 0; i < DSQ_SQ_GRID_N && st == DSQ_OK; i++) {
        double a = grid_alpha(i, start_alpha), v = 0;
        if (i > 0 && fabs(a - start_alpha) < 1e-12) continue;
        dsq_sq_scales(xmax, wmax, e->cols, a, s);
        st = dsq_sq_eval_error(e, s, &v);
        err[i] += weight * v;
    }
    free(s);
    return st;
}

void dsq_sq_grid_pick(const double *err, double start_alpha, dsq_sq_search *out)
{
    out->alpha = start_alpha, out->err = out->start_err = err[0];
    for (int i = 1; i < DSQ_SQ_GRID_N; i++) {
        double a = grid_alpha(i, start_alpha);
        if (fabs(a - start_alpha) < 1e-12) continue;
        if (err[i] < out->err) out->alpha = a, out->err = err[i];
    }
}

dsq_status dsq_sq_search_alpha(dsq_sq_eval *e, const float *xmax, const float *wmax, double start_alpha,
                               dsq_sq_search *out)
{
    double err[DSQ_SQ_GRID_N] = {0};
    DSQ_TRY(dsq_sq_grid_errors(e, xmax, wmax, start_alpha, 1.0, err));
    dsq_sq_grid_pick(err, start_alpha, out);
    return DSQ_OK;
}
