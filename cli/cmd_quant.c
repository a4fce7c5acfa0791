/* dsquant rtn|awq|gptq: INTn weight-only quantization of a Llama-family model
 * into a Hugging Face folder that transformers and vLLM load (AutoAWQ GEMM,
 * GPTQ v1 or compressed-tensors pack-quantized), through the layer-by-layer
 * driver calibration/sequential.h. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/dataset.h"
#include "calibration/sequential.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/perplexity.h"
#include "formats/hf_names.h"
#include "formats/hf_tokenizer.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"
#include "kernels/cpu.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

static const char g_usage[] =
    "usage: dsquant rtn|awq|gptq MODEL -o OUT [options]\n"
    "\n"
    "Quantizes the linear layers of MODEL (a Hugging Face folder or a GGUF file) to\n"
    "INTn groups and writes a Hugging Face folder that transformers and vLLM load.\n"
    "\n"
    "options:\n"
    "  -o, --output DIR       output folder (refused when it exists, unless --force)\n"
    "  --w-bit N              2, 3, 4 or 8 (default 4; the awq format takes only 4)\n"
    "  --group G              group size along the input (default 128; -1: per channel)\n"
    "  --zero-point           asymmetric groups with a zero point (default for awq)\n"
    "  --no-zero-point, --sym symmetric groups (default for gptq and rtn)\n"
    "  --act-order            gptq: columns by decreasing Hessian diagonal (desc_act)\n"
    "  --static-groups        gptq: group parameters from the original weights\n"
    "  --damp F               gptq: dampening fraction of mean diag(H) (default 0.01)\n"
    "  --format F             awq | gptq | compressed-tensors (default: awq for awq,\n"
    "                         gptq otherwise)\n"
    "  --calib NAME|FILE      calibration text: tinyshakespeare (default), gutenberg,\n"
    "                         a registered dataset, or a text / .jsonl file (.zst ok)\n"
    "  --n-samples N          calibration windows (default 128)\n"
    "  --seqlen L             tokens per window (default 512 for awq, 2048 for gptq)\n"
    "  --seed S               window sampling seed (default 0)\n"
    "  --loss-samples N       awq: windows the scale search's block loss runs on\n"
    "                         (default: all; statistics and clipping use all)\n"
    "  --skip-indivisible     leave linears the group does not divide unquantized\n"
    "  --threads T            CPU threads (default: all)\n"
    "  --compute P            calibration arithmetic: bf16 (BF16 products, F32 sums, as\n"
    "                         torch runs a BF16 model), f32, or auto (default: bf16 on\n"
    "                         CPUs with AVX512-BF16, else f32)\n"
    "  --force                replace OUT when it exists\n"
    "  --eval                 WikiText-2 perplexity (hf protocol) of MODEL and of the result\n"
    "  --eval-ctx N           eval window (default 512)\n"
    "  --eval-chunks K        eval windows (default 40; 0: all)\n"
    "  --json                 one JSON object on stdout\n"
    "  -h, --help             this text\n";

typedef enum out_format { FMT_AWQ = 0, FMT_GPTQ, FMT_CT } out_format;

typedef struct qargs {
    dsq_qmethod method;
    const char *model, *out, *calib;
    int bits, group, n_samples, seqlen, threads, eval_ctx, eval_chunks, loss_samples;
    int sym; /* -1: the format's default */
    bool act_order, static_groups, skip, force, eval, json;
    double damp;
    int fmt; /* -1: the method's default */
    int compute; /* -1 auto, 0 f32, 1 bf16 */
    uint64_t seed;
} qargs;

static int parse_format(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "awq")) return FMT_AWQ;
    if (!strcmp(s, "gptq")) return FMT_GPTQ;
    if (!strcmp(s, "compressed-tensors") || !strcmp(s, "ct")) return FMT_CT;
    return -1;
}

