/* dsquant gguf: llama-quantize's job, from a GGUF file or a HF folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "calibration/gguf_calib.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/gguf_quantize.h"
#include "kernels/cpu.h"
#include "quantizers/mixes.h"

static const char g_usage[] =
    "usage: dsquant gguf IN -o OUT.gguf --type TYPE [--imatrix FILE] [--pure] [--leave-output]\n"
    "                    [--output-type T] [--token-embedding-type T] [--threads N] [--force]\n"
    "                    [--allow-requantize] [--json]\n"
    "                    [--method gptq [--calib SRC] [--n-samples N] [--seqlen L] ...]\n"
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
    "  --calib NAME|FILE          calibration text (default tinyshakespeare)\n"
    "  --n-samples N              calibration windows (default 128)\n"
    "  --seqlen L                 tokens per window (default 512)\n"
    "  --seed S                   window sampling seed (default 0)\n"
    "  --damp F                   dampening fraction of mean diag(H) (default 0.01)\n"
    "  --act-order                blocks in decreasing Hessian-diagonal order\n"
    "  --compute P                bf16, f32 or auto (default: bf16 with AVX512-BF16)\n"
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
                                       "--compute"};
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
        if ((n = dsq_cli_parse_int(arg, val, !strcmp(arg, "--seqlen") ? 2 : 1, 1 << 24)) < 0) return 2;
        if (!strcmp(arg, "--n-samples"))
            a->co.calib.n_samples = (int)n;
        else
            a->co.calib.seqlen = (int)n;
    }
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
        return usage_error("--method %s: unknown (gptq writes GGUF blocks)", a->method);
    if (!a->method && a->calib_opts) return usage_error("%s", "calibration options need --method gptq");
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

static int print_json(const gguf_args *a, const dsq_gguf_quantize_report *r, const dsq_gguf_calib_report *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return 1;
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
    cJSON_AddNumberToObject(o, "bits_per_weight",
                            r->n_elements ? (double)r->bytes_out * 8.0 / (double)r->n_elements : 0.0);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
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

static int run_calibrated(gguf_args *a)
{
    a->co.method = dsq_method_find(a->method);
    a->co.bf16 = a->compute == 1 || (a->compute < 0 && dsq_cpu_has_avx512bf16());
    dsq_gguf_calib_report c;
    if (dsq_gguf_calib_quantize(a->in, a->out, &a->opt, &a->co, &c) != DSQ_OK) return dsq_cli_fail();
    const dsq_gguf_quantize_report *r = c.gguf;
    int rc = 0;
    if (a->json) {
        rc = print_json(a, r, &c);
    } else {
        printf("%s: %d of %d quantized tensors by GPTQ into their planned types (%d x %d calibration tokens, %.1f s, "
               "peak RSS %ld MiB); %.2f bits per weight\nwrote %s\n",
               a->method, r->n_provided, r->n_quantized, c.calib.n_samples, c.calib.seqlen, c.seq.seconds,
               c.seq.peak_rss_kb / 1024, r->n_elements ? (double)r->bytes_out * 8.0 / (double)r->n_elements : 0.0,
               a->out);
    }
    dsq_gguf_calib_report_free(&c);
    return rc;
}

int dsq_cmd_gguf(int argc, char **argv)
{
    gguf_args a = {.opt = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M),
                   .co = {.calib = {NULL, 128, 512, 0}, .damp = 0.01},
                   .compute = -1};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (dsq_ftype_from_name(a.type, &a.opt.ftype) != DSQ_OK) return dsq_cli_fail();
    if (a.method) return run_calibrated(&a);
    dsq_gguf_quantize_report *r = NULL;
    if (dsq_gguf_quantize(a.in, a.out, &a.opt, &r) != DSQ_OK) return dsq_cli_fail();
    rc = a.json ? print_json(&a, r, NULL) : 0;
    dsq_gguf_quantize_report_free(r);
    return rc;
}
