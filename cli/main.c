/* dsquant: one program, one subcommand per job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/log.h"

static const dsq_cmd g_cmds[] = {
    {"info", "show format, architecture, tensors and metadata of a model", dsq_cmd_info},
    {"convert", "convert between a Hugging Face folder and GGUF", dsq_cmd_convert},
    {"gguf", "quantize to GGUF like llama-quantize (from GGUF or a HF folder)", dsq_cmd_gguf},
    {"ppl", "perplexity of a model on a text (llama.cpp or AWQ/GPTQ protocol)", dsq_cmd_ppl},
    {"kld", "KL divergence of a quantized model from its base (llama-perplexity's)", dsq_cmd_kld},
    {"generate", "generate text from a prompt (greedy or sampled, --chat templates)", dsq_cmd_generate},
    {"serve", "OpenAI-compatible server with continuous batching (completions, chat, lm-eval logprobs)", dsq_cmd_serve},
    {"sweep", "every GGUF type x method made and measured (KLD, PPL, size, speed)", dsq_cmd_sweep},
    {"report", "a sweep's results as one self-contained HTML page with plots", dsq_cmd_report},
    {"imatrix", "importance matrix for quantization, like llama-imatrix", dsq_cmd_imatrix},
    {"rtn", "INTn round-to-nearest to a GPTQ/AWQ/compressed-tensors HF folder", dsq_cmd_quant},
    {"awq", "AWQ (AutoAWQ) INT4 quantization to a vLLM/transformers-loadable folder", dsq_cmd_quant},
    {"gptq", "GPTQ INTn quantization to a vLLM/transformers-loadable folder", dsq_cmd_quant},
    {"smoothquant", "SmoothQuant W8A8 (INT8 weights and activations) to a compressed-tensors folder", dsq_cmd_w8},
    {"fp8", "FP8 E4M3 (dynamic, static, block, weight-only) to a vLLM-loadable folder", dsq_cmd_w8},
    {"tokenize", "text to token ids and back with a model's tokenizer", dsq_cmd_tokenize},
    {"logits", "log-probabilities of every position for given token ids (raw float32)", dsq_cmd_logits},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: dsquant [-v|-q] COMMAND [ARGS]\n       dsquant --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(out, "  %-11s %s\n", g_cmds[i].name, g_cmds[i].summary);
    fprintf(out, "\n'dsquant COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--version")) {
            printf("dsquant %s\n", DSQ_VERSION);
            return 0;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-v")) {
            dsq_log_set_level(DSQ_LOG_DEBUG);
        } else if (!strcmp(argv[i], "-q")) {
            dsq_log_set_level(DSQ_LOG_WARN);
        } else {
            fprintf(stderr, "dsquant: error: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    /* `gguf` alternates I/O with one parallel region per tensor: libgomp's
     * default spin-waiting then burns the idle cores between regions and, on
     * a busy machine, makes 2 threads slower than 1 (docs/benchmarks.md).
     * libgomp reads OMP_WAIT_POLICY when it loads, before main, so set it and
     * re-execute once; an explicit user setting is left alone. */
    if (!strcmp(argv[i], "gguf") && !getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
        /* exec failed: carry on with the default policy */
    }
    dsq_cli_install_signals();
    for (size_t c = 0; c < sizeof g_cmds / sizeof g_cmds[0]; c++)
        if (!strcmp(argv[i], g_cmds[c].name)) return g_cmds[c].run(argc - i, argv + i);
    fprintf(stderr, "dsquant: error: unknown command \"%s\" (see dsquant --help)\n", argv[i]);
    return 2;
}