static int parse_value_opt(int argc, char **argv, int *i, qargs *a)
{
    const char *opt = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long v;
    if (!strcmp(opt, "-o") || !strcmp(opt, "--output") || !strcmp(opt, "--calib")) {
        if (!val) return fprintf(stderr, "dsquant: error: %s needs a value\n", opt), 2;
        if (opt[1] == 'o' || opt[2] == 'o') a->out = val;
        else a->calib = val;
    } else if (!strcmp(opt, "--format")) {
        if ((a->fmt = parse_format(val)) < 0)
            return fprintf(stderr, "dsquant: error: --format takes awq, gptq or compressed-tensors\n"), 2;
    } else if (!strcmp(opt, "--compute")) {
        a->compute = !val ? -2 : !strcmp(val, "auto") ? -1 : !strcmp(val, "f32") ? 0 : !strcmp(val, "bf16") ? 1 : -2;
        if (a->compute == -2) return fprintf(stderr, "dsquant: error: --compute takes auto, f32 or bf16\n"), 2;
    } else if (!strcmp(opt, "--damp")) {
        char *end = NULL;
        a->damp = val ? strtod(val, &end) : -1;
        if (!val || !end || *end || !(a->damp > 0 && a->damp < 1))
            return fprintf(stderr, "dsquant: error: --damp takes a fraction in (0, 1)\n"), 2;
    } else if (!strcmp(opt, "--group")) {
        if (val && !strcmp(val, "-1")) a->group = -1;
        else if ((v = dsq_cli_parse_int(opt, val, 1, 1 << 20)) < 0) return 2;
        else a->group = (int)v;
    } else if (!strcmp(opt, "--seed")) {
        if ((v = dsq_cli_parse_int(opt, val, 0, (1LL << 62))) < 0) return 2;
        a->seed = (uint64_t)v;
    } else {
        long long lo = !strcmp(opt, "--eval-chunks") ? 0 : 1;
        if ((v = dsq_cli_parse_int(opt, val, lo, 1 << 24)) < 0) return 2;
        if (!strcmp(opt, "--w-bit")) a->bits = (int)v;
        else if (!strcmp(opt, "--n-samples")) a->n_samples = (int)v;
        else if (!strcmp(opt, "--seqlen")) a->seqlen = (int)v;
        else if (!strcmp(opt, "--threads")) a->threads = (int)v;
        else if (!strcmp(opt, "--eval-ctx")) a->eval_ctx = (int)v;
        else if (!strcmp(opt, "--loss-samples")) a->loss_samples = (int)v;
        else a->eval_chunks = (int)v;
    }
    (*i)++;
    return 0;
}

static bool is_value_opt(const char *o)
{
    static const char *const names[] = {"-o",     "--output",  "--calib",   "--format",  "--damp",
                                        "--group", "--seed",    "--w-bit",   "--n-samples", "--seqlen",
                                        "--threads", "--eval-ctx", "--eval-chunks", "--compute", "--loss-samples"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(o, names[i])) return true;
    return false;
}

/* One option of argv[*i] (dsq_cli_walk's callback). */
static int parse_opt(int argc, char **argv, int *i, void *user)
{
    qargs *a = user;
    const char *opt = argv[*i];
    if (is_value_opt(opt)) return parse_value_opt(argc, argv, i, a);
    if (!strcmp(opt, "--zero-point")) a->sym = 0;
    else if (!strcmp(opt, "--no-zero-point") || !strcmp(opt, "--sym")) a->sym = 1;
    else if (!strcmp(opt, "--act-order")) a->act_order = true;
    else if (!strcmp(opt, "--static-groups")) a->static_groups = true;
    else if (!strcmp(opt, "--skip-indivisible")) a->skip = true;
    else if (!strcmp(opt, "--force")) a->force = true;
    else if (!strcmp(opt, "--eval")) a->eval = true;
    else if (!strcmp(opt, "--json")) a->json = true;
    else {
        fprintf(stderr, "dsquant: error: %s: unknown option %s (see dsquant %s --help)\n", argv[0], opt, argv[0]);
        return 2;
    }
    return 0;
}

