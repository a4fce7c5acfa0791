/* GPTQ or AWQ into a llama.cpp GGUF; the steps are in gguf_calib.h. */
#include "calibration/gguf_calib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/log.h"
#include "core/strmap.h"
#include "formats/block.h"
#include "formats/block_deepseek.h"
#include "formats/hf_names.h"
#include "formats/imatrix.h"
#include "quantizers/block_codes.h"
#include "quantizers/qtypes.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

/* One tensor in the spill file. */
typedef struct spilled {
    uint64_t off, nbytes;
    dsq_type type;
} spilled;

typedef struct gcalib {
    const dsq_gguf_quantize_report *plan;
    dsq_strmap by_name; /* plan tensor name -> index */
    const dsq_imatrix *im;
    dsq_model *m;
    bool rows_gguf; /* the model's Q/K rows are in GGUF order already (a GGUF input) */
    int fd;
    char spill_path[4096];
    uint64_t spill_end;
    spilled *sp; /* by plan index */
    bool *has;
    uint8_t **parts; /* stacked expert tensors, by plan index: which experts were put (NULL until the first) */
    size_t n_parts;
    uint8_t *buf; /* provider / permutation buffer */
    size_t buf_cap;
} gcalib;

static void linear_name(const gcalib *g, int layer, int id, char *buf, size_t cap)
{
    snprintf(buf, cap, "blk.%d.%s.weight", layer, g->m->block->linears[id].gguf);
}

static int64_t plan_index(const gcalib *g, const char *name) { return dsq_strmap_get(&g->by_name, name, strlen(name)); }

/* Experts stacked in plan tensor i for linear id (its third dimension, for a
 * routed-expert linear; 1 otherwise), checked against the call: an expert
 * index goes with an expert linear whose plan tensor stacks that many. */
static dsq_status stacked(const gcalib *g, int64_t i, int id, const char *name, int expert, int64_t *n_expert)
{
    const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
    bool is_expert = g->m->block->linears[id].expert;
    *n_expert = is_expert && t->n_dims >= 3 ? t->ne[2] : 1;
    if (is_expert != (expert >= 0) || (is_expert && (t->n_dims < 3 || expert >= *n_expert)))
        return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s: %s expert %d, the plan stacks %lld", name,
                        expert >= 0 ? "calibrated as" : "calibrated without an", expert, (long long)*n_expert);
    return DSQ_OK;
}

static dsq_status target(void *user, int layer, int id, int expert, dsq_type *type, const float **importance)
{
    gcalib *g = user;
    char name[160];
    linear_name(g, layer, id, name, sizeof name);
    *type = DSQ_TYPE_F32;
    *importance = NULL;
    int64_t i = plan_index(g, name), n_expert = 1;
    if (i < 0) return DSQ_OK;
    DSQ_TRY(stacked(g, i, id, name, expert, &n_expert));
    *type = g->plan->tensors[i].type_out; /* a float type when the plan keeps it so */
    if (!g->plan->tensors[i].quantized || !g->im) return DSQ_OK;
    const int64_t ne0 = g->plan->tensors[i].ne[0];
    DSQ_TRY(dsq_imatrix_for_tensor(g->im, name, ne0, n_expert, importance));
    if (*importance && expert > 0) *importance += (int64_t)expert * ne0; /* expert e's columns */
    return DSQ_OK;
}

static dsq_status grow_buf(gcalib *g, uint64_t n)
{
    if (n <= g->buf_cap) return DSQ_OK;
    uint8_t *p = realloc(g->buf, (size_t)n);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "gguf: out of memory for a %llu-byte tensor", (unsigned long long)n);
    g->buf = p;
    g->buf_cap = (size_t)n;
    return DSQ_OK;
}

