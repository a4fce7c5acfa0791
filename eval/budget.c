/* Budgeted type mixes: sensitivities measured, then a knapsack (budget.h). */
#include "eval/budget.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "datasets/registry.h"
#include "eval/kld.h"
#include "eval/model_swap.h"
#include "quantizers/qtypes.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

/* The candidate nearest this many bits per weight measures a group's gain:
 * low enough that its KLD stands out of the noise, high enough to stay in
 * the small-error regime where KLDs add. */
#define REF_BPW 4.5

static const dsq_type k_default_candidates[] = {
    DSQ_TYPE_Q2_K, DSQ_TYPE_Q3_K, DSQ_TYPE_Q4_K, DSQ_TYPE_Q5_K, DSQ_TYPE_Q6_K,   DSQ_TYPE_IQ4_XS,
    DSQ_TYPE_Q4_0, DSQ_TYPE_Q4_1, DSQ_TYPE_Q5_0, DSQ_TYPE_Q5_1, DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q8_0,
};

struct dsq_budget {
    const char *in;
    dsq_gguf_quantize_options gopt;
    dsq_budget_opts bo;
    dsq_type cands[DSQ_BUDGET_MAX_CANDIDATES];
    int n_cands;
    dsq_gguf_quantize_report *plan;
    dsq_budget_tensor *t;
    size_t n, cap;
    dsq_budget_group *g;
    size_t n_groups;
    uint64_t fixed_bytes, fixed_padded; /* the tensors outside the budget */
    char base_path[4096], gguf_path[4096];
    bool base_written;
    double combine; /* measured KLD of all groups at once / the sum of theirs */
    dsq_tokens ids;
    int32_t bos;
    /* the base model loaded once: each group's tensors swapped in memory (eval/model_swap.h) */
    dsq_model *mem;
    const dsq_imatrix *im;
    dsq_imatrix *im_owned;
    size_t n_in_memory; /* group measurements made without a scratch file */
};

int dsq_budget_default_candidates(dsq_type *out, int cap)
{
    int n = (int)(sizeof k_default_candidates / sizeof *k_default_candidates);
    if (n > cap) n = cap;
    memcpy(out, k_default_candidates, (size_t)n * sizeof *out);
    return n;
}

static bool writable(dsq_type t)
{
    const dsq_qtype *q = dsq_qtype_get(t);
    return q && q->quantize_row;
}

dsq_status dsq_budget_parse_candidates(const char *list, dsq_type *out, int cap, int *n)
{
    *n = 0;
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        if (len == 0 || len >= sizeof name) return dsq_fail(DSQ_ERR_ARG, "--candidates: bad entry near '%s'", p);
        memcpy(name, p, len);
        name[len] = 0;
        dsq_type t;
        if (dsq_type_from_name(name, &t) != DSQ_OK || !writable(t) || !dsq_type_get((int)t)->quantized)
            return dsq_fail(DSQ_ERR_ARG, "--candidates: %s is not a quantized GGUF type we can produce", name);
        for (int i = 0; i < *n; i++)
            if (out[i] == t) return dsq_fail(DSQ_ERR_ARG, "--candidates: %s given twice", name);
        if (*n == cap) return dsq_fail(DSQ_ERR_ARG, "--candidates: more than %d types", cap);
        out[(*n)++] = t;
        p = e ? e + 1 : NULL;
    }
    if (*n == 0) return dsq_fail(DSQ_ERR_ARG, "--candidates: no types given");
    return DSQ_OK;
}

/* ---------------------------------------------------------------- errors */

typedef struct err_job {
    dsq_type type;
    const float *x, *imatrix;
    int64_t ne0, ne1, ne2, rows;
    size_t row_bytes;
} err_job;

/* e(t, T) over all rows, on every thread; the sum is reduced in a fixed
 * order (per-row partials) so it does not depend on the thread count. */