static int parse(int argc, char **argv, qargs *a)
{
    a->method = !strcmp(argv[0], "awq") ? DSQ_QMETHOD_AWQ : !strcmp(argv[0], "gptq") ? DSQ_QMETHOD_GPTQ : DSQ_QMETHOD_RTN;
    a->bits = 4, a->group = 128, a->n_samples = 128, a->sym = -1, a->damp = 0.01, a->fmt = -1, a->compute = -1;
    a->eval_ctx = 512, a->eval_chunks = 40;
    int n_pos, rc = dsq_cli_walk(argc, argv, argv[0], g_usage, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc;
    if (!a->model || !a->out) {
        fprintf(stderr, "dsquant: error: %s: %s (see dsquant %s --help)\n", argv[0], !a->model ? "missing MODEL" : "missing -o OUT",
                argv[0]);
        return 2;
    }
    if (a->fmt < 0) a->fmt = a->method == DSQ_QMETHOD_AWQ ? FMT_AWQ : FMT_GPTQ;
    if (a->sym < 0) a->sym = a->fmt == FMT_AWQ ? 0 : 1;
    if (!a->seqlen) a->seqlen = a->method == DSQ_QMETHOD_GPTQ ? 2048 : 512;
    return 0;
}

/* Refusals that need no model: widths and format constraints. */
static dsq_status check_args(const qargs *a)
{
    if (a->bits != 2 && a->bits != 3 && a->bits != 4 && a->bits != 8)
        return dsq_fail(DSQ_ERR_ARG, "--w-bit %d: supported widths are 2, 3, 4 and 8", a->bits);
    if (a->group != -1 && a->group != 32 && a->group != 64 && a->group != 128)
        return dsq_fail(DSQ_ERR_ARG, "--group %d: supported group sizes are 32, 64, 128 and -1 (per channel)",
                        a->group);
    if (a->fmt == FMT_AWQ && a->bits != 4)
        return dsq_fail(DSQ_ERR_ARG, "--format awq stores 4-bit weights only (got --w-bit %d); use gptq or "
                                     "compressed-tensors",
                        a->bits);
    if (a->fmt == FMT_AWQ && a->act_order && !a->static_groups)
        return dsq_fail(DSQ_ERR_ARG, "--format awq has no g_idx: --act-order needs --static-groups there");
    /* compressed-tensors >= 0.10 refuses actorder "group" (g_idx) when loading */
    if (a->fmt == FMT_CT && a->act_order && !a->static_groups)
        return dsq_fail(DSQ_ERR_ARG, "--format compressed-tensors: current compressed-tensors removed act-order "
                                     "with g_idx (actorder \"group\"); add --static-groups (actorder \"weight\") "
                                     "or use --format gptq");
    if (a->method == DSQ_QMETHOD_AWQ && a->group == -1)
        return dsq_fail(DSQ_ERR_ARG, "awq needs a group size (AutoAWQ has no per-channel search)");
    if ((a->act_order || a->static_groups) && a->method != DSQ_QMETHOD_GPTQ)
        return dsq_fail(DSQ_ERR_ARG, "--act-order and --static-groups are GPTQ options");
    if (a->loss_samples > 0 && a->method != DSQ_QMETHOD_AWQ)
        return dsq_fail(DSQ_ERR_ARG, "--loss-samples is an AWQ option");
    if (a->loss_samples > a->n_samples)
        return dsq_fail(DSQ_ERR_ARG, "--loss-samples %d exceeds --n-samples %d", a->loss_samples, a->n_samples);
    return DSQ_OK;
}

/* ---- the output writer ---- */

typedef struct writer {
    const qargs *a;
    dsq_model *m;
    dsq_st_writer *st;
    bool permute_qk; /* GGUF "llama" rows are in llama.cpp's interleaved order */
    char **skipped;  /* module names left unquantized */
    size_t n_skipped;
    int64_t n_wrapped;
    uint16_t *buf16;
    size_t cap16;
} writer;

static const char *module_path(dsq_linear_id id)
{
    static const char *const p[DSQ_LIN_COUNT] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                 "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                 "mlp.down_proj"};
    return p[id];
}

static dsq_status pack_one(const writer *w, const dsq_intq *q, dsq_packed *out, int64_t *wrapped)
{
    memset(out, 0, sizeof *out);
    if (w->a->fmt == FMT_AWQ) return dsq_awq_pack(q, out);
    if (w->a->fmt == FMT_CT) return dsq_ct_pack(q, DSQ_TYPE_F16, out);
    return dsq_gptq_pack(q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, out, wrapped);
}

/* The tensors a quantized [out x in] linear packs to, from an all-zero intq of that shape. */
static dsq_status plan_packed(writer *w, const char *module, int64_t out, int64_t in)
{
    dsq_intq_params p = {w->a->bits, w->a->group, w->a->sym != 0, DSQ_INTQ_RULE_GPTQ, 0};
    dsq_intq q;
    DSQ_TRY(dsq_intq_alloc(&p, out, in, &q));
    dsq_status s = DSQ_OK;
    for (int64_t i = 0; i < q.rows * q.n_groups; i++) q.scales[i] = 1.0f, q.zeros[i] = p.sym ? (uint8_t)(1 << (p.bits - 1)) : 0;
    if (w->a->act_order && !w->a->static_groups) { /* GPTQ then emits a g_idx */
        if (!(q.g_idx = malloc((size_t)in * sizeof *q.g_idx))) s = dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        for (int64_t c = 0; s == DSQ_OK && c < in; c++) q.g_idx[c] = (int32_t)((in - 1 - c) / q.group_size);
    }
    dsq_packed pk;
    int64_t wr = 0;
    if (s == DSQ_OK && (s = pack_one(w, &q, &pk, &wr)) == DSQ_OK) {
        for (int i = 0; s == DSQ_OK && i < pk.n; i++) {
            char name[256];
            snprintf(name, sizeof name, "%s.%s", module, pk.t[i].suffix);
            s = dsq_st_writer_add(w->st, name, pk.t[i].type, pk.t[i].n_dims, pk.t[i].shape);
        }
        dsq_packed_free(&pk);
    }
    dsq_intq_free(&q);
    return s;
}

static dsq_status add_f16(writer *w, const char *name, int n_dims, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    return dsq_st_writer_add(w->st, name, DSQ_TYPE_F16, n_dims, shape);
}

static dsq_status plan_tensors(writer *w, const bool *quantized /* [layers x 7] */)
{
    dsq_model *m = w->m;
    char name[256];
    DSQ_TRY(add_f16(w, "model.embed_tokens.weight", 2, m->vocab, m->dim));
    for (int64_t l = 0; l < m->arch.n_layers; l++) {
        snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)l);
        DSQ_TRY(add_f16(w, name, 1, m->dim, 0));
        snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight", (long long)l);
        DSQ_TRY(add_f16(w, name, 1, m->dim, 0));
        for (int id = 0; id < DSQ_LIN_COUNT; id++) {
            const dsq_linear *L = &m->layers[l].lin[id];
            char mod[160];
            snprintf(mod, sizeof mod, "model.layers.%lld.%s", (long long)l, module_path(id));
            if (quantized[l * DSQ_LIN_COUNT + id]) DSQ_TRY(plan_packed(w, mod, L->out, L->in));
            else {
                snprintf(name, sizeof name, "%s.weight", mod);
                DSQ_TRY(add_f16(w, name, 2, L->out, L->in));
            }
            if (L->bias) {
                snprintf(name, sizeof name, "%s.bias", mod);
                DSQ_TRY(add_f16(w, name, 1, L->out, 0));
            }
        }
    }
    DSQ_TRY(add_f16(w, "model.norm.weight", 1, m->dim, 0));
    if (!m->tied) DSQ_TRY(add_f16(w, "lm_head.weight", 2, m->vocab, m->dim));
    return DSQ_OK;
}

