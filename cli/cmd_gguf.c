/* dsquant gguf: llama-quantize's job, from a GGUF file or a HF folder. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "calibration/gguf_calib.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "eval/budget.h"
#include "formats/gguf_quantize.h"
#include "formats/imatrix.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "quantizers/mixes.h"

static const char g_usage[] =
    "usage: dsquant gguf IN -o OUT.gguf --type TYPE [--imatrix FILE] [--pure] [--leave-output]\n"
    "                    [--output-type T] [--token-embedding-type T] [--threads N] [--force]\n"
    "                    [--allow-requantize] [--json]\n"
    "                    [--method gptq|awq [--calib SRC] [--n-samples N] [--seqlen L] ...]\n"
    "                    [--target-bpw B | --target-size SIZE | --max-kld K] [--candidates LIST]\n"
    "\n"
    "Quantizes a model to GGUF as llama-quantize does: the same per-tensor types, the\n"
    "same bytes, tensors in llama.cpp's order. IN is a GGUF file (any architecture) or a\n"
    "Hugging Face folder, read directly (no intermediate F16/F32 file).\n"
    "\n"
    "options:\n"
    "  -o, --output PATH          the GGUF file to write (atomically)\n"
    "  --type TYPE                Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L\n"
    "                             Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS F16 BF16 F32\n"
    "                             (aliases Q3_K Q4_K Q5_K, or the ftype number)\n"
    "  --imatrix FILE             importance matrix (llama-imatrix .dat or GGUF)\n"
    "  --pure                     no mix: every quantized tensor gets TYPE's default type\n"
    "  --leave-output             keep output.weight unquantized\n"
    "  --output-type T            ggml type for output.weight (q8_0, q6_K, f16, ...)\n"
    "  --token-embedding-type T   ggml type for token_embd.weight\n"
    "  --threads N                quantization threads (default: one per core)\n"
    "  --force                    replace OUT if it exists\n"
    "  --allow-requantize         allow quantized input tensors to be quantized again\n"
    "  --json                     print a summary object on stdout\n"
    "\n"
    "error-compensated blocks (same types and size, a standard GGUF):\n"
    "  --method gptq              quantize the decoder linears by GPTQ into each one's\n"
    "                             planned type: the type's own quantizer picks every\n"
    "                             block's scales, GPTQ's feedback through the inverse\n"
    "                             Hessian rounds the codes (importance from --imatrix\n"
    "                             when given, else the Hessian's diagonal)\n"
    "  --method awq               AWQ's per-channel scale search with each linear's\n"
    "                             planned type as the quantizer, the scales folded into\n"
    "                             the norms and the producing linears; each block then\n"
    "                             quantized with the importance of its scaled columns\n"
    "                             (--imatrix when given, else mean x^2 of the\n"
    "                             calibration inputs)\n"
    "  --calib NAME|FILE          calibration text (default tinyshakespeare)\n"
    "  --n-samples N              calibration windows (default 128)\n"
    "  --seqlen L                 tokens per window (default 512)\n"
    "  --seed S                   window sampling seed (default 0)\n"
    "  --damp F                   dampening fraction of mean diag(H) (default 0.01)\n"
    "  --act-order                gptq: blocks in decreasing Hessian-diagonal order\n"
    "  --loss-samples N           awq: windows the scale search's loss runs on\n"
    "                             (default: all, as AutoAWQ)\n"
    "  --finalists K              awq: grid points run on every loss window after all\n"
    "                             were run on the first eighth (default 4; 0: every\n"
    "                             point on every window, as AutoAWQ)\n"
    "  --compute P                bf16, f32 or auto (default: bf16 with AMX-BF16)\n"
    "\n"
    "budgets (each tensor's type chosen from the candidates by measured sensitivity):\n"
    "  --target-bpw B             at most B bits per weight, least predicted KLD\n"
    "  --target-size SIZE         a file of at most SIZE bytes (K/M/G: 1024-based,\n"
    "                             KB/MB/GB: 1000-based), least predicted KLD\n"
    "  --max-kld K                the smallest file whose KLD on the calibration chunks\n"
    "                             is at most K (checked on the file written)\n"
    "  --candidates LIST          types to choose from (default q2_K,q3_K,q4_K,q5_K,q6_K,\n"
    "                             iq4_xs,q4_0,q4_1,q5_0,q5_1,iq4_nl,q8_0; each tensor takes\n"
    "                             those whose block divides its rows)\n"
    "  --budget-chunks N          calibration chunks for the KLDs (default 8; text: --calib)\n"
    "  --budget-ctx L             tokens per chunk (default 256)\n"
    "  TYPE's mix decides which tensors are quantized (and keeps the rest); --imatrix\n"
    "  weights the errors and the quantizers, as without a budget.\n"
    "\n"
    "  -v, -q                     more / less logging\n"
    "  -h, --help                 this text\n"
    "\n"
    "llama-quantize's --leave-output-tensor and --output-tensor-type are accepted too.\n";

typedef struct gguf_args {
    const char *in, *out, *type, *method;
    dsq_gguf_quantize_options opt;
    dsq_gguf_calib_opts co;
    int compute; /* -1 auto, 0 f32, 1 bf16 */
    bool json, calib_opts;
    int budget; /* -1 none, else a dsq_budget_kind */
    double target;
    dsq_budget_opts bo;
    dsq_type cands[DSQ_BUDGET_MAX_CANDIDATES];
} gguf_args;