static dsq_status weighted_error(const err_job *j, int threads, double *rowerr, double *out)
{
    dsq_status bad = DSQ_OK;
#pragma omp parallel num_threads(threads)
    {
        uint8_t *q = malloc(j->row_bytes);
        float *y = malloc((size_t)j->ne0 * sizeof *y);
        dsq_status st = q && y ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
#pragma omp for schedule(dynamic, 16)
        for (int64_t r = 0; r < j->rows; r++) {
            if (st != DSQ_OK) continue;
            const float *x = j->x + r * j->ne0;
            const float *w = j->imatrix ? j->imatrix + ((r / j->ne1) % j->ne2) * j->ne0 : NULL;
            st = dsq_quantize(j->type, x, q, 1, j->ne0, w);
            if (st == DSQ_OK) st = dsq_dequantize(j->type, q, y, 1, j->ne0);
            double e = 0;
            for (int64_t c = 0; st == DSQ_OK && c < j->ne0; c++) {
                double d = (double)x[c] - (double)y[c];
                e += (w ? (double)w[c] : 1.0) * d * d;
            }
            rowerr[r] = e;
        }
#pragma omp critical(dsq_budget_error)
        if (st != DSQ_OK && bad == DSQ_OK) bad = st;
        free(q);
        free(y);
    }
    if (bad != DSQ_OK) return bad;
    double s = 0;
    for (int64_t r = 0; r < j->rows; r++) s += rowerr[r];
    *out = s;
    return DSQ_OK;
}

static int group_of(dsq_budget *b, const char *name)
{
    const char *kind = name;
    int layer, used = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &used) == 1 && used > 0) kind = name + used;
    for (size_t i = 0; i < b->n_groups; i++)
        if (!strcmp(b->g[i].name, kind)) return (int)i;
    dsq_budget_group *g = realloc(b->g, (b->n_groups + 1) * sizeof *g);
    if (!g) return -1;
    b->g = g;
    memset(&g[b->n_groups], 0, sizeof *g);
    snprintf(g[b->n_groups].name, sizeof g->name, "%s", kind);
    return (int)b->n_groups++;
}

static int nearest_ref(const dsq_budget_tensor *bt)
{
    int best = 0;
    double bd = INFINITY;
    for (int o = 0; o < bt->n_options; o++) {
        double bpw = (double)bt->options[o].bytes * 8.0 / (double)bt->n_elements;
        if (fabs(bpw - REF_BPW) < bd) bd = fabs(bpw - REF_BPW), best = o;
    }
    return best;
}

static dsq_status visit_tensor(void *user, const dsq_gguf_quantize_tensor *t, const float *x, const float *imatrix)
{
    dsq_budget *b = user;
    uint64_t n = 1;
    for (int d = 0; d < 4; d++) n *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
    dsq_budget_tensor bt = {.n_elements = n, .kept = t->type_in};
    double *rowerr = malloc((size_t)(n / (uint64_t)t->ne[0]) * sizeof *rowerr);
    if (!rowerr) return dsq_fail(DSQ_ERR_NOMEM, "budget: tensor %s: out of memory", t->name);
    for (int c = 0; c < b->n_cands; c++) {
        const dsq_type_info *ti = dsq_type_get((int)b->cands[c]);
        if (t->ne[0] % ti->block_elems) continue;
        err_job j = {.type = b->cands[c],
                     .x = x,
                     .imatrix = imatrix,
                     .ne0 = t->ne[0],
                     .ne1 = t->ne[1],
                     .ne2 = t->ne[2] > 0 ? t->ne[2] : 1,
                     .rows = (int64_t)(n / (uint64_t)t->ne[0]),
                     .row_bytes = (size_t)(t->ne[0] / ti->block_elems) * ti->block_bytes};
        dsq_budget_option *op = &bt.options[bt.n_options];
        op->type = b->cands[c];
        dsq_status st = dsq_type_nbytes(op->type, n, &op->bytes);
        if (st == DSQ_OK) st = weighted_error(&j, b->bo.threads, rowerr, &op->err);
        if (st != DSQ_OK) {
            free(rowerr);
            return dsq_fail_context(st, "budget: tensor %s as %s", t->name, dsq_type_name(op->type));
        }
        bt.n_options++;
    }
    free(rowerr);
    if (bt.n_options == 0) return DSQ_OK; /* no candidate fits its rows: it keeps the plan's type */
    bt.ref = nearest_ref(&bt);
    bt.group = group_of(b, t->name);
    bt.name = strdup(t->name);
    if (bt.group < 0 || !bt.name ||
        (b->n == b->cap && !(b->t = realloc(b->t, (b->cap = b->cap * 2 + 16) * sizeof *b->t)))) {
        free(bt.name);
        return dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
    }
    b->t[b->n++] = bt;
    DSQ_LOGD("budget: %s: %d candidates, reference %s error %.4g", t->name, bt.n_options,
             dsq_type_name(bt.options[bt.ref].type), bt.options[bt.ref].err);
    return DSQ_OK;
}