static dsq_status write_f16(writer *w, const float *x, size_t n)
{
    if (n > w->cap16) {
        uint16_t *b = realloc(w->buf16, n * sizeof *b);
        if (!b) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        w->buf16 = b;
        w->cap16 = n;
    }
    for (size_t i = 0; i < n; i++) w->buf16[i] = dsq_f32_to_f16(x[i]);
    return dsq_st_writer_write(w->st, w->buf16, n * sizeof *w->buf16);
}

/* A linear's F32 rows streamed as F16, in chunks. */
static dsq_status write_linear_f16(writer *w, const dsq_linear *L)
{
    int64_t chunk = 256;
    float *rows = malloc((size_t)(chunk * L->in) * sizeof *rows);
    if (!rows) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    dsq_status s = DSQ_OK;
    for (int64_t r = 0; r < L->out && s == DSQ_OK; r += chunk) {
        int64_t nr = L->out - r < chunk ? L->out - r : chunk;
        s = dsq_linear_rows_f32(L, r, nr, rows);
        if (s == DSQ_OK) s = write_f16(w, rows, (size_t)(nr * L->in));
    }
    free(rows);
    return s;
}

static dsq_permute_kind perm_of(const writer *w, int id)
{
    if (!w->permute_qk) return DSQ_PERMUTE_NONE;
    return id == DSQ_LIN_Q ? DSQ_PERMUTE_Q : id == DSQ_LIN_K ? DSQ_PERMUTE_K : DSQ_PERMUTE_NONE;
}

/* llama.cpp's converter permuted q/k rows; the HF file wants them back. Row
 * permutation commutes with group quantization (groups run along a row). */
static dsq_status unpermute_intq(const writer *w, dsq_permute_kind k, dsq_intq *q)
{
    DSQ_TRY(dsq_permute_rows(&w->m->arch, k, false, q->codes, q->rows, (size_t)q->cols, NULL));
    DSQ_TRY(dsq_permute_rows(&w->m->arch, k, false, q->scales, q->rows, (size_t)q->n_groups * sizeof(float), NULL));
    return dsq_permute_rows(&w->m->arch, k, false, q->zeros, q->rows, (size_t)q->n_groups, NULL);
}

static dsq_status copy_intq(const dsq_intq *src, dsq_intq *dst)
{
    dsq_intq_params p = {src->bits, src->group_size, src->sym, DSQ_INTQ_RULE_GPTQ, 0};
    DSQ_TRY(dsq_intq_alloc(&p, src->rows, src->cols, dst));
    memcpy(dst->codes, src->codes, (size_t)(src->rows * src->cols));
    memcpy(dst->scales, src->scales, (size_t)(src->rows * src->n_groups) * sizeof(float));
    memcpy(dst->zeros, src->zeros, (size_t)(src->rows * src->n_groups));
    if (src->g_idx) {
        if (!(dst->g_idx = malloc((size_t)src->cols * sizeof *dst->g_idx))) {
            dsq_intq_free(dst);
            return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        }
        memcpy(dst->g_idx, src->g_idx, (size_t)src->cols * sizeof *dst->g_idx);
    }
    return DSQ_OK;
}

