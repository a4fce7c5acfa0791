/* dsquant smoothquant | fp8: the 8-bit methods (SmoothQuant W8A8 INT8 and
 * FP8 E4M3) into a Hugging Face folder through the layer-by-layer driver and
 * the INT writer (calibration/int_export.h). One file for both: they share
 * the calibration flags, the output checks and the report. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/dataset.h"
#include "calibration/int_export.h"
#include "calibration/sequential.h"
#include "calibration/smooth.h"
#include "cli/commands.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/block.h"
#include "formats/pack_w8.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

static const char g_usage_sq[] = "usage: dsquant smoothquant MODEL -o OUT [options]\n"
                                 "\n"
                                 "SmoothQuant W8A8: migrates activation outliers into the weights (per input\n"
                                 "channel s = max|X|^alpha / max|W|^(1-alpha), folded into the RMSNorms), then\n"
                                 "quantizes every linear to per-channel symmetric INT8 with INT8 activations, and\n"
                                 "writes a compressed-tensors (int-quantized) folder that vLLM loads.\n"
                                 "\n"
                                 "options:\n"
                                 "  -o, --output DIR       output folder (refused when it exists, unless --force)\n"
                                 "  --alpha A|auto         migration strength in [0, 1] (default per family: Llama\n"
                                 "                         0.85, Mistral 0.8, others 0.5); auto: per layer and group,\n"
                                 "                         the alpha of 0, 0.05, ..., 1 with the least W8A8 output\n"
                                 "                         error on the calibration tokens\n"
                                 "  --smooth-all           also smooth up -> down, and v -> o when the model has no\n"
                                 "                         GQA (v's output width equals o's input width)\n"
                                 "  --no-smooth            plain W8A8 without smoothing (the baseline)\n"
                                 "  --weights rtn|gptq     weight rounding: round to nearest (default) or GPTQ at\n"
                                 "                         8 bits per channel\n"
                                 "  --act dynamic|static   activation scales: per token at run time (default) or one\n"
                                 "                         per tensor from max|x| over the calibration tokens\n"
                                 "  --format F             compressed-tensors (the only format for INT8)\n"
                                 "  --calib NAME|FILE      calibration text: tinyshakespeare (default), gutenberg,\n"
                                 "                         a registered dataset, or a text / .jsonl file (.zst ok)\n"
                                 "  --n-samples N          calibration windows (default 128)\n"
                                 "  --seqlen L             tokens per window (default 512)\n"
                                 "  --seed S               window sampling seed (default 0)\n"
                                 "  --threads T            CPU threads (default: all)\n"
                                 "  --force                replace OUT when it exists\n"
                                 "  --json                 one JSON object on stdout\n"
                                 "  -h, --help             this text\n";

static const char g_usage_fp8[] =
    "usage: dsquant fp8 MODEL -o OUT [options]\n"
    "\n"
    "FP8 E4M3 quantization of every linear by round to nearest, into a folder that\n"
    "vLLM loads.\n"
    "\n"
    "options:\n"
    "  -o, --output DIR       output folder (refused when it exists, unless --force)\n"
    "  --scheme S             dynamic: per-channel weights, per-token activations at run\n"
    "                         time (default); static: per-tensor weights and a per-tensor\n"
    "                         input scale from calibration; block: 128x128 weight blocks,\n"
    "                         activations per token and 128 channels; weight-only:\n"
    "                         per-channel FP8 weights, activations left in 16 bits\n"
    "  --format F             compressed-tensors (default; every scheme), fp8 (vLLM's\n"
    "                         own: static, block), modelopt (static)\n"
    "  --kv-cache-fp8         also per-layer k_scale / v_scale (max |K| after RoPE and\n"
    "                         max |V| over the calibration tokens, / 448)\n"
    "  --partial-blocks       block: write linears whose in_features (or, for q/k/v and\n"
    "                         gate/up, out_features) 128 does not divide, the last group\n"
    "                         partial, as llm-compressor does; transformers and dsquant\n"
    "                         read it, vLLM refuses it (default: such a linear is an error)\n"
    "  --calib NAME|FILE      calibration text (static and --kv-cache-fp8 only)\n"
    "  --n-samples N          calibration windows (default 128)\n"
    "  --seqlen L             tokens per window (default 512)\n"
    "  --threads T            CPU threads (default: all)\n"
    "  --force                replace OUT when it exists\n"
    "  --json                 one JSON object on stdout\n"
    "  -h, --help             this text\n";

typedef struct wargs {
    const dsq_method *method;
    bool sq; /* smoothquant (else fp8) */
    const char *model, *out, *calib, *scheme_name;
    int n_samples, seqlen, threads, fmt;
    uint64_t seed;
    double alpha; /* DSQ_SQ_ALPHA_FAMILY / _AUTO or [0, 1] */
    bool smooth_all, no_smooth, gptq, act_static, kv_fp8, partial_blocks, force, json;
    dsq_w8_scheme scheme;
} wargs;