/* ---------------------------------------------------------------- the plan */

static const dsq_budget_tensor *find_budgeted(const dsq_budget *b, const char *name)
{
    for (size_t i = 0; i < b->n; i++)
        if (!strcmp(b->t[i].name, name)) return &b->t[i];
    return NULL;
}

static uint64_t padded(uint64_t n, uint32_t a) { return a ? (n + a - 1) / a * a : n; }

/* Bytes of the tensors that keep the plan's type whatever the budget. */
static void fixed_part(dsq_budget *b)
{
    for (size_t k = 0; k < b->plan->n_tensors; k++) {
        const dsq_gguf_quantize_tensor *t = &b->plan->tensors[k];
        if (find_budgeted(b, t->name)) continue;
        b->fixed_bytes += t->bytes_out;
        b->fixed_padded += padded(t->bytes_out, b->plan->alignment);
    }
}

static dsq_status limits(const dsq_budget *b, dsq_budget_kind kind, double target, dsq_alloc_problem *p);
static double cost_of(const dsq_budget *b, const dsq_budget_tensor *t, int o);

/* ---------------------------------------------------------------- KLD */

typedef struct loaded {
    dsq_model *m;
    dsq_tokenizer *tok;
    dsq_ctx *c;
} loaded;

static void unload(loaded *l)
{
    dsq_ctx_free(l->c);
    dsq_tokenizer_free(l->tok);
    dsq_model_close(l->m);
}

static dsq_status load(const dsq_budget *b, const char *path, bool tok, loaded *l)
{
    DSQ_TRY(dsq_model_open(path, &l->m));
    if (tok) DSQ_TRY(dsq_tokenizer_load(path, &l->tok));
    return dsq_ctx_new(l->m, b->bo.ctx, b->bo.threads, &l->c);
}

static dsq_kld_opts kld_opts(const dsq_budget *b)
{
    dsq_kld_opts o;
    dsq_kld_opts_default(&o);
    o.ctx = b->bo.ctx;
    o.chunks = b->bo.chunks;
    o.bos = b->bos;
    return o;
}

/* The base model's log-probs on the calibration chunks, saved once. */
static dsq_status save_base(dsq_budget *b)
{
    loaded l = {0};
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    dsq_status st = load(b, b->in, true, &l);
    if (st == DSQ_OK) st = dsq_dataset_resolve(b->bo.data, DSQ_TEXT_RAW, path, sizeof path, &text, &len);
    dsq_kld_opts o;
    dsq_kld_opts_default(&o);
    o.ctx = b->bo.ctx;
    o.chunks = b->bo.chunks;
    if (st == DSQ_OK) st = dsq_kld_tokenize(l.tok, text, len, &o, &b->ids);
    free(text);
    b->bos = o.bos;
    if (st == DSQ_OK && b->ids.n < (size_t)b->bo.ctx * (size_t)b->bo.chunks)
        st = dsq_fail(DSQ_ERR_ARG, "budget: %s has %zu tokens, fewer than %d chunks of %d", b->bo.data, b->ids.n,
                      b->bo.chunks, b->bo.ctx);
    o.save_path = b->base_path;
    o.overwrite = true;
    if (st == DSQ_OK) st = dsq_kld_compute(l.c, NULL, b->ids.ids, (int64_t)b->ids.n, &o, NULL);
    b->base_written = true;
    unload(&l);
    return st;
}

dsq_status dsq_budget_check(const dsq_budget *b, const char *gguf, double *kld)
{
    loaded l = {0};
    dsq_kld_opts o = kld_opts(b);
    dsq_kld_result r;
    dsq_status st = load(b, gguf, false, &l);
    if (st == DSQ_OK) st = dsq_kld_from_file(b->base_path, l.c, b->ids.ids, (int64_t)b->ids.n, &o, &r);
    unload(&l);
    if (st == DSQ_OK) *kld = r.kld;
    return st;
}

