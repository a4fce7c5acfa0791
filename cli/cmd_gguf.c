/* dsquant gguf: llama-quantize's job, from a GGUF file or a HF folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/gguf_quantize.h"
#include "quantizers/mixes.h"

static const char g_usage[] =
    "usage: dsquant gguf IN -o OUT.gguf --type TYPE [--imatrix FILE] [--pure] [--leave-output]\n"
    "                    [--output-type T] [--token-embedding-type T] [--threads N] [--force]\n"
    "                    [--allow-requantize] [--json]\n"
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
    "  -v, -q                     more / less logging\n"
    "  -h, --help                 this text\n"
    "\n"
    "llama-quantize's --leave-output-tensor and --output-tensor-type are accepted too.\n";

typedef struct gguf_args {
    const char *in, *out, *type;
    dsq_gguf_quantize_options opt;
    bool json;
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
    static const char *const opts[] = {"-o",          "--output",           "--type",
                                       "--imatrix",   "--output-type",      "--output-tensor-type",
                                       "--threads",   "--token-embedding-type"};
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

/* Options with a value; returns -1 to go on, else the exit status. */
static int parse_valued(const char *arg, const char *val, gguf_args *a)
{
    if (!strcmp(arg, "-o") || !strcmp(arg, "--output")) a->out = val;
    else if (!strcmp(arg, "--type")) a->type = val;
    else if (!strcmp(arg, "--imatrix")) a->opt.imatrix_file = val;
    else if (!strcmp(arg, "--output-type") || !strcmp(arg, "--output-tensor-type")) return parse_ggml_type(arg, val, &a->opt.output_type);
    else if (!strcmp(arg, "--token-embedding-type")) return parse_ggml_type(arg, val, &a->opt.token_embd_type);
    else if (!strcmp(arg, "--threads")) {
        long long n = dsq_cli_parse_int(arg, val, 1, 4096);
        if (n < 0) return 2;
        a->opt.n_threads = (int)n;
    }
    return -1;
}

static bool parse_flag(const char *arg, gguf_args *a)
{
    if (!strcmp(arg, "--pure")) a->opt.pure = true;
    else if (!strcmp(arg, "--leave-output") || !strcmp(arg, "--leave-output-tensor")) a->opt.leave_output = true;
    else if (!strcmp(arg, "--force")) a->opt.overwrite = true;
    else if (!strcmp(arg, "--allow-requantize")) a->opt.allow_requantize = true;
    else if (!strcmp(arg, "--json")) a->json = true;
    else return false;
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
    return o;
}

static int print_json(const gguf_args *a, const dsq_gguf_quantize_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return 1;
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

int dsq_cmd_gguf(int argc, char **argv)
{
    gguf_args a = {.opt = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M)};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (dsq_ftype_from_name(a.type, &a.opt.ftype) != DSQ_OK) return dsq_cli_fail();
    dsq_gguf_quantize_report *r = NULL;
    if (dsq_gguf_quantize(a.in, a.out, &a.opt, &r) != DSQ_OK) return dsq_cli_fail();
    rc = a.json ? print_json(&a, r) : 0;
    dsq_gguf_quantize_report_free(r);
    return rc;
}