/* n bytes at off of the spill file, written from p or read into it. */
static dsq_status spill_io(gcalib *g, bool write, void *p, uint64_t n, uint64_t off)
{
    uint8_t *b = p;
    while (n) {
        size_t len = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = write ? pwrite(g->fd, b, len, (off_t)off) : pread(g->fd, b, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return dsq_fail(DSQ_ERR_IO, "%s: %s the calibrated tensors: %s", g->spill_path,
                            write ? "writing" : "reading back", k < 0 ? strerror(errno) : "no progress");
        b += k, off += (uint64_t)k, n -= (uint64_t)k;
    }
    return DSQ_OK;
}

/* Plan tensor `name` in its planned type and size, or a format error. */
static dsq_status planned(gcalib *g, const char *name, dsq_type type, uint64_t nbytes, int64_t *index)
{
    int64_t i = plan_index(g, name);
    if (i < 0) return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s is not in the plan", name);
    const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
    if (type != t->type_out || nbytes != t->bytes_out)
        return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s: calibrated as %s (%llu bytes), planned %s (%llu bytes)", name,
                        dsq_type_name(type), (unsigned long long)nbytes, dsq_type_name(t->type_out),
                        (unsigned long long)t->bytes_out);
    *index = i;
    return DSQ_OK;
}

static dsq_status spill(gcalib *g, int64_t i, dsq_type type, const void *bytes, uint64_t nbytes)
{
    DSQ_TRY(spill_io(g, true, (void *)bytes, nbytes, g->spill_end));
    g->sp[i] = (spilled){g->spill_end, nbytes, type};
    g->has[i] = true;
    g->spill_end += nbytes;
    return DSQ_OK;
}

/* Expert e's part of stacked plan tensor i: the whole tensor's room is taken
 * in the spill file at its first part, each part written at its offset; the
 * tensor counts as calibrated once every expert is there. */
static dsq_status put_part(gcalib *g, const char *name, int64_t i, int e, int64_t n_expert, dsq_type type,
                           const void *bytes, uint64_t nbytes)
{
    const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
    if (type != t->type_out || nbytes * (uint64_t)n_expert != t->bytes_out)
        return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s: expert %d calibrated as %s (%llu bytes), planned %s (%llu of %llu)",
                        name, e, dsq_type_name(type), (unsigned long long)nbytes, dsq_type_name(t->type_out),
                        (unsigned long long)(t->bytes_out / (uint64_t)n_expert), (unsigned long long)t->bytes_out);
    if (!g->parts[i]) {
        if (!(g->parts[i] = calloc((size_t)n_expert, 1))) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        g->sp[i] = (spilled){g->spill_end, t->bytes_out, type};
        g->spill_end += t->bytes_out;
    }
    if (g->parts[i][e]) return dsq_fail(DSQ_ERR_INTERNAL, "gguf: %s: expert %d calibrated twice", name, e);
    DSQ_TRY(spill_io(g, true, (void *)bytes, nbytes, g->sp[i].off + (uint64_t)e * nbytes));
    g->parts[i][e] = 1;
    int64_t have = 0;
    for (int64_t k = 0; k < n_expert; k++) have += g->parts[i][k];
    g->has[i] = have == n_expert;
    return DSQ_OK;
}

/* AWQ on MLA: kv_b, whose columns and value rows took folded scales, reaches
 * the file as llama.cpp's attn_k_b / attn_v_b (the converter's split,
 * dsq_ds_kv_b_part), each in its planned type without importance (no imatrix
 * entry names them). kv is F32: the plan has no attn_kv_b to give it a type. */
static dsq_status put_kv_b_split(gcalib *g, int layer, const float *kv, uint64_t nbytes)
{
    const dsq_arch *a = &g->m->arch;
    int64_t H = a->n_heads, N = a->mla.qk_nope_head_dim, D = a->mla.v_head_dim, L = a->mla.kv_lora_rank;
    if (nbytes != (uint64_t)(H * (N + D) * L) * sizeof(float))
        return dsq_fail(DSQ_ERR_INTERNAL, "gguf: layer %d: kv_b of %llu bytes", layer, (unsigned long long)nbytes);
    for (int keys = 1; keys >= 0; keys--) {
        char name[160];
        snprintf(name, sizeof name, "blk.%d.%s.weight", layer, keys ? "attn_k_b" : "attn_v_b");
        int64_t i = plan_index(g, name), rows = keys ? H * L : H * D, cols = keys ? N : L;
        if (i < 0) return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s is not in the plan", name);
        const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
        float *f = malloc((size_t)(rows * cols) * sizeof *f);
        if (!f) return dsq_fail(DSQ_ERR_NOMEM, "gguf: out of memory for %s", name);
        dsq_ds_kv_b_part(keys, H, N, D, L, kv, f);
        dsq_status st = grow_buf(g, t->bytes_out);
        if (st == DSQ_OK) st = dsq_quantize(t->type_out, f, g->buf, rows, cols, NULL);
        free(f);
        if (st == DSQ_OK) st = spill(g, i, t->type_out, g->buf, t->bytes_out);
        if (st != DSQ_OK) return dsq_fail_context(st, "%s", name);
    }
    return DSQ_OK;
}