static bool in_group(const dsq_budget_tensor *t, size_t gi) { return gi == SIZE_MAX || (size_t)t->group == gi; }

/* The same as group_kld_file without a file: the loaded base model with the
 * group's tensors swapped for their reference-type copies, on a new context
 * (MLA's absorbed heads are derived per context). *done: false when a tensor
 * is not one the swap handles (the caller writes the file instead). */
static dsq_status group_kld_memory(dsq_budget *b, size_t gi, double *kld, bool *done)
{
    *done = false;
    if (!b->mem) {
        if (!b->gopt.imatrix && b->gopt.imatrix_file) DSQ_TRY(dsq_imatrix_load(b->gopt.imatrix_file, &b->im_owned));
        b->im = b->gopt.imatrix ? b->gopt.imatrix : b->im_owned;
        DSQ_TRY(dsq_model_open(b->in, &b->mem));
    }
    for (size_t i = 0; i < b->n; i++)
        if (in_group(&b->t[i], gi) && !dsq_swap_supported(b->mem, b->t[i].name)) return DSQ_OK;
    dsq_swap *sw = NULL;
    dsq_status st = DSQ_OK;
    for (size_t i = 0; i < b->n && st == DSQ_OK; i++)
        if (in_group(&b->t[i], gi)) st = dsq_swap_tensor(b->mem, &sw, b->t[i].name, b->t[i].options[b->t[i].ref].type, b->im);
    dsq_ctx *c = NULL;
    if (st == DSQ_OK) st = dsq_ctx_new(b->mem, b->bo.ctx, b->bo.threads, &c);
    dsq_kld_opts o = kld_opts(b);
    dsq_kld_result r;
    if (st == DSQ_OK) st = dsq_kld_from_file(b->base_path, c, b->ids.ids, (int64_t)b->ids.n, &o, &r);
    dsq_ctx_free(c);
    dsq_swap_restore(b->mem, sw);
    if (st == DSQ_OK) *kld = r.kld, *done = true, b->n_in_memory++;
    return st;
}

/* KLD with only group gi quantized (at each tensor's reference type), or
 * every group at once (gi == SIZE_MAX), in memory where the swap handles every
 * tensor of the group, else through a scratch GGUF. */
static dsq_status group_kld_file(dsq_budget *b, size_t gi, double *kld);

static dsq_status group_kld(dsq_budget *b, size_t gi, double *kld)
{
    bool done = false;
    /* DSQ_BUDGET_FILES=1: scratch files only, so that tests can compare the two ways on any model */
    const char *files = getenv("DSQ_BUDGET_FILES");
    if (!files || strcmp(files, "1")) DSQ_TRY(group_kld_memory(b, gi, kld, &done));
    return done ? DSQ_OK : group_kld_file(b, gi, kld);
}

static dsq_status group_kld_file(dsq_budget *b, size_t gi, double *kld)
{
    dsq_gguf_tensor_type *tt = malloc(b->plan->n_tensors * sizeof *tt);
    if (!tt) return dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++) {
        const dsq_budget_tensor *t = &b->t[i];
        bool in = in_group(t, gi);
        tt[n++] = (dsq_gguf_tensor_type){t->name, in ? t->options[t->ref].type : t->kept};
    }
    dsq_gguf_quantize_options o = b->gopt;
    o.tensor_types = tt;
    o.n_tensor_types = n;
    o.overwrite = true;
    o.provider = NULL;
    int level = dsq_log_get_level();
    dsq_log_set_level(DSQ_LOG_ERROR);
    dsq_status st = dsq_gguf_quantize(b->in, b->gguf_path, &o, NULL);
    dsq_log_set_level(level);
    free(tt);
    if (st == DSQ_OK) st = dsq_budget_check(b, b->gguf_path, kld);
    unlink(b->gguf_path);
    return st;
}