static dsq_status write_packed(writer *w, const dsq_intq *q0, dsq_permute_kind k)
{
    dsq_intq q;
    DSQ_TRY(copy_intq(q0, &q));
    dsq_status s = k != DSQ_PERMUTE_NONE ? unpermute_intq(w, k, &q) : DSQ_OK;
    dsq_packed pk;
    int64_t wrapped = 0;
    if (s == DSQ_OK && (s = pack_one(w, &q, &pk, &wrapped)) == DSQ_OK) {
        for (int i = 0; i < pk.n && s == DSQ_OK; i++) s = dsq_st_writer_write(w->st, pk.t[i].data, pk.t[i].nbytes);
        dsq_packed_free(&pk);
        w->n_wrapped += wrapped;
    }
    dsq_intq_free(&q);
    return s;
}

static dsq_status write_dense(writer *w, const float *x, int64_t rows, int64_t cols, dsq_permute_kind k)
{
    if (k == DSQ_PERMUTE_NONE) return write_f16(w, x, (size_t)(rows * cols));
    float *c = malloc((size_t)(rows * cols) * sizeof *c);
    if (!c) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    memcpy(c, x, (size_t)(rows * cols) * sizeof *c);
    dsq_status s = dsq_permute_rows(&w->m->arch, k, false, c, rows, (size_t)cols * sizeof *c, NULL);
    if (s == DSQ_OK) s = write_f16(w, c, (size_t)(rows * cols));
    free(c);
    return s;
}

static dsq_status note_skipped(writer *w, int layer, int id)
{
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.%s", layer, module_path(id));
    char **n = realloc(w->skipped, (w->n_skipped + 1) * sizeof *n);
    if (!n) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    w->skipped = n;
    if (!(n[w->n_skipped] = strdup(name))) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    w->n_skipped++;
    return DSQ_OK;
}

static dsq_status emit(void *user, const dsq_seq_layer_out *l)
{
    writer *w = user;
    const dsq_layer *L = &w->m->layers[l->layer];
    DSQ_TRY(write_f16(w, l->attn_norm, (size_t)w->m->dim));
    DSQ_TRY(write_f16(w, l->ffn_norm, (size_t)w->m->dim));
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        dsq_permute_kind k = perm_of(w, id);
        int64_t out = L->lin[id].out, in = L->lin[id].in;
        if (l->q[id]) DSQ_TRY(write_packed(w, l->q[id], k));
        else {
            DSQ_TRY(write_dense(w, l->w[id], out, in, k));
            DSQ_TRY(note_skipped(w, l->layer, id));
        }
        if (l->bias[id]) DSQ_TRY(write_dense(w, l->bias[id], out, 1, k));
    }
    return DSQ_OK;
}

/* ---- side files ---- */

static dsq_status write_text(const dsq_outdir *d, const char *name, const char *text)
{
    char path[4096];
    DSQ_TRY(dsq_outdir_file(d, name, path, sizeof path));
    dsq_outfile *f;
    DSQ_TRY(dsq_outfile_open(path, false, &f));
    dsq_status s = dsq_outfile_write(f, text, strlen(text));
    if (s == DSQ_OK) s = dsq_outfile_write(f, "\n", 1);
    if (s != DSQ_OK) {
        dsq_outfile_abort(f);
        return s;
    }
    return dsq_outfile_commit(f);
}

static dsq_status write_json(const dsq_outdir *d, const char *name, cJSON *o)
{
    char *t = cJSON_Print(o);
    if (!t) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %s", name);
    dsq_status s = write_text(d, name, t);
    free(t);
    return s;
}

static dsq_status quant_config(const writer *w, cJSON **out)
{
    const qargs *a = w->a;
    const char *const *skipped = (const char *const *)w->skipped;
    if (a->fmt == FMT_AWQ) return dsq_awq_config_json(a->group, skipped, w->n_skipped, out);
    if (a->fmt == FMT_CT) {
        const char **ign = malloc((w->n_skipped + 1) * sizeof *ign);
        if (!ign) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < w->n_skipped; i++) ign[i] = w->skipped[i];
        ign[w->n_skipped] = "lm_head";
        dsq_ct_config c = {a->bits, a->group, a->sym != 0,
                           a->act_order ? (a->static_groups ? "weight" : "group") : NULL, ign, w->n_skipped + 1};
        dsq_status s = dsq_ct_config_json(&c, out);
        free(ign);
        return s;
    }
    dsq_gptq_config c = {a->bits, a->group, a->damp, a->act_order, a->static_groups, a->sym != 0, true,
                         DSQ_GPTQ_FORMAT_V1};
    DSQ_TRY(dsq_gptq_config_json(&c, out));
    if (w->n_skipped) {
        /* GPTQ configs have no standard skip list; transformers' quantizers read this key */
        cJSON *arr = cJSON_AddArrayToObject(*out, "modules_to_not_convert");
        for (size_t i = 0; arr && i < w->n_skipped; i++) cJSON_AddItemToArray(arr, cJSON_CreateString(w->skipped[i]));
        DSQ_LOGW("%zu linears left unquantized; GPTQ loaders may not honour modules_to_not_convert", w->n_skipped);
    }
    return DSQ_OK;
}

