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
#include "calibration/int_export.h"
#include "calibration/sequential.h"
#include "cli/commands.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/perplexity.h"
#include "formats/block.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "quantizers/intq_search.h"
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
    "  --act-order            gptq: columns in decreasing Hessian-diagonal order, group\n"
    "                         parameters from static groups: no g_idx, desc_act false\n"
    "                         (vLLM refuses desc_act true)\n"
    "  --desc-act             gptq: act-order with groups cut along that order, stored\n"
    "                         with a g_idx and desc_act true (--format gptq only; for\n"
    "                         transformers/AutoGPTQ/GPTQModel, which vLLM does not load)\n"
    "  --static-groups        gptq: group parameters from the original weights\n"
    "  --damp F               gptq: dampening fraction of mean diag(H) (default 0.01)\n"
    "  --grid G               rtn, gptq: each group's range: minmax (AutoAWQ's and\n"
    "                         GPTQ's), mse (the clip ratio 1.00..0.81 with the least\n"
    "                         sum |w - q|^2.4; rtn's default, no data), or imatrix-mse\n"
    "                         (ratios 1.00..0.10, error weighted by each input\n"
    "                         channel's mean x^2: gptq's Hessian diagonal, its default;\n"
    "                         rtn then calibrates on --calib)\n"
    "  --refit, --no-refit    gptq: after GPTQ, each row's scales re-solved by least\n"
    "                         squares for its codes under the layer's Hessian (default\n"
    "                         on; --no-refit keeps the scales GPTQ chose)\n"
    "  --format F             awq | gptq | compressed-tensors (default: awq for awq,\n"
    "                         gptq otherwise)\n"
    "  --calib NAME|FILE      calibration text: tinyshakespeare (default), gutenberg,\n"
    "                         a registered dataset, or a text / .jsonl file (.zst ok)\n"
    "  --n-samples N          calibration windows (default 128)\n"
    "  --seqlen L             tokens per window (default 512 for awq, 2048 for gptq)\n"
    "  --seed S               window sampling seed (default 0)\n"
    "  --loss-samples N       awq: windows the scale search's block loss runs on\n"
    "                         (default: all; statistics and clipping use all)\n"
    "  --finalists K          awq: grid points run on every loss window after all\n"
    "                         were run on the first eighth (default 4; 0: every\n"
    "                         point on every window, as AutoAWQ)\n"
    "  --skip-indivisible     leave linears the group does not divide unquantized\n"
    "  --expert-calib M       MoE models: routed (default) gives each routed expert the\n"
    "                         statistics of the tokens routed to it, and every token's\n"
    "                         when fewer than --expert-min-tokens reach it; all gives\n"
    "                         every expert every token's (llm-compressor's\n"
    "                         moe_calibrate_all_experts); layer outputs always follow\n"
    "                         the router\n"
    "  --expert-min-tokens N  routed: the fewest tokens an expert calibrates on (32)\n"
    "  --threads T            CPU threads (default: all)\n"
    "  --compute P            calibration arithmetic: bf16 (BF16 products, F32 sums, as\n"
    "                         torch runs a BF16 model), f32, or auto (default: bf16 on\n"
    "                         CPUs with AMX-BF16, where it is several times faster;\n"
    "                         else f32, faster than AVX512-BF16's products)\n"
    "  --force                replace OUT when it exists\n"
    "  --eval                 WikiText-2 perplexity (hf protocol) of MODEL and of the result\n"
    "  --eval-ctx N           eval window (default 512)\n"
    "  --eval-chunks K        eval windows (default 40; 0: all)\n"
    "  --json                 one JSON object on stdout\n"
    "  -h, --help             this text\n";