static dsq_status measure_gains(dsq_budget *b)
{
    for (size_t i = 0; i < b->n; i++) b->g[b->t[i].group].err_ref += b->t[i].options[b->t[i].ref].err;
    for (size_t i = 0; i < b->n; i++) b->g[b->t[i].group].n_tensors++;
    double sum = 0;
    for (size_t gi = 0; gi < b->n_groups; gi++) {
        dsq_budget_group *g = &b->g[gi];
        DSQ_TRY(group_kld(b, gi, &g->kld));
        /* A KLD within rounding of zero still orders the group's own types. */
        g->gain = g->err_ref > 0 ? fmax(g->kld, 1e-9) / g->err_ref : 0;
        sum += fmax(g->kld, 1e-9);
        DSQ_LOGI("budget: group %zu/%zu %-22s %3d tensors: KLD %.5f at ~%.1f bpw", gi + 1, b->n_groups, g->name,
                 g->n_tensors, g->kld, REF_BPW);
    }
    /* Errors of different groups compound: the KLD with every group at its
     * reference against the sum of the groups' own scales the prediction
     * (one factor, so it moves predicted KLDs and --max-kld, not the choice
     * at a given size). */
    b->combine = 1;
    if (b->n_groups > 1) {
        double all;
        DSQ_TRY(group_kld(b, SIZE_MAX, &all));
        b->combine = fmin(fmax(all / sum, 0.5), 10.0);
        DSQ_LOGI("budget: every group at ~%.1f bpw: KLD %.5f, %.2fx the sum of the groups'", REF_BPW, all, all / sum);
    }
    return DSQ_OK;
}

static dsq_status check_opts(dsq_budget *b)
{
    dsq_budget_opts *o = &b->bo;
    if (!o->data) o->data = "tinyshakespeare";
    if (o->ctx <= 0) o->ctx = 256;
    if (o->chunks <= 0) o->chunks = 8;
    if (o->threads <= 0) o->threads = omp_get_num_procs();
    if (o->ctx < 8) return dsq_fail(DSQ_ERR_ARG, "budget: chunks of %d tokens are too short", o->ctx);
    if (!o->scratch) return dsq_fail(DSQ_ERR_ARG, "budget: no scratch path");
    if (o->candidates) {
        if (o->n_candidates < 1 || o->n_candidates > DSQ_BUDGET_MAX_CANDIDATES)
            return dsq_fail(DSQ_ERR_ARG, "budget: %d candidate types (1..%d allowed)", o->n_candidates,
                            DSQ_BUDGET_MAX_CANDIDATES);
        memcpy(b->cands, o->candidates, (size_t)o->n_candidates * sizeof *b->cands);
        b->n_cands = o->n_candidates;
    } else {
        b->n_cands = dsq_budget_default_candidates(b->cands, DSQ_BUDGET_MAX_CANDIDATES);
    }
    for (int i = 0; i < b->n_cands; i++)
        if (!writable(b->cands[i]))
            return dsq_fail(DSQ_ERR_ARG, "budget: cannot produce %s", dsq_type_name(b->cands[i]));
    /* The pid keeps two runs for the same output from sharing scratch files. */
    snprintf(b->base_path, sizeof b->base_path, "%s.budget-%ld-base.logp", o->scratch, (long)getpid());
    snprintf(b->gguf_path, sizeof b->gguf_path, "%s.budget-%ld-group.gguf", o->scratch, (long)getpid());
    return DSQ_OK;
}

dsq_status dsq_budget_measure(const char *in, const dsq_gguf_quantize_options *gopt, const dsq_budget_opts *bo,
                              dsq_budget **out)
{
    *out = NULL;
    dsq_budget *b = calloc(1, sizeof *b);
    if (!b) return dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
    b->in = in;
    b->gopt = *gopt;
    b->bo = *bo;
    dsq_status st = check_opts(b);
    if (st == DSQ_OK) st = dsq_gguf_quantize_plan(in, gopt, &b->plan);
    if (st == DSQ_OK) DSQ_LOGI("budget: errors of %d candidate types per tensor", b->n_cands);
    if (st == DSQ_OK) st = dsq_gguf_quantize_visit(in, gopt, visit_tensor, b);
    if (st == DSQ_OK && b->n == 0) st = dsq_fail(DSQ_ERR_ARG, "budget: %s: no tensor takes any candidate type", in);
    if (st == DSQ_OK) fixed_part(b);
    if (st == DSQ_OK && bo->has_target && bo->kind != DSQ_BUDGET_KLD) {
        dsq_alloc_problem p = {0};
        st = limits(b, bo->kind, bo->target, &p);
    }
    if (st == DSQ_OK) st = save_base(b);
    if (st == DSQ_OK) st = measure_gains(b);
    if (st != DSQ_OK) {
        dsq_budget_free(b);
        return st;
    }
    *out = b;
    return DSQ_OK;
}