static dsq_status write_config(const dsq_outdir *d, const writer *w)
{
    dsq_arch arch = w->m->arch;
    snprintf(arch.torch_dtype, sizeof arch.torch_dtype, "float16");
    arch.tie_word_embeddings = w->m->tied;
    char *json = NULL;
    DSQ_TRY(dsq_arch_to_hf_json(&arch, &json));
    cJSON *o = cJSON_Parse(json), *qc = NULL;
    free(json);
    if (!o) return dsq_fail(DSQ_ERR_INTERNAL, "config.json: could not re-read our own JSON");
    dsq_status s = quant_config(w, &qc);
    if (s == DSQ_OK) {
        cJSON_AddItemToObject(o, "quantization_config", qc);
        s = write_json(d, "config.json", o);
        if (s == DSQ_OK && w->a->fmt == FMT_GPTQ) s = write_json(d, "quantize_config.json", qc);
    }
    cJSON_Delete(o);
    return s;
}

static dsq_status copy_file(const dsq_outdir *d, const char *src_dir, const char *name)
{
    char src[4096];
    DSQ_TRY(dsq_path_join(src, sizeof src, src_dir, name));
    if (!dsq_exists(src)) return DSQ_OK;
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(src, (size_t)1 << 30, &text, &len));
    char path[4096];
    dsq_outfile *f = NULL;
    dsq_status s = dsq_outdir_file(d, name, path, sizeof path);
    if (s == DSQ_OK) s = dsq_outfile_open(path, false, &f);
    if (s == DSQ_OK) s = dsq_outfile_write(f, text, len);
    if (s == DSQ_OK) s = dsq_outfile_commit(f);
    else dsq_outfile_abort(f);
    free(text);
    return s;
}

static dsq_status write_side_files(const dsq_outdir *d, const writer *w)
{
    DSQ_TRY(write_config(d, w));
    const dsq_checkpoint *c = w->m->ckpt;
    if (c->kind == DSQ_CKPT_HF_DIR) {
        static const char *const names[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                            "tokenizer.model",    "vocab.json",            "merges.txt",
                                            "added_tokens.json",  "chat_template.jinja",   "chat_template.json"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) DSQ_TRY(copy_file(d, c->path, names[i]));
        char gp[4096];
        DSQ_TRY(dsq_path_join(gp, sizeof gp, c->path, "generation_config.json"));
        if (dsq_exists(gp)) return copy_file(d, c->path, "generation_config.json");
    }
    cJSON *g = cJSON_CreateObject();
    if (!g) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    if (w->m->arch.bos_token_id >= 0) cJSON_AddNumberToObject(g, "bos_token_id", (double)w->m->arch.bos_token_id);
    if (w->m->arch.eos_token_id >= 0) cJSON_AddNumberToObject(g, "eos_token_id", (double)w->m->arch.eos_token_id);
    dsq_status s = write_json(d, "generation_config.json", g);
    cJSON_Delete(g);
    DSQ_TRY(s);
    if (c->kind == DSQ_CKPT_GGUF) return dsq_tokenizer_gguf_to_hf(c->gguf, dsq_outdir_tmp_path(d));
    return DSQ_OK;
}

/* ---- the run ---- */

typedef struct results {
    dsq_seq_report rep;
    dsq_calib_set calib;
    double ppl_base, ppl_quant;
    const char *eval_source;
    int64_t n_bad;
} results;

static dsq_status eval_ppl(dsq_model *m, const dsq_tokenizer *tok, const qargs *a, double *ppl)
{
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_dataset_load("wikitext2", DSQ_TEXT_HF_JOIN, path, sizeof path, &text, &len));
    dsq_ctx *c = NULL;
    dsq_status s = dsq_ctx_new(m, a->eval_ctx, a->threads, &c);
    dsq_ppl_opts o;
    dsq_ppl_opts_default(&o);
    o.protocol = DSQ_PPL_HF;
    o.ctx = a->eval_ctx;
    o.chunks = a->eval_chunks;
    dsq_ppl_result r;
    if (s == DSQ_OK) s = dsq_ppl_text(c, tok, text, len, &o, &r);
    if (s == DSQ_OK) *ppl = r.ppl;
    dsq_ctx_free(c);
    free(text);
    return s;
}