static int usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "dsquant: error: gguf: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (see dsquant gguf --help)\n");
    return 2;
}

static bool takes_value(const char *a)
{
    static const char *const opts[] = {"-o",
                                       "--output",
                                       "--type",
                                       "--imatrix",
                                       "--output-type",
                                       "--output-tensor-type",
                                       "--threads",
                                       "--token-embedding-type",
                                       "--method",
                                       "--calib",
                                       "--n-samples",
                                       "--seqlen",
                                       "--seed",
                                       "--damp",
                                       "--loss-samples",
                                       "--finalists",
                                       "--compute",
                                       "--target-bpw",
                                       "--target-size",
                                       "--max-kld",
                                       "--candidates",
                                       "--budget-chunks",
                                       "--budget-ctx"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(a, opts[i])) return true;
    return false;
}

static int parse_ggml_type(const char *opt, const char *val, dsq_type *out)
{
    if (dsq_type_from_name(val, out) == DSQ_OK && dsq_type_is_ggml(*out)) return -1;
    fprintf(stderr, "dsquant: error: %s: unknown ggml type \"%s\" (e.g. q8_0, q6_K, q4_K, f16)\n", opt, val);
    return 2;
}

/* The calibration options (--method's); returns -1 to go on, else the exit status. */
static int parse_calib(const char *arg, const char *val, gguf_args *a)
{
    long long n;
    if (!strcmp(arg, "--method")) {
        a->method = val;
        return -1;
    }
    a->calib_opts = true;
    if (!strcmp(arg, "--calib")) {
        a->co.calib.source = val;
    } else if (!strcmp(arg, "--damp")) {
        char *end = NULL;
        a->co.damp = strtod(val, &end);
        if (!end || *end || !(a->co.damp > 0 && a->co.damp < 1))
            return usage_error("--damp takes a fraction in (0, 1), not \"%s\"", val);
    } else if (!strcmp(arg, "--compute")) {
        a->compute = !strcmp(val, "auto") ? -1 : !strcmp(val, "f32") ? 0 : !strcmp(val, "bf16") ? 1 : -2;
        if (a->compute == -2) return usage_error("--compute takes auto, f32 or bf16, not \"%s\"", val);
    } else if (!strcmp(arg, "--seed")) {
        if ((n = dsq_cli_parse_int(arg, val, 0, 1LL << 62)) < 0) return 2;
        a->co.calib.seed = (uint64_t)n;
    } else {
        long long lo = !strcmp(arg, "--seqlen") ? 2 : !strcmp(arg, "--finalists") ? 0 : 1;
        if ((n = dsq_cli_parse_int(arg, val, lo, 1 << 24)) < 0) return 2;
        if (!strcmp(arg, "--n-samples"))
            a->co.calib.n_samples = (int)n;
        else if (!strcmp(arg, "--loss-samples"))
            a->co.loss_samples = (int)n;
        else if (!strcmp(arg, "--finalists"))
            a->co.finalists = n ? (int)n : -1;
        else
            a->co.calib.seqlen = (int)n;
    }
    return -1;
}