typedef struct qargs {
    const dsq_method *method;
    const char *model, *out, *calib;
    int bits, group, n_samples, seqlen, threads, eval_ctx, eval_chunks, loss_samples;
    int finalists; /* -1: the method's default */
    int sym;       /* -1: the format's default */
    bool act_order, desc_act, static_groups, skip, force, eval, json;
    int refit; /* -1: the method's default */
    double damp;
    int fmt;     /* -1: the method's default */
    int compute; /* -1 auto, 0 f32, 1 bf16 */
    int grid;    /* dsq_intq_grid; -1: the method's default */
    uint64_t seed;
    int expert_calib, expert_min_tokens;
} qargs;

static int parse_format(const char *s)
{
    if (s && !strcmp(s, "ct")) return DSQ_INT_FORMAT_CT;
    return dsq_int_format_parse(s);
}

static int parse_value_opt(int argc, char **argv, int *i, qargs *a)
{
    const char *opt = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long v;
    if (!strcmp(opt, "-o") || !strcmp(opt, "--output") || !strcmp(opt, "--calib")) {
        if (!val) return fprintf(stderr, "dsquant: error: %s needs a value\n", opt), 2;
        if (opt[1] == 'o' || opt[2] == 'o')
            a->out = val;
        else
            a->calib = val;
    } else if (!strcmp(opt, "--format")) {
        if ((a->fmt = parse_format(val)) < 0 || a->fmt > DSQ_INT_FORMAT_CT)
            return fprintf(stderr, "dsquant: error: --format takes awq, gptq or compressed-tensors\n"), 2;
    } else if (!strcmp(opt, "--expert-calib")) {
        a->expert_calib = !val ? -1 : !strcmp(val, "routed") ? 0 : !strcmp(val, "all") ? 1 : -1;
        if (a->expert_calib < 0) return fprintf(stderr, "dsquant: error: --expert-calib takes routed or all\n"), 2;
    } else if (!strcmp(opt, "--grid")) {
        if ((a->grid = dsq_intq_grid_parse(val)) < 0)
            return fprintf(stderr, "dsquant: error: --grid takes minmax, mse or imatrix-mse, not \"%s\"\n",
                           val ? val : ""),
                   2;
    } else if (!strcmp(opt, "--compute")) {
        a->compute = !val ? -2 : !strcmp(val, "auto") ? -1 : !strcmp(val, "f32") ? 0 : !strcmp(val, "bf16") ? 1 : -2;
        if (a->compute == -2) return fprintf(stderr, "dsquant: error: --compute takes auto, f32 or bf16\n"), 2;
    } else if (!strcmp(opt, "--damp")) {
        char *end = NULL;
        a->damp = val ? strtod(val, &end) : -1;
        if (!val || !end || *end || !(a->damp > 0 && a->damp < 1))
            return fprintf(stderr, "dsquant: error: --damp takes a fraction in (0, 1)\n"), 2;
    } else if (!strcmp(opt, "--group")) {
        if (val && !strcmp(val, "-1"))
            a->group = -1;
        else if ((v = dsq_cli_parse_int(opt, val, 1, 1 << 20)) < 0)
            return 2;
        else
            a->group = (int)v;
    } else if (!strcmp(opt, "--seed")) {
        if ((v = dsq_cli_parse_int(opt, val, 0, (1LL << 62))) < 0) return 2;
        a->seed = (uint64_t)v;
    } else {
        long long lo = !strcmp(opt, "--eval-chunks") || !strcmp(opt, "--finalists") ? 0 : 1;
        if ((v = dsq_cli_parse_int(opt, val, lo, 1 << 24)) < 0) return 2;
        if (!strcmp(opt, "--w-bit"))
            a->bits = (int)v;
        else if (!strcmp(opt, "--n-samples"))
            a->n_samples = (int)v;
        else if (!strcmp(opt, "--seqlen"))
            a->seqlen = (int)v;
        else if (!strcmp(opt, "--threads"))
            a->threads = (int)v;
        else if (!strcmp(opt, "--eval-ctx"))
            a->eval_ctx = (int)v;
        else if (!strcmp(opt, "--loss-samples"))
            a->loss_samples = (int)v;
        else if (!strcmp(opt, "--finalists"))
            a->finalists = (int)v;
        else if (!strcmp(opt, "--expert-min-tokens"))
            a->expert_min_tokens = (int)v;
        else
            a->eval_chunks = (int)v;
    }
    (*i)++;
    return 0;
}