static dsq_status seq_opts(const qargs *a, dsq_seq_opts *o)
{
    *o = dsq_seq_default_opts();
    o->method = a->method;
    o->q.bits = a->bits;
    o->q.group_size = a->group;
    o->q.sym = a->sym != 0;
    o->skip_indivisible = a->skip;
    o->damp = a->damp;
    o->act_order = a->act_order;
    o->static_groups = a->static_groups;
    o->threads = a->threads;
    o->awq_loss_samples = a->loss_samples;
    o->bf16 = a->compute == 1 || (a->compute < 0 && dsq_cpu_has_avx512bf16());
    o->keep_fake_quant = a->eval;
    return DSQ_OK;
}

static dsq_status plan_quantized(dsq_model *m, const dsq_seq_opts *o, bool **out)
{
    int64_t n = m->arch.n_layers * DSQ_LIN_COUNT;
    bool *q = calloc((size_t)n, sizeof *q);
    if (!q) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        q[i] = dsq_intq_check(&o->q, m->layers[i / DSQ_LIN_COUNT].lin[i % DSQ_LIN_COUNT].in) == DSQ_OK;
    dsq_clear_error();
    *out = q;
    return DSQ_OK;
}

static dsq_status quantize_into(const qargs *a, dsq_model *m, const dsq_tokenizer *tok, dsq_outdir *d, results *res,
                                dsq_seq_keep **keep)
{
    dsq_seq_opts o;
    DSQ_TRY(seq_opts(a, &o));
    DSQ_TRY(dsq_seq_check_groups(m, &o.q, a->skip, &res->n_bad));
    if (a->method != DSQ_QMETHOD_RTN) {
        dsq_calib_opts co = {a->calib, a->n_samples, a->seqlen, a->seed};
        DSQ_TRY(dsq_calib_load(&co, tok, &res->calib));
        DSQ_LOGI("calibration: %d x %d tokens from %s", res->calib.n_samples, res->calib.seqlen, res->calib.path);
    }
    writer w;
    memset(&w, 0, sizeof w);
    w.a = a;
    w.m = m;
    w.permute_qk = m->rope_layout == DSQ_ROPE_NORM && m->ckpt->kind == DSQ_CKPT_GGUF;
    bool *quantized = NULL;
    dsq_status s = plan_quantized(m, &o, &quantized);
    if (s == DSQ_OK) s = dsq_st_writer_new(dsq_outdir_tmp_path(d), "model", 5000000000ULL, &w.st);
    if (s == DSQ_OK) s = dsq_st_writer_set_meta(w.st, "format", "pt");
    if (s == DSQ_OK) s = plan_tensors(&w, quantized);
    if (s == DSQ_OK) s = dsq_st_writer_begin(w.st);
    dsq_linear E;
    memset(&E, 0, sizeof E);
    if (s == DSQ_OK && (s = dsq_linear_from_tensor(&E, &m->tok_embd)) == DSQ_OK) s = write_linear_f16(&w, &E);
    dsq_linear_release(&E);
    o.emit = emit;
    o.user = &w;
    if (s == DSQ_OK) s = dsq_seq_quantize(m, a->method == DSQ_QMETHOD_RTN ? NULL : &res->calib, &o, &res->rep, keep);
    if (s == DSQ_OK) s = write_f16(&w, m->output_norm, (size_t)m->dim);
    if (s == DSQ_OK && !m->tied) s = write_linear_f16(&w, &m->output);
    if (s == DSQ_OK) s = dsq_st_writer_finish(w.st);
    if (s == DSQ_OK) s = write_side_files(d, &w);
    if (s == DSQ_OK && w.n_wrapped)
        DSQ_LOGW("%lld GPTQ v1 zero points of 0 were stored wrapped (see formats/pack_gptq.h)", (long long)w.n_wrapped);
    dsq_st_writer_free(w.st);
    for (size_t i = 0; i < w.n_skipped; i++) free(w.skipped[i]);
    free(w.skipped);
    free(w.buf16);
    free(quantized);
    return s;
}