static int bad_value(const wargs *a, const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "dsquant: error: %s: %s \"%s\": %s\n", a->method->name, opt, val ? val : "", want);
    return 2;
}

static int parse_alpha(wargs *a, const char *val)
{
    if (val && !strcmp(val, "auto")) {
        a->alpha = DSQ_SQ_ALPHA_AUTO;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    double v = val ? strtod(val, &end) : NAN;
    if (!val || end == val || *end || errno || !(v >= 0.0 && v <= 1.0))
        return bad_value(a, "--alpha", val, "takes a number in [0, 1] or auto");
    a->alpha = v;
    return 0;
}

static int parse_scheme(wargs *a, const char *val)
{
    a->scheme_name = val;
    if (val && !strcmp(val, "dynamic"))
        a->scheme = dsq_w8_scheme_fp8_dynamic();
    else if (val && !strcmp(val, "static"))
        a->scheme = dsq_w8_scheme_fp8_static();
    else if (val && !strcmp(val, "block"))
        a->scheme = dsq_w8_scheme_fp8_block();
    else if (val && !strcmp(val, "weight-only"))
        a->scheme = dsq_w8_scheme_fp8_weight_only();
    else
        return bad_value(a, "--scheme", val, "takes dynamic, static, block or weight-only");
    return 0;
}

static int parse_choice(wargs *a, const char *opt, const char *val)
{
    if (!strcmp(opt, "--weights")) {
        if (val && (!strcmp(val, "rtn") || !strcmp(val, "gptq")))
            a->gptq = !strcmp(val, "gptq");
        else
            return bad_value(a, opt, val, "takes rtn or gptq");
    } else if (!strcmp(opt, "--act")) {
        if (val && (!strcmp(val, "dynamic") || !strcmp(val, "static")))
            a->act_static = !strcmp(val, "static");
        else
            return bad_value(a, opt, val, "takes dynamic or static");
    } else if (!strcmp(opt, "--format")) {
        int f = val && !strcmp(val, "ct") ? DSQ_INT_FORMAT_CT : dsq_int_format_parse(val);
        bool known = f == DSQ_INT_FORMAT_CT || (!a->sq && (f == DSQ_INT_FORMAT_FP8 || f == DSQ_INT_FORMAT_MODELOPT));
        if (!known)
            return bad_value(a, opt, val,
                             a->sq ? "takes compressed-tensors" : "takes compressed-tensors, fp8 or modelopt");
        a->fmt = f;
    } else if (!strcmp(opt, "--scheme")) {
        return parse_scheme(a, val);
    } else {
        return parse_alpha(a, val);
    }
    return 0;
}

/* Value options: which the command takes, and their parsing. */
static bool takes_value(const wargs *a, const char *o)
{
    static const char *const both[] = {"-o", "--output", "--calib", "--format", "--n-samples", "--seqlen", "--threads"};
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++)
        if (!strcmp(o, both[i])) return true;
    if (a->sq) return !strcmp(o, "--alpha") || !strcmp(o, "--weights") || !strcmp(o, "--act") || !strcmp(o, "--seed");
    return !strcmp(o, "--scheme");
}