static dsq_status put(void *user, int layer, int id, int expert, dsq_type type, const void *bytes, uint64_t nbytes)
{
    gcalib *g = user;
    char name[160];
    linear_name(g, layer, id, name, sizeof name);
    int64_t i = plan_index(g, name), n_expert = 1;
    if (i < 0 && g->m->block == &dsq_block_deepseek2 && id == DSQ_DS_KV_B && type == DSQ_TYPE_F32)
        return put_kv_b_split(g, layer, bytes, nbytes);
    if (i < 0) return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s is not in the plan", name);
    DSQ_TRY(stacked(g, i, id, name, expert, &n_expert));
    if (expert >= 0) return put_part(g, name, i, expert, n_expert, type, bytes, nbytes); /* experts: no permutation */
    DSQ_TRY(planned(g, name, type, nbytes, &i));
    const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
    const dsq_permute_kind perm = g->m->block->linears[id].perm;
    if (perm != DSQ_PERMUTE_NONE && !g->rows_gguf) {
        /* HF row order -> llama.cpp's: whole rows of blocks move */
        DSQ_TRY(grow_buf(g, nbytes));
        memcpy(g->buf, bytes, (size_t)nbytes);
        int64_t rows = t->ne[1];
        DSQ_TRY(dsq_permute_rows(&g->m->arch, perm, true, g->buf, rows, (size_t)(nbytes / (uint64_t)rows), NULL));
        bytes = g->buf;
    }
    return spill(g, i, type, bytes, nbytes);
}

/* AWQ: the layer's norms, with the scales folded into them, in their planned
 * (float) types. */
static dsq_status put_norms(void *user, const dsq_seq_layer_out *l)
{
    gcalib *g = user;
    const dsq_block_desc *d = g->m->block;
    for (int k = 0; k < d->n_norms; k++) {
        if (!l->norm[k]) continue;
        char name[160];
        snprintf(name, sizeof name, "blk.%d.%s.weight", l->layer, d->norms[k].gguf);
        int64_t i = plan_index(g, name);
        if (i < 0) return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s is not in the plan", name);
        const dsq_gguf_quantize_tensor *t = &g->plan->tensors[i];
        const int64_t n = dsq_block_norm_dim(d, &g->m->arch, k);
        if ((uint64_t)n != (uint64_t)t->ne[0] * (uint64_t)t->ne[1])
            return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s has %llu values, the model's norm %lld", name,
                            (unsigned long long)((uint64_t)t->ne[0] * (uint64_t)t->ne[1]), (long long)n);
        DSQ_TRY(grow_buf(g, t->bytes_out));
        DSQ_TRY(dsq_quantize(t->type_out, l->norm[k], g->buf, 1, n, NULL));
        DSQ_TRY(spill(g, i, t->type_out, g->buf, t->bytes_out));
    }
    return DSQ_OK;
}

static dsq_status provide(void *user, const char *name, dsq_type type, uint64_t nbytes, const void **bytes)
{
    gcalib *g = user;
    *bytes = NULL;
    int64_t i = plan_index(g, name);
    if (i < 0 || !g->has[i]) return DSQ_OK;
    if (g->sp[i].type != type || g->sp[i].nbytes != nbytes)
        return dsq_fail(DSQ_ERR_FORMAT, "gguf: %s: calibrated as %s (%llu bytes), written as %s (%llu bytes)", name,
                        dsq_type_name(g->sp[i].type), (unsigned long long)g->sp[i].nbytes, dsq_type_name(type),
                        (unsigned long long)nbytes);
    DSQ_TRY(grow_buf(g, nbytes));
    DSQ_TRY(spill_io(g, false, g->buf, nbytes, g->sp[i].off));
    *bytes = g->buf;
    return DSQ_OK;
}

/* The spill file: in the output's folder (the same disk the result needs),
 * unlinked at once so that no exit, crash or kill leaves it behind. */