static void print_results(const qargs *a, const results *r)
{
    static const char *const fmts[] = {"awq", "gptq", "compressed-tensors"};
    if (!a->json) {
        printf("%s: %lld linears quantized to %d-bit groups of %d (%s), %lld left unquantized, %.1f s%s, peak RSS "
               "%ld MiB\n",
               dsq_qmethod_name(a->method), (long long)r->rep.n_quantized, a->bits, a->group, fmts[a->fmt],
               (long long)r->rep.n_skipped, r->rep.seconds,
               a->method == DSQ_QMETHOD_RTN ? "" : r->rep.bf16 ? " (bf16 passes)" : " (f32 passes)",
               r->rep.peak_rss_kb / 1024);
        printf("wrote %s\n", a->out);
        if (a->eval)
            printf("WikiText-2 PPL (hf protocol, ctx %d): base %.4f, quantized %.4f (%s)\n", a->eval_ctx, r->ppl_base,
                   r->ppl_quant, r->eval_source);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", dsq_qmethod_name(a->method));
    cJSON_AddStringToObject(o, "format", fmts[a->fmt]);
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "output", a->out);
    cJSON_AddNumberToObject(o, "bits", a->bits);
    cJSON_AddNumberToObject(o, "group_size", a->group);
    cJSON_AddBoolToObject(o, "sym", a->sym != 0);
    cJSON_AddNumberToObject(o, "n_quantized", (double)r->rep.n_quantized);
    cJSON_AddNumberToObject(o, "n_unquantized", (double)r->rep.n_skipped);
    if (a->method != DSQ_QMETHOD_RTN) {
        cJSON_AddStringToObject(o, "calib", r->calib.path);
        cJSON_AddNumberToObject(o, "n_samples", r->calib.n_samples);
        cJSON_AddNumberToObject(o, "seqlen", r->calib.seqlen);
        cJSON_AddNumberToObject(o, "calib_text_tokens", (double)r->calib.n_text_tokens);
        /* where each window starts in the tokenized text: lets another tool calibrate on the same tokens */
        cJSON *st = cJSON_AddArrayToObject(o, "calib_starts");
        for (int i = 0; st && r->calib.starts && i < r->calib.n_samples; i++)
            cJSON_AddItemToArray(st, cJSON_CreateNumber((double)r->calib.starts[i]));
    }
    if (a->method != DSQ_QMETHOD_RTN) cJSON_AddStringToObject(o, "compute", r->rep.bf16 ? "bf16" : "f32");
    cJSON_AddNumberToObject(o, "seconds", r->rep.seconds);
    cJSON_AddNumberToObject(o, "peak_rss_mib", (double)r->rep.peak_rss_kb / 1024.0);
    if (a->eval) {
        cJSON_AddNumberToObject(o, "ppl_base", r->ppl_base);
        cJSON_AddNumberToObject(o, "ppl_quantized", r->ppl_quant);
        cJSON_AddStringToObject(o, "eval_source", r->eval_source);
    }
    char *t = cJSON_Print(o);
    if (t) puts(t);
    free(t);
    cJSON_Delete(o);
}

/* The written artifact when the runtime reads it, else the in-memory dequantized model. */
static dsq_status eval_result(const qargs *a, dsq_model *m, const dsq_tokenizer *tok, results *r)
{
    dsq_model *q = NULL;
    if (dsq_model_open(a->out, &q) == DSQ_OK) {
        dsq_status s = eval_ppl(q, tok, a, &r->ppl_quant);
        dsq_model_close(q);
        r->eval_source = "written artifact";
        return s;
    }
    DSQ_LOGW("the runtime cannot load %s (%s): evaluating the dequantized weights in memory", a->out, dsq_errmsg());
    dsq_clear_error();
    r->eval_source = "in-memory dequantized weights";
    return eval_ppl(m, tok, a, &r->ppl_quant);
}

static dsq_status run(const qargs *a)
{
    DSQ_TRY(check_args(a));
    results r;
    memset(&r, 0, sizeof r);
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_outdir *d = NULL;
    dsq_seq_keep *keep = NULL;
    dsq_status s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK && dsq_exists(a->out) && !a->force)
        s = dsq_fail(DSQ_ERR_EXISTS, "%s exists (pass --force to replace it)", a->out);
    if (s == DSQ_OK) s = dsq_outdir_open(a->out, a->force, &d);
    if (s == DSQ_OK && a->eval) s = eval_ppl(m, tok, a, &r.ppl_base);
    if (s == DSQ_OK) s = quantize_into(a, m, tok, d, &r, &keep);
    if (s == DSQ_OK) s = dsq_outdir_commit(d);
    else dsq_outdir_abort(d);
    if (s == DSQ_OK && a->eval) s = eval_result(a, m, tok, &r);
    if (s == DSQ_OK) print_results(a, &r);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
    dsq_tokenizer_free(tok);
    dsq_calib_free(&r.calib);
    return s;
}

int dsq_cmd_quant(int argc, char **argv)
{
    qargs a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a) == DSQ_OK ? 0 : dsq_cli_fail();
}