static int parse_value_opt(int argc, char **argv, int *i, wargs *a)
{
    const char *opt = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    (*i)++;
    if (!val) return fprintf(stderr, "dsquant: error: %s needs a value\n", opt), 2;
    long long v;
    if (!strcmp(opt, "-o") || !strcmp(opt, "--output"))
        a->out = val;
    else if (!strcmp(opt, "--calib"))
        a->calib = val;
    else if (!strcmp(opt, "--seed")) {
        if ((v = dsq_cli_parse_int(opt, val, 0, (1LL << 62))) < 0) return 2;
        a->seed = (uint64_t)v;
    } else if (!strcmp(opt, "--n-samples") || !strcmp(opt, "--seqlen") || !strcmp(opt, "--threads")) {
        if ((v = dsq_cli_parse_int(opt, val, !strcmp(opt, "--seqlen") ? 2 : 1, 1 << 24)) < 0) return 2;
        if (opt[2] == 'n')
            a->n_samples = (int)v;
        else if (opt[2] == 's')
            a->seqlen = (int)v;
        else
            a->threads = (int)v;
    } else
        return parse_choice(a, opt, val);
    return 0;
}

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    wargs *a = user;
    const char *opt = argv[*i];
    if (takes_value(a, opt)) return parse_value_opt(argc, argv, i, a);
    if (!strcmp(opt, "--force"))
        a->force = true;
    else if (!strcmp(opt, "--json"))
        a->json = true;
    else if (a->sq && !strcmp(opt, "--smooth-all"))
        a->smooth_all = true;
    else if (a->sq && !strcmp(opt, "--no-smooth"))
        a->no_smooth = true;
    else if (!a->sq && !strcmp(opt, "--kv-cache-fp8"))
        a->kv_fp8 = true;
    else if (!a->sq && !strcmp(opt, "--partial-blocks"))
        a->partial_blocks = true;
    else
        return dsq_cli_usage_error(argv[0], "unknown option ", opt);
    return 0;
}