static dsq_status open_spill(gcalib *g, const char *out)
{
    const char *slash = strrchr(out, '/');
    int n = slash ? snprintf(g->spill_path, sizeof g->spill_path, "%.*s/.dsq-gptq-XXXXXX", (int)(slash - out), out)
                  : snprintf(g->spill_path, sizeof g->spill_path, ".dsq-gptq-XXXXXX");
    if (n < 0 || (size_t)n >= sizeof g->spill_path) return dsq_fail(DSQ_ERR_ARG, "%s: path too long", out);
    g->fd = mkstemp(g->spill_path);
    if (g->fd < 0) return dsq_fail(DSQ_ERR_IO, "%s: cannot create a scratch file: %s", g->spill_path, strerror(errno));
    unlink(g->spill_path);
    return DSQ_OK;
}

static dsq_status check_tokens(const dsq_model *m, const dsq_calib_set *c, const char *method)
{
    int64_t widest = 0;
    for (int id = 0; id < m->block->n_linears; id++) {
        int64_t o, in;
        dsq_block_linear_shape(m->block, &m->arch, id, &o, &in);
        if (in > widest) widest = in;
    }
    int64_t tokens = (int64_t)c->n_samples * c->seqlen;
    if (tokens < widest)
        return dsq_fail(DSQ_ERR_ARG,
                        "%s: %lld calibration tokens (%d x %d) are fewer than the widest linear input (%lld): "
                        "every Hessian (input Gram matrix) would be singular; raise --n-samples or --seqlen",
                        method, (long long)tokens, c->n_samples, c->seqlen, (long long)widest);
    return DSQ_OK;
}

static dsq_status calibrate(gcalib *g, const char *in, const dsq_gguf_calib_opts *co, dsq_gguf_calib_report *rep)
{
    dsq_tokenizer *tok = NULL;
    DSQ_TRY(dsq_model_open(in, &g->m));
    DSQ_TRY(dsq_block_require(g->m->block, &g->m->arch, DSQ_BLOCK_CAN_CALIBRATE, in));
    g->rows_gguf = g->m->ckpt->kind == DSQ_CKPT_GGUF;
    DSQ_TRY(dsq_tokenizer_load(in, &tok));
    dsq_status st = dsq_calib_load(&co->calib, tok, &rep->calib);
    dsq_tokenizer_free(tok);
    DSQ_TRY(st);
    DSQ_LOGI("calibration: %d x %d tokens from %s", rep->calib.n_samples, rep->calib.seqlen, rep->calib.path);
    DSQ_TRY(check_tokens(g->m, &rep->calib, co->method->name));
    dsq_seq_gguf hooks = {target, put, g};
    dsq_seq_opts o = dsq_seq_default_opts();
    o.method = co->method;
    o.q.bits = 4;
    o.q.group_size = -1; /* unused: the GGUF types decide; per channel fits every width */
    o.q.sym = true;
    if (co->method == &dsq_method_awq) {
        /* the INT options only shape AWQ's w_mean (groups of 32, the blocks'
         * width); the block quantizers choose their own ranges, so no clip */
        o.q.group_size = 32;
        o.q.sym = false;
        o.skip_indivisible = true; /* such a linear keeps its float plan: written, not searched */
        o.awq.clip = false;
        o.awq_loss_samples = co->loss_samples;
        if (co->finalists) o.awq.finalists = co->finalists < 0 ? 0 : co->finalists;
        o.emit = put_norms;
        o.user = g;
    }
    o.damp = co->damp;
    o.act_order = co->act_order;
    o.bf16 = co->bf16;
    o.threads = co->threads;
    o.gguf = &hooks;
    o.max_layers = co->max_layers;
    return dsq_seq_quantize(g->m, &rep->calib, &o, &rep->seq, NULL);
}

static bool float_type(dsq_type t) { return t == DSQ_TYPE_F32 || t == DSQ_TYPE_F16 || t == DSQ_TYPE_BF16; }

/* Every decoder tensor the plan quantizes must be a block type GPTQ can
 * write, or a float fallback (llama-quantize's f16 for rows no block
 * divides: written as planned, not calibrated); a float --type (F16, BF16)
 * leaves nothing to calibrate. */