/* "80M", "1.5GB", "123456": bytes (K/M/G/T 1024-based, KB/MB/GB/TB 1000-based, KiB.. too). */
static bool parse_size(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || !(v > 0)) return false;
    static const char *const units = "KMGT";
    const char *u = *end ? strchr(units, end[0] & ~0x20) : NULL;
    if (*end && !u) return false;
    if (u) {
        int k = (int)(u - units) + 1;
        const char *rest = end + 1;
        double base = !strcmp(rest, "") || !strcmp(rest, "iB") ? 1024.0 : (!strcmp(rest, "B") ? 1000.0 : 0);
        if (base == 0) return false;
        while (k--) v *= base;
    }
    *out = v;
    return isfinite(v);
}

/* The budget options; returns -1 to go on, else the exit status. */
static int parse_budget(const char *arg, const char *val, gguf_args *a)
{
    if (!strcmp(arg, "--candidates")) {
        if (dsq_budget_parse_candidates(val, a->cands, DSQ_BUDGET_MAX_CANDIDATES, &a->bo.n_candidates) != DSQ_OK)
            return usage_error("%s", dsq_errmsg());
        a->bo.candidates = a->cands;
        return -1;
    }
    if (!strcmp(arg, "--budget-chunks") || !strcmp(arg, "--budget-ctx")) {
        long long n = dsq_cli_parse_int(arg, val, !strcmp(arg, "--budget-ctx") ? 8 : 1, 1 << 20);
        if (n < 0) return 2;
        *(!strcmp(arg, "--budget-ctx") ? &a->bo.ctx : &a->bo.chunks) = (int)n;
        return -1;
    }
    if (a->budget >= 0) return usage_error("%s: give one of --target-bpw, --target-size, --max-kld", arg);
    char *end = NULL;
    bool ok;
    if (!strcmp(arg, "--target-size")) {
        a->budget = DSQ_BUDGET_SIZE;
        ok = parse_size(val, &a->target);
    } else {
        a->budget = !strcmp(arg, "--max-kld") ? DSQ_BUDGET_KLD : DSQ_BUDGET_BPW;
        a->target = strtod(val, &end);
        ok = end && end != val && !*end && isfinite(a->target) && a->target > 0 &&
             (a->budget != DSQ_BUDGET_BPW || a->target <= 64);
    }
    if (!ok)
        return usage_error(!strcmp(arg, "--target-size") ? "--target-size takes a size like 80M or 1.5GB, not \"%s\""
                                                         : "%s takes a positive number",
                           val);
    return -1;
}

/* Options with a value; returns -1 to go on, else the exit status. */
static int parse_valued(const char *arg, const char *val, gguf_args *a)
{
    if (!strcmp(arg, "-o") || !strcmp(arg, "--output"))
        a->out = val;
    else if (!strcmp(arg, "--type"))
        a->type = val;
    else if (!strcmp(arg, "--imatrix"))
        a->opt.imatrix_file = val;
    else if (!strcmp(arg, "--output-type") || !strcmp(arg, "--output-tensor-type"))
        return parse_ggml_type(arg, val, &a->opt.output_type);
    else if (!strcmp(arg, "--token-embedding-type"))
        return parse_ggml_type(arg, val, &a->opt.token_embd_type);
    else if (!strcmp(arg, "--threads")) {
        long long n = dsq_cli_parse_int(arg, val, 1, 4096);
        if (n < 0) return 2;
        a->opt.n_threads = (int)n;
        a->co.threads = (int)n;
    } else if (!strncmp(arg, "--target-", 9) || !strcmp(arg, "--max-kld") || !strcmp(arg, "--candidates") ||
               !strncmp(arg, "--budget-", 9)) {
        return parse_budget(arg, val, a);
    } else {
        return parse_calib(arg, val, a);
    }
    return -1;
}

