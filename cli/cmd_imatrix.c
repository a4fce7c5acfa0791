/* dsquant imatrix: an importance matrix for quantization, as llama-imatrix
 * computes it (eval/imatrix_collect.h), written as llama.cpp's legacy .dat. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/imatrix_collect.h"
#include "formats/imatrix.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

static const char g_usage[] =
    "usage: dsquant imatrix MODEL --data NAME|FILE [-o imatrix.dat] [options]\n"
    "\n"
    "Importance matrix of MODEL (a GGUF file or a Hugging Face folder) over a text, as\n"
    "llama-imatrix computes it: per input column of every linear weight of the decoder\n"
    "layers, the mean of x^2 over the text's tokens; written as llama.cpp's .dat file,\n"
    "which dsquant gguf --imatrix and llama-quantize --imatrix read.\n"
    "\n"
    "options:\n"
    "  --data NAME|FILE      a registered dataset (tinyshakespeare, wikitext2, ...) or a text\n"
    "                        file (.zst ok)\n"
    "  -o, --output FILE     the .dat to write (default imatrix.dat)\n"
    "  --ctx N               tokens per chunk (default 512)\n"
    "  --chunks K            only the first K chunks (default: all)\n"
    "  --batch B             tokens per forward pass (default 512, llama.cpp's micro-batch;\n"
    "                        each pass counts as one call in the file)\n"
    "  --no-ppl              do not compute the perplexity (skips the output head)\n"
    "  --force               replace the output if it exists\n"
    "  --threads T           CPU threads (default: all)\n"
    "  -h, --help            this text\n";

typedef struct im_args {
    const char *model, *data, *out;
    dsq_imatrix_opts o;
    int threads;
    bool force;
} im_args;

static int usage_error(const char *msg, const char *what)
{
    return dsq_cli_usage_error("imatrix", msg, what);
}

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    im_args *a = user;
    const char *opt = argv[*i];
    const dsq_cli_eval_ints ints = {&a->o.ctx, &a->o.chunks, &a->o.batch, &a->threads, NULL};
    int taken = dsq_cli_eval_int_opt(argc, argv, i, 1 << 20, &ints);
    if (taken) return taken < 0 ? 2 : 0;
    if (!strcmp(opt, "--force")) a->force = true;
    else if (!strcmp(opt, "--no-ppl")) a->o.no_ppl = true;
    else if (!strcmp(opt, "--data") || !strcmp(opt, "-o") || !strcmp(opt, "--output")) {
        const char *val = *i + 1 < argc ? argv[++*i] : NULL;
        if (!val) return usage_error(opt, " needs a value");
        if (!strcmp(opt, "--data")) a->data = val;
        else a->out = val;
    } else {
        return usage_error("unknown option ", opt);
    }
    return 0;
}

static int parse(int argc, char **argv, im_args *a)
{
    dsq_imatrix_opts_default(&a->o);
    a->out = "imatrix.dat";
    int n_pos, rc = dsq_cli_walk(argc, argv, "imatrix", g_usage, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc;
    if (!a->model) return usage_error("missing MODEL", NULL);
    if (!a->data) return usage_error("missing --data", NULL);
    return 0;
}

static void progress(void *user, const dsq_imatrix_progress *p)
{
    (void)user;
    if (p->ppl > 0)
        fprintf(stderr, "[%d/%d] ppl %.4f  %.0f tok/s  ETA %.0f s\n", p->chunk, p->n_chunks, p->ppl, p->tokens_per_s,
                p->eta_s);
    else
        fprintf(stderr, "[%d/%d] %.0f tok/s  ETA %.0f s\n", p->chunk, p->n_chunks, p->tokens_per_s, p->eta_s);
}

static dsq_status collect(im_args *a, const char *data_path, const dsq_tokens *ids, dsq_model *m)
{
    dsq_ctx *c = NULL;
    dsq_imatrix_collector *col = NULL;
    dsq_imatrix *im = NULL;
    dsq_imatrix_run_result r;
    dsq_status s = dsq_ctx_new(m, a->o.ctx, a->threads, &c);
    if (s == DSQ_OK) s = dsq_imatrix_collector_new(m, &col);
    if (s == DSQ_OK) s = dsq_imatrix_run(c, col, ids->ids, (int64_t)ids->n, &a->o, &r);
    if (s == DSQ_OK) s = dsq_imatrix_collector_result(col, data_path, &im);
    if (s == DSQ_OK) s = dsq_imatrix_save(im, a->out, a->force);
    if (s == DSQ_OK) {
        if (!a->o.no_ppl) fprintf(stderr, "Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
        fprintf(stderr, "dsquant: %zu entries over %d chunks of %d tokens written to %s (%.1f s)\n", im->n_entries,
                r.n_chunks, a->o.ctx, a->out, r.seconds);
    }
    dsq_imatrix_free(im);
    dsq_imatrix_collector_free(col);
    dsq_ctx_free(c);
    return s;
}

static dsq_status run(im_args *a)
{
    char data_path[4096], *text = NULL;
    size_t len;
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_tokens ids = {0};
    dsq_status s = dsq_dataset_resolve(a->data, DSQ_TEXT_RAW, data_path, sizeof data_path, &text, &len);
    if (s == DSQ_OK) s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK) s = dsq_imatrix_tokenize(tok, text, len, &a->o, &ids);
    free(text);
    /* llama-imatrix records the -f argument as the dataset name. */
    if (s == DSQ_OK) s = collect(a, data_path, &ids, m);
    dsq_tokens_free(&ids);
    dsq_tokenizer_free(tok);
    dsq_model_close(m);
    return s;
}

int dsq_cmd_imatrix(int argc, char **argv)
{
    im_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    a.o.progress = progress;
    return run(&a) == DSQ_OK ? 0 : dsq_cli_fail();
}