static bool is_value_opt(const char *o)
{
    static const char *const names[] = {"-o",
                                        "--output",
                                        "--calib",
                                        "--format",
                                        "--damp",
                                        "--group",
                                        "--seed",
                                        "--w-bit",
                                        "--n-samples",
                                        "--seqlen",
                                        "--threads",
                                        "--eval-ctx",
                                        "--eval-chunks",
                                        "--compute",
                                        "--loss-samples",
                                        "--finalists",
                                        "--expert-calib",
                                        "--expert-min-tokens",
                                        "--grid"};
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
    if (!strcmp(opt, "--zero-point"))
        a->sym = 0;
    else if (!strcmp(opt, "--no-zero-point") || !strcmp(opt, "--sym"))
        a->sym = 1;
    else if (!strcmp(opt, "--act-order"))
        a->act_order = true;
    else if (!strcmp(opt, "--desc-act"))
        a->desc_act = true;
    else if (!strcmp(opt, "--static-groups"))
        a->static_groups = true;
    else if (!strcmp(opt, "--refit"))
        a->refit = 1;
    else if (!strcmp(opt, "--no-refit"))
        a->refit = 0;
    else if (!strcmp(opt, "--skip-indivisible"))
        a->skip = true;
    else if (!strcmp(opt, "--force"))
        a->force = true;
    else if (!strcmp(opt, "--eval"))
        a->eval = true;
    else if (!strcmp(opt, "--json"))
        a->json = true;
    else {
        fprintf(stderr, "dsquant: error: %s: unknown option %s (see dsquant %s --help)\n", argv[0], opt, argv[0]);
        return 2;
    }
    return 0;
}