static dsq_status check_types(const dsq_gguf_quantize_report *plan)
{
    bool any = false;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const dsq_gguf_quantize_tensor *t = &plan->tensors[i];
        if (!t->quantized || strncmp(t->name, "blk.", 4) || float_type(t->type_out)) continue;
        any = true;
        if (dsq_block_codes_supported(t->type_out)) continue;
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "gguf --method: tensor %s is planned as %s, not a block type GPTQ or AWQ writes (q4_0, "
                        "q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, iq4_nl, iq4_xs)",
                        t->name, dsq_type_name(t->type_out));
    }
    if (!any)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "gguf --method: the plan quantizes no decoder tensor to a block type "
                                             "(a float --type leaves nothing to calibrate)");
    return DSQ_OK;
}

static dsq_status setup(gcalib *g, const char *in, const char *out, const dsq_gguf_quantize_options *gopt,
                        const dsq_gguf_calib_opts *co, dsq_imatrix **im_owned)
{
    if (gopt->provider) return dsq_fail(DSQ_ERR_ARG, "gguf: a provider is already set");
    if (co->method != &dsq_method_gptq && co->method != &dsq_method_awq)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "gguf --method %s: only gptq and awq write GGUF blocks",
                        co->method ? co->method->name : "?");
    if (dsq_exists(out) && !gopt->overwrite)
        return dsq_fail(DSQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", out);
    g->im = gopt->imatrix;
    if (!g->im && gopt->imatrix_file) {
        DSQ_TRY(dsq_imatrix_load(gopt->imatrix_file, im_owned));
        g->im = *im_owned;
    }
    if (g->im && g->im->n_entries == 0) g->im = NULL;
    dsq_gguf_quantize_report *plan = NULL;
    dsq_gguf_quantize_options po = *gopt;
    po.imatrix = g->im; /* loaded once, above */
    DSQ_TRY(dsq_gguf_quantize_plan(in, &po, &plan));
    g->plan = plan;
    DSQ_TRY(check_types(plan));
    DSQ_TRY(dsq_strmap_reserve(&g->by_name, plan->n_tensors));
    for (size_t i = 0; i < plan->n_tensors; i++)
        DSQ_TRY(dsq_strmap_put(&g->by_name, plan->tensors[i].name, strlen(plan->tensors[i].name), (int64_t)i, NULL));
    g->sp = calloc(plan->n_tensors ? plan->n_tensors : 1, sizeof *g->sp);
    g->has = calloc(plan->n_tensors ? plan->n_tensors : 1, sizeof *g->has);
    g->parts = calloc(plan->n_tensors ? plan->n_tensors : 1, sizeof *g->parts);
    if (!g->sp || !g->has || !g->parts) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    g->n_parts = plan->n_tensors;
    return open_spill(g, out);
}

dsq_status dsq_gguf_calib_quantize(const char *in, const char *out, const dsq_gguf_quantize_options *gopt,
                                   const dsq_gguf_calib_opts *co, dsq_gguf_calib_report *rep)
{
    memset(rep, 0, sizeof *rep);
    if (!in || !out || !gopt || !co) return dsq_fail(DSQ_ERR_ARG, "gguf: missing argument");
    gcalib g = {.fd = -1};
    dsq_imatrix *im_owned = NULL;
    dsq_status st = setup(&g, in, out, gopt, co, &im_owned);
    if (st == DSQ_OK) st = calibrate(&g, in, co, rep);
    dsq_model_close(g.m); /* the writer maps the input itself */
    g.m = NULL;
    if (st == DSQ_OK) {
        dsq_gguf_provider pv = {provide, &g, co->method->name};
        dsq_gguf_quantize_options o = *gopt;
        o.imatrix = g.im;
        o.provider = &pv;
        st = dsq_gguf_quantize(in, out, &o, &rep->gguf);
    }
    if (g.fd >= 0) close(g.fd);
    dsq_gguf_quantize_report_free((dsq_gguf_quantize_report *)g.plan);
    dsq_strmap_free(&g.by_name);
    dsq_imatrix_free(im_owned);
    for (size_t i = 0; g.parts && i < g.n_parts; i++) free(g.parts[i]);
    free(g.parts);
    free(g.sp);
    free(g.has);
    free(g.buf);
    if (st != DSQ_OK) dsq_gguf_calib_report_free(rep);
    return st;
}

void dsq_gguf_calib_report_free(dsq_gguf_calib_report *rep)
{
    if (!rep) return;
    dsq_calib_free(&rep->calib);
    dsq_gguf_quantize_report_free(rep->gguf);
    rep->gguf = NULL;
}