void dsq_budget_free(dsq_budget *b)
{
    if (!b) return;
    if (b->base_written) unlink(b->base_path);
    dsq_model_close(b->mem);
    dsq_imatrix_free(b->im_owned);
    for (size_t i = 0; i < b->n; i++) free(b->t[i].name);
    free(b->t);
    free(b->g);
    dsq_tokens_free(&b->ids);
    dsq_gguf_quantize_report_free(b->plan);
    free(b);
}

size_t dsq_budget_n_tensors(const dsq_budget *b) { return b->n; }
const dsq_budget_tensor *dsq_budget_tensor_at(const dsq_budget *b, size_t i) { return i < b->n ? &b->t[i] : NULL; }
size_t dsq_budget_n_groups(const dsq_budget *b) { return b->n_groups; }
double dsq_budget_combine(const dsq_budget *b) { return b->combine; }
double dsq_budget_cost(const dsq_budget *b, size_t i, int option)
{
    return i < b->n && option >= 0 && option < b->t[i].n_options ? cost_of(b, &b->t[i], option) : NAN;
}
const dsq_budget_group *dsq_budget_group_at(const dsq_budget *b, size_t i) { return i < b->n_groups ? &b->g[i] : NULL; }

/* ---------------------------------------------------------------- solving */

static double cost_of(const dsq_budget *b, const dsq_budget_tensor *t, int o)
{
    return b->combine * b->g[t->group].gain * t->options[o].err;
}

static dsq_status limits(const dsq_budget *b, dsq_budget_kind kind, double target, dsq_alloc_problem *p)
{
    uint64_t least = 0;
    for (size_t i = 0; i < b->n; i++) {
        uint64_t lo = UINT64_MAX;
        for (int o = 0; o < b->t[i].n_options; o++) {
            uint64_t by = kind == DSQ_BUDGET_BPW ? b->t[i].options[o].bytes
                                                 : padded(b->t[i].options[o].bytes, b->plan->alignment);
            lo = by < lo ? by : lo;
        }
        least += lo;
    }
    if (!isfinite(target) || target <= 0)
        return dsq_fail(DSQ_ERR_ARG, "budget: target %g is not a positive number", target);
    if (kind == DSQ_BUDGET_KLD) {
        p->goal = DSQ_ALLOC_MIN_BYTES;
        p->limit_cost = target;
        return DSQ_OK;
    }
    p->goal = DSQ_ALLOC_MIN_COST;
    if (kind == DSQ_BUDGET_SIZE) {
        uint64_t fixed = b->plan->header_bytes + b->fixed_padded;
        if (target > 1.8e19 || (uint64_t)target < fixed + least)
            return dsq_fail(DSQ_ERR_ARG,
                            "budget: a file of %.0f bytes is below the smallest possible, %llu bytes "
                            "(every tensor at its smallest candidate)",
                            target, (unsigned long long)(fixed + least));
        p->limit_bytes = (uint64_t)target - fixed;
        return DSQ_OK;
    }
    double n_el = (double)b->plan->n_elements;
    double bytes = floor(target * n_el / 8.0);
    double least_bpw = (double)(b->fixed_bytes + least) * 8.0 / n_el;
    if (bytes < (double)(b->fixed_bytes + least))
        return dsq_fail(DSQ_ERR_ARG, "budget: %g bits per weight is below the smallest possible, %.4f", target,
                        least_bpw);
    p->limit_bytes = (uint64_t)bytes - b->fixed_bytes;
    return DSQ_OK;
}