static int parse(int argc, char **argv, qargs *a)
{
    if (!(a->method = dsq_method_find(argv[0]))) {
        fprintf(stderr, "dsquant: error: %s is not a quantization method\n", argv[0]);
        return 2;
    }
    a->bits = 4, a->group = 128, a->n_samples = 128, a->sym = -1, a->damp = 0.01, a->fmt = -1, a->compute = -1;
    a->grid = -1, a->refit = -1, a->finalists = -1;
    a->eval_ctx = 512, a->eval_chunks = 40;
    int n_pos, rc = dsq_cli_walk(argc, argv, argv[0], g_usage, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc;
    if (!a->model || !a->out) {
        fprintf(stderr, "dsquant: error: %s: %s (see dsquant %s --help)\n", argv[0],
                !a->model ? "missing MODEL" : "missing -o OUT", argv[0]);
        return 2;
    }
    if (a->fmt < 0) a->fmt = (int)a->method->default_format;
    if (a->sym < 0) a->sym = a->fmt == DSQ_INT_FORMAT_AWQ ? 0 : 1;
    /* vLLM refuses desc_act true: --act-order keeps GPTQ's column order but takes
     * group parameters from static groups (no g_idx); --desc-act is the g_idx layout */
    if (a->desc_act)
        a->act_order = true;
    else if (a->act_order)
        a->static_groups = true;
    if (!a->seqlen) a->seqlen = a->method->default_seqlen ? a->method->default_seqlen : 512;
    if (a->grid < 0) a->grid = (int)a->method->default_grid;
    if (a->refit < 0) a->refit = a->method == &dsq_method_gptq; /* docs/algorithms.md "Scales refitted" */
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
    if (a->fmt == DSQ_INT_FORMAT_AWQ && a->bits != 4)
        return dsq_fail(DSQ_ERR_ARG,
                        "--format awq stores 4-bit weights only (got --w-bit %d); use gptq or "
                        "compressed-tensors",
                        a->bits);
    if (a->desc_act && a->static_groups)
        return dsq_fail(DSQ_ERR_ARG, "--desc-act cuts groups along the act order; --static-groups keeps them in "
                                     "column order (that is --act-order)");
    if (a->fmt == DSQ_INT_FORMAT_AWQ && a->desc_act)
        return dsq_fail(DSQ_ERR_ARG,
                        "--format awq has no g_idx: use --act-order (static groups) instead of --desc-act");
    /* compressed-tensors >= 0.10 refuses actorder "group" (g_idx) when loading */
    if (a->fmt == DSQ_INT_FORMAT_CT && a->desc_act)
        return dsq_fail(DSQ_ERR_ARG, "--format compressed-tensors: current compressed-tensors removed act-order "
                                     "with g_idx (actorder \"group\"); use --act-order (actorder \"weight\") "
                                     "or --format gptq");
    if (a->method == &dsq_method_awq && a->group == -1)
        return dsq_fail(DSQ_ERR_ARG, "awq needs a group size (AutoAWQ has no per-channel search)");
    if ((a->act_order || a->desc_act || a->static_groups) && a->method != &dsq_method_gptq)
        return dsq_fail(DSQ_ERR_ARG, "--act-order, --desc-act and --static-groups are GPTQ options");
    /* after the defaults: every other method's default is min/max, so only a searched grid is refused */
    if (a->grid != DSQ_INTQ_GRID_MINMAX && a->method != &dsq_method_rtn && a->method != &dsq_method_gptq)
        return dsq_fail(DSQ_ERR_ARG, "--grid is an rtn and gptq option (awq searches its own clipping)");
    if (a->refit > 0 && a->method != &dsq_method_gptq)
        return dsq_fail(DSQ_ERR_ARG, "--refit is a GPTQ option (it re-solves GPTQ's scales for its codes)");
    if (a->loss_samples > 0 && a->method != &dsq_method_awq)
        return dsq_fail(DSQ_ERR_ARG, "--loss-samples is an AWQ option");
    if (a->finalists >= 0 && a->method != &dsq_method_awq) return dsq_fail(DSQ_ERR_ARG, "--finalists is an AWQ option");
    if (a->loss_samples > a->n_samples)
        return dsq_fail(DSQ_ERR_ARG, "--loss-samples %d exceeds --n-samples %d", a->loss_samples, a->n_samples);
    return DSQ_OK;
}

/* ---- the run ---- */

typedef struct results {
    dsq_seq_report rep;
    dsq_calib_set calib;
    double ppl_base, ppl_quant;
    const char *eval_source;
    int64_t n_bad;
    long *layer_rss_kb; /* [n_layers]: peak RSS as each layer was done (0: not reached) */
    int64_t n_layers;
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
    o->q.grid = (dsq_intq_grid)a->grid;
    o->skip_indivisible = a->skip;
    o->damp = a->damp;
    o->act_order = a->act_order;
    o->static_groups = a->static_groups;
    o->refit = a->refit > 0;
    o->threads = a->threads;
    o->awq_loss_samples = a->loss_samples;
    if (a->finalists >= 0) o->awq.finalists = a->finalists;
    o->bf16 = a->compute == 1 || (a->compute < 0 && dsq_gemm_bf16_preferred());
    o->keep_fake_quant = a->eval;
    o->expert_calib = a->expert_calib == 1 ? DSQ_EXPERT_CALIB_ALL : DSQ_EXPERT_CALIB_ROUTED;
    o->expert_min_tokens = a->expert_min_tokens;
    return DSQ_OK;
}

/* Whether the run calibrates (RTN does only for a weighted grid). */
static bool uses_data(const qargs *a)
{
    dsq_seq_opts o;
    seq_opts(a, &o);
    return dsq_method_needs_data_for(a->method, &o);
}

static dsq_status quantize_into(const qargs *a, dsq_model *m, const dsq_tokenizer *tok, dsq_outdir *d, results *res,
                                dsq_seq_keep **keep)
{
    dsq_seq_opts o;
    DSQ_TRY(seq_opts(a, &o));
    DSQ_TRY(dsq_seq_check_groups(m, &o.q, a->skip, &res->n_bad));
    res->n_layers = m->arch.n_layers;
    res->layer_rss_kb = calloc((size_t)(res->n_layers > 0 ? res->n_layers : 1), sizeof *res->layer_rss_kb);
    if (!res->layer_rss_kb) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    o.layer_rss_kb = res->layer_rss_kb;
    bool data = dsq_method_needs_data_for(a->method, &o);
    if (data) {
        dsq_calib_opts co = {a->calib, a->n_samples, a->seqlen, a->seed};
        DSQ_TRY(dsq_calib_load(&co, tok, &res->calib));
        DSQ_LOGI("calibration: %d x %d tokens from %s", res->calib.n_samples, res->calib.seqlen, res->calib.path);
    }
    dsq_int_spec spec = {.format = (dsq_int_format)a->fmt,
                         .bits = a->bits,
                         .group = a->group,
                         .sym = a->sym != 0,
                         .act_order = a->act_order,
                         .static_groups = a->static_groups,
                         .damp = a->damp,
                         .grid = (dsq_intq_grid)a->grid};
    if (a->grid != DSQ_INTQ_GRID_MINMAX && a->fmt == DSQ_INT_FORMAT_AWQ)
        DSQ_LOGI("--format awq has no config key for the group grid; %s is not recorded in the folder",
                 dsq_intq_grid_get((dsq_intq_grid)a->grid)->name);
    return dsq_int_export(m, data ? &res->calib : NULL, &o, &spec, d, &res->rep, keep);
}

static void print_results(const qargs *a, const results *r)
{
    if (!a->json) {
        printf("%s: %lld linears quantized to %d-bit groups of %d (%s), %lld left unquantized, %.1f s%s, peak RSS "
               "%ld MiB\n",
               a->method->name, (long long)r->rep.n_quantized, a->bits, a->group,
               dsq_int_format_name((dsq_int_format)a->fmt), (long long)r->rep.n_skipped, r->rep.seconds,
               !uses_data(a) ? ""
               : r->rep.bf16 ? " (bf16 passes)"
                             : " (f32 passes)",
               r->rep.peak_rss_kb / 1024);
        if (r->rep.moe_experts)
            printf("experts: %lld in %lld MoE layers; calibration tokens per expert min %lld, median %lld, max %lld; "
                   "%lld under %d\n",
                   (long long)r->rep.moe_experts, (long long)r->rep.moe_layers, (long long)r->rep.moe_tok_min,
                   (long long)r->rep.moe_tok_median, (long long)r->rep.moe_tok_max, (long long)r->rep.moe_below,
                   a->expert_min_tokens > 0 ? a->expert_min_tokens : DSQ_EXPERT_MIN_TOKENS_DEFAULT);
        printf("wrote %s\n", a->out);
        if (a->eval)
            printf("WikiText-2 PPL (hf protocol, ctx %d): base %.4f, quantized %.4f (%s)\n", a->eval_ctx, r->ppl_base,
                   r->ppl_quant, r->eval_source);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", a->method->name);
    cJSON_AddStringToObject(o, "format", dsq_int_format_name((dsq_int_format)a->fmt));
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "output", a->out);
    cJSON_AddNumberToObject(o, "bits", a->bits);
    cJSON_AddNumberToObject(o, "group_size", a->group);
    cJSON_AddBoolToObject(o, "sym", a->sym != 0);
    if (a->method != &dsq_method_awq) /* AWQ searches its own clipping */
        cJSON_AddStringToObject(o, "grid", dsq_intq_grid_get((dsq_intq_grid)a->grid)->name);
    if (a->method == &dsq_method_gptq) cJSON_AddBoolToObject(o, "refit", a->refit > 0);
    cJSON_AddNumberToObject(o, "n_quantized", (double)r->rep.n_quantized);
    cJSON_AddNumberToObject(o, "n_unquantized", (double)r->rep.n_skipped);
    if (uses_data(a)) {
        cJSON_AddStringToObject(o, "calib", r->calib.path);
        cJSON_AddNumberToObject(o, "n_samples", r->calib.n_samples);
        cJSON_AddNumberToObject(o, "seqlen", r->calib.seqlen);
        cJSON_AddNumberToObject(o, "calib_text_tokens", (double)r->calib.n_text_tokens);
        /* where each window starts in the tokenized text: lets another tool calibrate on the same tokens */
        cJSON *st = cJSON_AddArrayToObject(o, "calib_starts");
        for (int i = 0; st && r->calib.starts && i < r->calib.n_samples; i++)
            cJSON_AddItemToArray(st, cJSON_CreateNumber((double)r->calib.starts[i]));
    }
    if (uses_data(a)) cJSON_AddStringToObject(o, "compute", r->rep.bf16 ? "bf16" : "f32");
    if (r->rep.moe_experts) {
        cJSON *c = cJSON_AddObjectToObject(o, "expert_coverage");
        cJSON_AddStringToObject(c, "expert_calib", a->expert_calib == 1 ? "all" : "routed");
        cJSON_AddNumberToObject(c, "min_tokens",
                                a->expert_min_tokens > 0 ? a->expert_min_tokens : DSQ_EXPERT_MIN_TOKENS_DEFAULT);
        cJSON_AddNumberToObject(c, "moe_layers", (double)r->rep.moe_layers);
        cJSON_AddNumberToObject(c, "experts", (double)r->rep.moe_experts);
        cJSON_AddNumberToObject(c, "tokens_min", (double)r->rep.moe_tok_min);
        cJSON_AddNumberToObject(c, "tokens_median", (double)r->rep.moe_tok_median);
        cJSON_AddNumberToObject(c, "tokens_max", (double)r->rep.moe_tok_max);
        cJSON_AddNumberToObject(c, "experts_below_min", (double)r->rep.moe_below);
    }
    cJSON_AddNumberToObject(o, "seconds", r->rep.seconds);
    cJSON_AddNumberToObject(o, "peak_rss_mib", (double)r->rep.peak_rss_kb / 1024.0);
    dsq_cli_json_layer_rss(o, r->layer_rss_kb, (long long)r->n_layers);
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
    r->eval_source = "in-memory dequantized weights";
    return eval_ppl(m, tok, a, &r->ppl_quant);
}

static dsq_status run(const qargs *a)
{
    DSQ_TRY(check_args(a));
    if (a->act_order && !a->desc_act)
        DSQ_LOGI("--act-order: GPTQ runs in act order with static groups, written with desc_act false and no g_idx "
                 "(vLLM loads it; --desc-act writes the g_idx layout instead)");
    results r;
    memset(&r, 0, sizeof r);
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_outdir *d = NULL;
    dsq_seq_keep *keep = NULL;
    dsq_status s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_block_require(m->block, &m->arch, DSQ_BLOCK_CAN_CALIBRATE, a->model);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK && dsq_exists(a->out) && !a->force)
        s = dsq_fail(DSQ_ERR_EXISTS, "%s exists (pass --force to replace it)", a->out);
    if (s == DSQ_OK) s = dsq_outdir_open(a->out, a->force, &d);
    if (s == DSQ_OK && a->eval) s = eval_ppl(m, tok, a, &r.ppl_base);
    if (s == DSQ_OK) s = quantize_into(a, m, tok, d, &r, &keep);
    if (s == DSQ_OK)
        s = dsq_outdir_commit(d);
    else
        dsq_outdir_abort(d);
    if (s == DSQ_OK && a->eval) s = eval_result(a, m, tok, &r);
    if (s == DSQ_OK) print_results(a, &r);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
    dsq_tokenizer_free(tok);
    dsq_calib_free(&r.calib);
    free(r.layer_rss_kb);
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
