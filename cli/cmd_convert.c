/* dsquant convert: HF folder <-> GGUF file, direction from the input. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/convert.h"

static const char g_usage[] =
    "usage: dsquant convert IN -o OUT [--dtype f32|f16|bf16|auto] [--force] [--shard-size SIZE]\n"
    "\n"
    "Converts a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer files)\n"
    "to one GGUF file (OUT ending in .gguf), a GGUF file to a Hugging Face folder, or a\n"
    "Hugging Face folder to another with float weights (OUT not ending in .gguf): FP8\n"
    "block-scaled weights (DeepSeek-V3/R1's weight + weight_scale_inv) dequantized on the\n"
    "CPU as DeepSeek's fp8_cast_bf16.py does, quantization_config removed.\n"
    "Conversion is lossless in F32: names are mapped, Llama Q/K rows permuted as llama.cpp\n"
    "does, quantized GGUF tensors dequantized.\n"
    "\n"
    "options:\n"
    "  -o, --output PATH   the GGUF file or HF folder to write (atomically)\n"
    "  --dtype T           type of the output weights (default auto):\n"
    "                        HF -> GGUF: auto = f16 if the first tensor is F16, else bf16\n"
    "                        (like convert_hf_to_gguf.py); 1-D tensors and norms stay f32\n"
    "                        GGUF -> HF: auto = f32 if any tensor is quantized, else the\n"
    "                        float type of the 2-D tensors\n"
    "                        HF -> HF: auto = FP8 weights to bf16, the rest unchanged;\n"
    "                        f32/f16/bf16 also converts the other float 2-D tensors\n"
    "  --force             replace OUT if it exists\n"
    "  --shard-size SIZE   to HF: largest safetensors shard (default 5GB, as\n"
    "                      transformers); units B, KB, MB, GB, TB or KiB, MiB, GiB, TiB\n"
    "  -v, -q              more / less logging\n"
    "  -h, --help          this text\n";

/* "5GB" -> 5e9, "512MiB" -> 2^29; a bare number is bytes. */
static int parse_size(const char *s, unsigned long long *out)
{
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"kb", 1000ull},
                 {"mb", 1000000ull},
                 {"gb", 1000000000ull},
                 {"tb", 1000000000000ull},
                 {"kib", 1ull << 10},
                 {"mib", 1ull << 20},
                 {"gib", 1ull << 30},
                 {"tib", 1ull << 40}};
    if (!s || !isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit)) continue;
        if (v == 0 || v > ~0ull / units[i].mul) return -1;
        *out = v * units[i].mul;
        return 0;
    }
    return -1;
}

typedef struct convert_args {
    const char *in, *out;
    dsq_convert_dtype dtype;
    bool force;
    unsigned long long shard;
} convert_args;

static int missing_value(const char *opt)
{
    fprintf(stderr, "dsquant: error: convert: %s needs a value\n", opt);
    return 2;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, convert_args *a)
{
    for (int i = 1; i < argc; i++) {
        int exit_now;
        const char *arg = argv[i];
        bool takes_value = !strcmp(arg, "-o") || !strcmp(arg, "--output") || !strcmp(arg, "--dtype") ||
                           !strcmp(arg, "--shard-size");
        if (takes_value && i + 1 >= argc) return missing_value(arg);
        if (dsq_cli_common_opt(argc, argv, &i, g_usage, &exit_now)) {
            if (exit_now) return 0;
        } else if (!strcmp(arg, "-o") || !strcmp(arg, "--output")) {
            a->out = argv[++i];
        } else if (!strcmp(arg, "--dtype")) {
            if (dsq_convert_dtype_parse(argv[++i], &a->dtype) != DSQ_OK) return dsq_cli_fail();
        } else if (!strcmp(arg, "--force")) {
            a->force = true;
        } else if (!strcmp(arg, "--shard-size")) {
            if (parse_size(argv[++i], &a->shard)) {
                fprintf(stderr, "dsquant: error: --shard-size: \"%s\" is not a size such as 5GB or 500MiB\n", argv[i]);
                return 2;
            }
        } else if (arg[0] == '-' && arg[1]) {
            fprintf(stderr, "dsquant: error: convert: unknown option %s (see dsquant convert --help)\n", arg);
            return 2;
        } else if (!a->in) {
            a->in = arg;
        } else {
            fprintf(stderr, "dsquant: error: convert: unexpected argument %s\n", arg);
            return 2;
        }
    }
    if (!a->in || !a->out) {
        fprintf(stderr, "dsquant: error: convert: %s (see dsquant convert --help)\n",
                !a->in ? "missing input" : "missing -o OUTPUT");
        return 2;
    }
    return -1;
}

int dsq_cmd_convert(int argc, char **argv)
{
    convert_args a = {.dtype = DSQ_CONVERT_AUTO};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.shard && dsq_is_dir(a.in)) DSQ_LOGW("--shard-size applies to GGUF -> HF only; ignored");
    if (dsq_convert(a.in, a.out, a.dtype, a.force, a.shard) != DSQ_OK) return dsq_cli_fail();
    return 0;
}