static bool parse_flag(const char *arg, gguf_args *a)
{
    if (!strcmp(arg, "--pure"))
        a->opt.pure = true;
    else if (!strcmp(arg, "--leave-output") || !strcmp(arg, "--leave-output-tensor"))
        a->opt.leave_output = true;
    else if (!strcmp(arg, "--force"))
        a->opt.overwrite = true;
    else if (!strcmp(arg, "--allow-requantize"))
        a->opt.allow_requantize = true;
    else if (!strcmp(arg, "--json"))
        a->json = true;
    else if (!strcmp(arg, "--act-order"))
        a->co.act_order = a->calib_opts = true;
    else
        return false;
    return true;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, gguf_args *a)
{
    for (int i = 1; i < argc; i++) {
        int exit_now;
        const char *arg = argv[i];
        if (takes_value(arg)) {
            if (i + 1 >= argc) return usage_error("%s needs a value", arg);
            int rc = parse_valued(arg, argv[++i], a);
            if (rc >= 0) return rc;
        } else if (dsq_cli_common_opt(argc, argv, &i, g_usage, &exit_now)) {
            if (exit_now) return 0;
        } else if (parse_flag(arg, a)) {
            continue;
        } else if (arg[0] == '-' && arg[1]) {
            return usage_error("unknown option %s", arg);
        } else if (!a->in) {
            a->in = arg;
        } else {
            return usage_error("unexpected argument %s", arg);
        }
    }
    if (!a->in) return usage_error("%s", "missing input");
    if (!a->out) return usage_error("%s", "missing -o OUTPUT");
    if (!a->type) return usage_error("missing --type (valid: %s)", dsq_ftype_names());
    if (a->method && !dsq_method_find(a->method))
        return usage_error("--method %s: unknown (gptq and awq write GGUF blocks)", a->method);
    if (a->method && strcmp(a->method, "gptq") && (a->co.damp != 0.01 || a->co.act_order))
        return usage_error("--damp and --act-order are gptq's options, not %s's", a->method);
    if (a->method && strcmp(a->method, "awq") && a->co.loss_samples)
        return usage_error("--loss-samples is awq's option, not %s's", a->method);
    if (a->method && strcmp(a->method, "awq") && a->co.finalists)
        return usage_error("--finalists is awq's option, not %s's", a->method);
    bool calib_only = a->co.calib.n_samples != 128 || a->co.calib.seqlen != 512 || a->co.calib.seed != 0 ||
                      a->co.damp != 0.01 || a->co.act_order || a->compute != -1 || a->co.loss_samples ||
                      a->co.finalists;
    if (!a->method && (a->budget < 0 ? a->calib_opts : calib_only))
        return usage_error("%s", "calibration options need --method gptq or awq");
    if (a->budget < 0 && (a->bo.candidates || a->bo.chunks || a->bo.ctx))
        return usage_error("%s", "--candidates, --budget-chunks and --budget-ctx need a budget (--target-bpw, "
                                 "--target-size or --max-kld)");
    return -1;
}

static cJSON *tensor_json(const dsq_gguf_quantize_tensor *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "type_in", dsq_type_name(t->type_in));
    cJSON_AddStringToObject(o, "type_out", dsq_type_name(t->type_out));
    cJSON *ne = cJSON_AddArrayToObject(o, "ne");
    for (int d = 0; ne && d < t->n_dims; d++) cJSON_AddItemToArray(ne, cJSON_CreateNumber((double)t->ne[d]));
    cJSON_AddNumberToObject(o, "bytes_in", (double)t->bytes_in);
    cJSON_AddNumberToObject(o, "bytes_out", (double)t->bytes_out);
    cJSON_AddBoolToObject(o, "quantized", t->quantized);
    cJSON_AddBoolToObject(o, "fallback", t->fallback);
    cJSON_AddBoolToObject(o, "imatrix", t->imatrix);
    cJSON_AddBoolToObject(o, "calibrated", t->provided);
    return o;
}