static int parse(int argc, char **argv, wargs *a)
{
    a->sq = !strcmp(argv[0], "smoothquant");
    a->method = a->sq ? &dsq_method_smoothquant : &dsq_method_fp8;
    a->n_samples = 128, a->seqlen = a->method->default_seqlen, a->fmt = DSQ_INT_FORMAT_CT;
    a->alpha = DSQ_SQ_ALPHA_FAMILY;
    a->scheme = a->sq ? dsq_w8_scheme_w8a8(false) : dsq_w8_scheme_fp8_dynamic();
    a->scheme_name = "dynamic";
    int n_pos,
        rc = dsq_cli_walk(argc, argv, argv[0], a->sq ? g_usage_sq : g_usage_fp8, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc;
    if (!a->model || !a->out) return dsq_cli_usage_error(argv[0], !a->model ? "missing MODEL" : "missing -o OUT", NULL);
    if (a->sq) a->scheme = dsq_w8_scheme_w8a8(a->act_static);
    if (a->sq && a->no_smooth && (a->smooth_all || a->alpha != DSQ_SQ_ALPHA_FAMILY))
        return dsq_cli_usage_error(argv[0], "--no-smooth takes neither --alpha nor --smooth-all", NULL);
    if (a->partial_blocks && a->scheme.wgran != DSQ_W8_W_BLOCK)
        return dsq_cli_usage_error(argv[0], "--partial-blocks takes --scheme block", NULL);
    return 0;
}

/* ---- the run ---- */

typedef struct results {
    dsq_seq_report rep;
    dsq_calib_set calib;
    bool data;
    float *alphas;      /* [n_layers x DSQ_BLOCK_MAX_GROUPS] */
    long *layer_rss_kb; /* [n_layers]: peak RSS as each layer was done */
    int n_layers;
    const dsq_block_desc *block;
    double alpha_default;
} results;

static void seq_opts(const wargs *a, dsq_seq_opts *o, results *r)
{
    *o = dsq_seq_w8_default_opts(a->method);
    o->w8.scheme = a->scheme;
    o->w8.smooth = a->sq && !a->no_smooth;
    o->w8.smooth_all = a->smooth_all;
    o->w8.alpha = a->alpha;
    o->w8.gptq = a->gptq;
    o->w8.kv_fp8 = a->kv_fp8;
    o->w8.alpha_out = r->alphas;
    o->threads = a->threads;
    o->bf16 = dsq_gemm_bf16_preferred(); /* as --compute auto of rtn/awq/gptq */
}

static dsq_status quantize_into(const wargs *a, dsq_model *m, const dsq_tokenizer *tok, dsq_outdir *d, results *r)
{
    r->n_layers = (int)m->arch.n_layers;
    r->block = m->block;
    r->alpha_default = dsq_sq_default_alpha(&m->arch);
    if (a->sq && !(r->alphas = calloc((size_t)r->n_layers * DSQ_BLOCK_MAX_GROUPS, sizeof *r->alphas)))
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    if (!(r->layer_rss_kb = calloc((size_t)(r->n_layers > 0 ? r->n_layers : 1), sizeof *r->layer_rss_kb)))
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    dsq_seq_opts o;
    seq_opts(a, &o, r);
    o.layer_rss_kb = r->layer_rss_kb;
    r->data = dsq_method_needs_data_for(a->method, &o);
    if (r->data) {
        dsq_calib_opts co = {a->calib, a->n_samples, a->seqlen, a->seed};
        DSQ_TRY(dsq_calib_load(&co, tok, &r->calib));
        DSQ_LOGI("calibration: %d x %d tokens from %s", r->calib.n_samples, r->calib.seqlen, r->calib.path);
    }
    dsq_int_spec spec = {.format = (dsq_int_format)a->fmt,
                         .bits = 8,
                         .group = -1,
                         .sym = true,
                         .w8 = true,
                         .w8s = a->scheme,
                         .kv_fp8 = a->kv_fp8,
                         .partial_blocks = a->partial_blocks};
    return dsq_int_export(m, r->data ? &r->calib : NULL, &o, &spec, d, &r->rep, NULL);
}

static cJSON *alphas_json(const results *r)
{
    cJSON *arr = cJSON_CreateArray();
    for (int l = 0; arr && r->alphas && l < r->n_layers; l++) {
        cJSON *o = cJSON_CreateObject();
        for (int g = 0; o && g < r->block->n_groups; g++) {
            float v = r->alphas[(size_t)l * DSQ_BLOCK_MAX_GROUPS + (size_t)g];
            if (!isnan(v)) cJSON_AddNumberToObject(o, r->block->groups[g].name, round((double)v * 1e6) / 1e6);
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static void add_calib(cJSON *o, const results *r)
{
    cJSON_AddStringToObject(o, "calib", r->calib.path);
    cJSON_AddNumberToObject(o, "n_samples", r->calib.n_samples);
    cJSON_AddNumberToObject(o, "seqlen", r->calib.seqlen);
    cJSON_AddStringToObject(o, "compute", r->rep.bf16 ? "bf16" : "f32");
    cJSON *st = cJSON_AddArrayToObject(o, "calib_starts");
    for (int i = 0; st && r->calib.starts && i < r->calib.n_samples; i++)
        cJSON_AddItemToArray(st, cJSON_CreateNumber((double)r->calib.starts[i]));
}

static void add_smooth(cJSON *o, const wargs *a, const results *r)
{
    cJSON_AddBoolToObject(o, "smooth", !a->no_smooth);
    cJSON_AddBoolToObject(o, "smooth_all", a->smooth_all);
    cJSON_AddStringToObject(o, "weights", a->gptq ? "gptq" : "rtn");
    cJSON_AddStringToObject(o, "act", a->act_static ? "static" : "dynamic");
    if (a->no_smooth) return;
    if (a->alpha == DSQ_SQ_ALPHA_AUTO) {
        cJSON_AddStringToObject(o, "alpha", "auto");
        cJSON_AddNumberToObject(o, "alpha_start", r->alpha_default);
        cJSON_AddNumberToObject(o, "w8a8_error_at_start", r->rep.sq_err_default);
        cJSON_AddNumberToObject(o, "w8a8_error_chosen", r->rep.sq_err_best);
    } else {
        cJSON_AddNumberToObject(o, "alpha", a->alpha >= 0 ? a->alpha : r->alpha_default);
    }
    cJSON_AddNumberToObject(o, "n_smoothed", (double)r->rep.n_smoothed);
    cJSON_AddItemToObject(o, "alphas", alphas_json(r));
}

static void print_results(const wargs *a, const results *r)
{
    char desc[96];
    dsq_w8_scheme_describe(&a->scheme, desc, sizeof desc);
    if (!a->json) {
        printf("%s: %lld linears quantized (%s, %s), %lld left unquantized, %.1f s, peak RSS %ld MiB\n",
               a->method->name, (long long)r->rep.n_quantized, desc, dsq_int_format_name((dsq_int_format)a->fmt),
               (long long)r->rep.n_skipped, r->rep.seconds, r->rep.peak_rss_kb / 1024);
        if (a->sq && !a->no_smooth)
            printf("smoothed %lld groups%s\n", (long long)r->rep.n_smoothed,
                   a->alpha == DSQ_SQ_ALPHA_AUTO ? " (alpha auto: the chosen alphas are in the log and --json)" : "");
        printf("wrote %s\n", a->out);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", a->method->name);
    cJSON_AddStringToObject(o, "format", dsq_int_format_name((dsq_int_format)a->fmt));
    cJSON_AddStringToObject(o, "scheme", a->sq ? (a->act_static ? "w8a8-static" : "w8a8-dynamic") : a->scheme_name);
    cJSON_AddStringToObject(o, "scheme_description", desc);
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "output", a->out);
    cJSON_AddNumberToObject(o, "n_quantized", (double)r->rep.n_quantized);
    cJSON_AddNumberToObject(o, "n_unquantized", (double)r->rep.n_skipped);
    if (!a->sq) cJSON_AddBoolToObject(o, "kv_cache_fp8", a->kv_fp8);
    if (!a->sq) cJSON_AddBoolToObject(o, "partial_blocks", a->partial_blocks);
    if (a->sq) add_smooth(o, a, r);
    if (r->data) add_calib(o, r);
    cJSON_AddNumberToObject(o, "seconds", r->rep.seconds);
    cJSON_AddNumberToObject(o, "peak_rss_mib", (double)r->rep.peak_rss_kb / 1024.0);
    dsq_cli_json_layer_rss(o, r->layer_rss_kb, r->n_layers);
    char *t = cJSON_Print(o);
    if (t) puts(t);
    free(t);
    cJSON_Delete(o);
}

static dsq_status run(const wargs *a)
{
    DSQ_TRY(dsq_w8_format_check((dsq_int_format)a->fmt, &a->scheme)); /* one line naming the formats that can */
    if (dsq_exists(a->out) && !a->force)
        return dsq_fail(DSQ_ERR_EXISTS, "%s exists (pass --force to replace it)", a->out);
    results r;
    memset(&r, 0, sizeof r);
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_outdir *d = NULL;
    dsq_status s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_block_require(m->block, &m->arch, DSQ_BLOCK_CAN_CALIBRATE, a->model);
    if (s == DSQ_OK && a->sq && !a->no_smooth) s = dsq_sq_check_model(&m->arch, m->block);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK) s = dsq_outdir_open(a->out, a->force, &d);
    if (s == DSQ_OK) s = quantize_into(a, m, tok, d, &r);
    if (s == DSQ_OK)
        s = dsq_outdir_commit(d);
    else
        dsq_outdir_abort(d);
    if (s == DSQ_OK) print_results(a, &r);
    dsq_model_close(m);
    dsq_tokenizer_free(tok);
    dsq_calib_free(&r.calib);
    free(r.alphas);
    free(r.layer_rss_kb);
    return s;
}

int dsq_cmd_w8(int argc, char **argv)
{
    wargs a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a) == DSQ_OK ? 0 : dsq_cli_fail();
}