static dsq_status fill_solution(const dsq_budget *b, const int *choice, dsq_budget_solution *s)
{
    s->types = calloc(b->n, sizeof *s->types);
    if (!s->types) return dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
    s->n_types = b->n;
    s->tensor_bytes = b->fixed_bytes;
    s->file_bytes = b->plan->header_bytes + b->fixed_padded;
    s->predicted_kld = 0;
    for (size_t i = 0; i < b->n; i++) {
        const dsq_budget_option *op = &b->t[i].options[choice[i]];
        s->types[i] = (dsq_gguf_tensor_type){b->t[i].name, op->type};
        s->tensor_bytes += op->bytes;
        s->file_bytes += padded(op->bytes, b->plan->alignment);
        s->predicted_kld += cost_of(b, &b->t[i], choice[i]);
    }
    s->n_elements = b->plan->n_elements;
    s->bpw = (double)s->tensor_bytes * 8.0 / (double)s->n_elements;
    return DSQ_OK;
}

dsq_status dsq_budget_solve(const dsq_budget *b, dsq_budget_kind kind, double target, dsq_budget_solution *sol)
{
    memset(sol, 0, sizeof *sol);
    dsq_alloc_problem p = {.n_items = b->n};
    DSQ_TRY(limits(b, kind, target, &p));
    dsq_alloc_item *items = calloc(b->n, sizeof *items);
    dsq_alloc_option *opts = calloc(b->n * DSQ_BUDGET_MAX_CANDIDATES, sizeof *opts);
    sol->choice = calloc(b->n, sizeof *sol->choice);
    dsq_status st = items && opts && sol->choice ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "budget: out of memory");
    for (size_t i = 0; st == DSQ_OK && i < b->n; i++) {
        const dsq_budget_tensor *t = &b->t[i];
        dsq_alloc_option *o = &opts[i * DSQ_BUDGET_MAX_CANDIDATES];
        for (int k = 0; k < t->n_options; k++) {
            o[k].bytes = kind == DSQ_BUDGET_BPW ? t->options[k].bytes : padded(t->options[k].bytes, b->plan->alignment);
            o[k].cost = cost_of(b, t, k);
        }
        items[i] = (dsq_alloc_item){t->name, o, t->n_options};
    }
    p.items = items;
    if (st == DSQ_OK) st = dsq_alloc_solve(&p, sol->choice, &sol->alloc);
    if (st == DSQ_OK) st = fill_solution(b, sol->choice, sol);
    free(items);
    free(opts);
    if (st != DSQ_OK) {
        if (kind == DSQ_BUDGET_KLD && st == DSQ_ERR_ARG)
            st = dsq_fail_context(st, "budget: --max-kld %g cannot be met with these candidates", target);
        dsq_budget_solution_free(sol);
    }
    return st;
}

void dsq_budget_solution_free(dsq_budget_solution *sol)
{
    free(sol->types);
    free(sol->choice);
    memset(sol, 0, sizeof *sol);
}

dsq_status dsq_budget_predict(const dsq_budget *b, const dsq_gguf_quantize_report *plan, double *kld)
{
    *kld = 0;
    for (size_t k = 0; k < plan->n_tensors; k++) {
        const dsq_budget_tensor *t = find_budgeted(b, plan->tensors[k].name);
        if (!t) continue;
        int o = 0;
        while (o < t->n_options && t->options[o].type != plan->tensors[k].type_out) o++;
        if (o == t->n_options)
            return dsq_fail(DSQ_ERR_ARG, "budget: tensor %s: type %s is not among the measured candidates", t->name,
                            dsq_type_name(plan->tensors[k].type_out));
        *kld += cost_of(b, t, o);
    }
    return DSQ_OK;
}

dsq_status dsq_budget_group_kld(dsq_budget *b, size_t gi, bool file, double *kld)
{
    if (gi != SIZE_MAX && gi >= b->n_groups) return dsq_fail(DSQ_ERR_ARG, "budget: no group %zu", gi);
    if (file) return group_kld_file(b, gi, kld);
    bool done;
    DSQ_TRY(group_kld_memory(b, gi, kld, &done));
    return done ? DSQ_OK : dsq_fail(DSQ_ERR_UNSUPPORTED, "budget: group %zu has a tensor the swap cannot replace", gi);
}

size_t dsq_budget_n_in_memory(const dsq_budget *b) { return b->n_in_memory; }