static void calib_json(cJSON *o, const gguf_args *a, const dsq_gguf_calib_report *c)
{
    cJSON_AddStringToObject(o, "method", a->method);
    cJSON_AddStringToObject(o, "calib", c->calib.path);
    cJSON_AddNumberToObject(o, "n_samples", c->calib.n_samples);
    cJSON_AddNumberToObject(o, "seqlen", c->calib.seqlen);
    cJSON_AddNumberToObject(o, "damp", a->co.damp);
    cJSON_AddBoolToObject(o, "act_order", a->co.act_order);
    cJSON_AddStringToObject(o, "compute", c->seq.bf16 ? "bf16" : "f32");
    cJSON_AddNumberToObject(o, "n_calibrated", (double)c->gguf->n_provided);
    cJSON_AddNumberToObject(o, "gptq_loss", c->seq.gptq_loss);
    cJSON_AddNumberToObject(o, "calibration_seconds", c->seq.seconds);
    cJSON_AddNumberToObject(o, "peak_rss_mib", (double)c->seq.peak_rss_kb / 1024.0);
}

static int print_json(const gguf_args *a, const dsq_gguf_quantize_report *r, const dsq_gguf_calib_report *c,
                      cJSON *budget)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        cJSON_Delete(budget);
        return 1;
    }
    if (c) calib_json(o, a, c);
    cJSON_AddStringToObject(o, "input", a->in);
    cJSON_AddStringToObject(o, "output", a->out);
    cJSON_AddStringToObject(o, "type", dsq_ftype_name(r->ftype));
    cJSON_AddNumberToObject(o, "file_type", (double)r->ftype);
    cJSON_AddNumberToObject(o, "n_tensors", (double)r->n_tensors);
    cJSON_AddNumberToObject(o, "n_quantized", r->n_quantized);
    cJSON_AddNumberToObject(o, "n_copied", r->n_copied);
    cJSON_AddNumberToObject(o, "n_fallback", r->n_fallback);
    cJSON_AddNumberToObject(o, "n_imatrix", r->n_imatrix);
    cJSON_AddNumberToObject(o, "n_elements", (double)r->n_elements);
    cJSON_AddNumberToObject(o, "bytes_in", (double)r->bytes_in);
    cJSON_AddNumberToObject(o, "bytes_out", (double)r->bytes_out);
    cJSON_AddNumberToObject(o, "file_bytes", (double)r->file_bytes);
    cJSON_AddNumberToObject(o, "bits_per_weight",
                            r->n_elements ? (double)r->bytes_out * 8.0 / (double)r->n_elements : 0.0);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    if (budget) cJSON_AddItemToObject(o, "budget", budget);
    cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
    for (size_t i = 0; arr && i < r->n_tensors; i++) cJSON_AddItemToArray(arr, tensor_json(&r->tensors[i]));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) {
        fprintf(stderr, "dsquant: error: gguf: out of memory for the JSON summary\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

/* The file, by the plain quantizer or the calibrated one. */
typedef struct written {
    dsq_gguf_quantize_report *r; /* c.gguf when calibrated */
    dsq_gguf_calib_report c;
    bool calibrated;
} written;

static void written_free(written *w)
{
    if (w->calibrated)
        dsq_gguf_calib_report_free(&w->c);
    else
        dsq_gguf_quantize_report_free(w->r);
    memset(w, 0, sizeof *w);
}

static dsq_status write_out(gguf_args *a, written *w)
{
    memset(w, 0, sizeof *w);
    if (!a->method) return dsq_gguf_quantize(a->in, a->out, &a->opt, &w->r);
    a->co.method = dsq_method_find(a->method);
    a->co.bf16 = a->compute == 1 || (a->compute < 0 && dsq_gemm_bf16_preferred());
    DSQ_TRY(dsq_gguf_calib_quantize(a->in, a->out, &a->opt, &a->co, &w->c));
    w->calibrated = true;
    w->r = w->c.gguf;
    return DSQ_OK;
}

static int print_result(const gguf_args *a, const written *w, cJSON *budget)
{
    if (a->json) return print_json(a, w->r, w->calibrated ? &w->c : NULL, budget);
    cJSON_Delete(budget);
    const dsq_gguf_quantize_report *r = w->r;
    double bpw = r->n_elements ? (double)r->bytes_out * 8.0 / (double)r->n_elements : 0.0;
    if (w->calibrated)
        printf(
            "%s: %d of %d quantized tensors calibrated into their planned types (%d x %d calibration tokens, %.1f s, "
            "peak RSS %ld MiB); %.2f bits per weight\nwrote %s\n",
            a->method, r->n_provided, r->n_quantized, w->c.calib.n_samples, w->c.calib.seqlen, w->c.seq.seconds,
            w->c.seq.peak_rss_kb / 1024, bpw, a->out);
    else if (a->budget >= 0)
        printf("%.2f bits per weight, %llu bytes\nwrote %s\n", bpw, (unsigned long long)r->file_bytes, a->out);
    return 0;
}

/* ---------------------------------------------------------------- budgets */

static cJSON *budget_json(const gguf_args *a, const dsq_budget *b, const dsq_budget_solution *s, double measured,
                          double mix_kld, const dsq_gguf_quantize_report *mix)
{
    static const char *const kinds[] = {"bpw", "size", "kld"};
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "kind", kinds[a->budget]);
    cJSON_AddNumberToObject(o, "target", a->target);
    cJSON_AddNumberToObject(o, "predicted_kld", s->predicted_kld);
    cJSON_AddNumberToObject(o, "measured_kld", measured);
    cJSON_AddNumberToObject(o, "predicted_file_bytes", (double)s->file_bytes);
    cJSON_AddNumberToObject(o, "bits_per_weight", s->bpw);
    cJSON_AddBoolToObject(o, "exact", s->alloc.exact);
    cJSON_AddNumberToObject(o, "combine", dsq_budget_combine(b));
    cJSON *m = cJSON_AddObjectToObject(o, "mix");
    if (m) {
        cJSON_AddStringToObject(m, "type", dsq_ftype_name(a->opt.ftype));
        cJSON_AddNumberToObject(m, "file_bytes", (double)mix->file_bytes);
        cJSON_AddNumberToObject(m, "predicted_kld", mix_kld);
    }
    cJSON *g = cJSON_AddArrayToObject(o, "groups");
    for (size_t i = 0; g && i < dsq_budget_n_groups(b); i++) {
        const dsq_budget_group *gr = dsq_budget_group_at(b, i);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", gr->name);
        cJSON_AddNumberToObject(e, "n_tensors", gr->n_tensors);
        cJSON_AddNumberToObject(e, "kld", gr->kld);
        cJSON_AddNumberToObject(e, "gain", gr->gain);
        cJSON_AddItemToArray(g, e);
    }
    cJSON *t = cJSON_AddArrayToObject(o, "tensors");
    for (size_t i = 0; t && i < dsq_budget_n_tensors(b); i++) {
        const dsq_budget_tensor *bt = dsq_budget_tensor_at(b, i);
        const dsq_budget_option *op = &bt->options[s->choice[i]];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", bt->name);
        cJSON_AddStringToObject(e, "type", dsq_type_name(op->type));
        cJSON_AddNumberToObject(e, "bytes", (double)op->bytes);
        cJSON_AddNumberToObject(e, "predicted_kld", dsq_budget_cost(b, i, s->choice[i]));
        cJSON_AddItemToArray(t, e);
    }
    return o;
}

static void print_budget_table(const dsq_budget *b, const dsq_budget_solution *s)
{
    if (dsq_log_get_level() < DSQ_LOG_INFO) return; /* -q: the table is in --json */
    fprintf(stderr, "%-34s %-7s %10s %12s\n", "tensor", "type", "MB", "pred. KLD");
    for (size_t i = 0; i < dsq_budget_n_tensors(b); i++) {
        const dsq_budget_tensor *bt = dsq_budget_tensor_at(b, i);
        const dsq_budget_option *op = &bt->options[s->choice[i]];
        fprintf(stderr, "%-34s %-7s %10.3f %12.6f\n", bt->name, dsq_type_name(op->type), (double)op->bytes / 1e6,
                dsq_budget_cost(b, i, s->choice[i]));
    }
}

/* --max-kld: the prediction adds per-group KLDs; when the written file
 * measures above the limit, the prediction's limit is tightened by the
 * ratio and the file written again (at most three rounds). */
static dsq_status budget_rounds(gguf_args *a, const dsq_budget *b, dsq_budget_solution *s, written *w, double *measured)
{
    double goal = a->target;
    for (int round = 0;; round++) {
        DSQ_TRY(dsq_budget_solve(b, (dsq_budget_kind)a->budget, goal, s));
        a->opt.tensor_types = s->types;
        a->opt.n_tensor_types = s->n_types;
        DSQ_LOGI("budget: %zu tensors allocated: %.4f bits per weight, %llu bytes, predicted KLD %.5f%s", s->n_types,
                 s->bpw, (unsigned long long)s->file_bytes, s->predicted_kld, s->alloc.exact ? "" : " (coarse table)");
        DSQ_TRY(write_out(a, w));
        a->opt.overwrite = true; /* our own file from the round before */
        DSQ_TRY(dsq_budget_check(b, a->out, measured));
        DSQ_LOGI("budget: measured KLD %.5f on the calibration chunks", *measured);
        if (a->budget != DSQ_BUDGET_KLD || *measured <= a->target || round == 2) break;
        goal *= a->target / *measured * 0.98;
        written_free(w);
        dsq_budget_solution_free(s);
    }
    if (a->budget == DSQ_BUDGET_KLD && *measured > a->target)
        return dsq_fail(DSQ_ERR_ARG,
                        "budget: --max-kld %g not reached: the file measures %.5f after 3 rounds "
                        "(%s is kept; try larger candidates)",
                        a->target, *measured, a->out);
    return DSQ_OK;
}

static int run_budget(gguf_args *a)
{
    if (!a->opt.overwrite && dsq_exists(a->out)) {
        dsq_fail(DSQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", a->out);
        return dsq_cli_fail();
    }
    a->bo.data = a->co.calib.source;
    a->bo.threads = a->opt.n_threads;
    a->bo.scratch = a->out;
    a->bo.has_target = true;
    a->bo.kind = (dsq_budget_kind)a->budget;
    a->bo.target = a->target;
    dsq_budget *b = NULL;
    dsq_budget_solution s = {0};
    dsq_gguf_quantize_report *mix = NULL;
    written w = {0};
    double measured = 0, mix_kld = 0;
    dsq_imatrix *im = NULL; /* loaded once for the measurements and every file */
    dsq_status st = DSQ_OK;
    if (a->opt.imatrix_file && !a->opt.imatrix && (st = dsq_imatrix_load(a->opt.imatrix_file, &im)) == DSQ_OK)
        a->opt.imatrix = im;
    if (st == DSQ_OK) st = dsq_budget_measure(a->in, &a->opt, &a->bo, &b);
    if (st == DSQ_OK) st = dsq_gguf_quantize_plan(a->in, &a->opt, &mix);
    if (st == DSQ_OK && dsq_budget_predict(b, mix, &mix_kld) != DSQ_OK) {
        DSQ_LOGI("budget: llama.cpp's mix is not compared (%s)", dsq_errmsg());
        mix_kld = NAN;
    }
    if (st == DSQ_OK) st = budget_rounds(a, b, &s, &w, &measured);
    int rc = st == DSQ_OK ? 0 : dsq_cli_fail();
    if (st == DSQ_OK) {
        print_budget_table(b, &s);
        DSQ_LOGI("budget: llama.cpp's %s mix: %llu bytes, predicted KLD %.5f; this file: %llu bytes, predicted %.5f, "
                 "measured %.5f",
                 dsq_ftype_name(a->opt.ftype), (unsigned long long)mix->file_bytes, mix_kld,
                 (unsigned long long)w.r->file_bytes, s.predicted_kld, measured);
        rc = print_result(a, &w, a->json ? budget_json(a, b, &s, measured, mix_kld, mix) : NULL);
    }
    written_free(&w);
    dsq_gguf_quantize_report_free(mix);
    dsq_budget_solution_free(&s);
    dsq_budget_free(b);
    a->opt.imatrix = NULL;
    dsq_imatrix_free(im);
    return rc;
}

int dsq_cmd_gguf(int argc, char **argv)
{
    gguf_args a = {.opt = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M),
                   .co = {.calib = {NULL, 128, 512, 0}, .damp = 0.01},
                   .compute = -1,
                   .budget = -1};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (dsq_ftype_from_name(a.type, &a.opt.ftype) != DSQ_OK) return dsq_cli_fail();
    if (a.budget >= 0) return run_budget(&a);
    written w;
    if (write_out(&a, &w) != DSQ_OK) return dsq_cli_fail();
    rc = print_result(&a, &w, NULL);
    written_free(&w);
    return rc;
}
