/* dsquant ppl: perplexity of a model on a text, by llama-perplexity's
 * protocol or the AWQ/GPTQ papers' (eval/perplexity.h). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/perplexity.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

static const char g_usage[] =
    "usage: dsquant ppl MODEL --data wikitext2|FILE [options]\n"
    "\n"
    "Perplexity of MODEL (a GGUF file or a Hugging Face folder) on a text.\n"
    "\n"
    "options:\n"
    "  --data NAME|FILE      wikitext2 (looked for in $DSQ_DATA, $DSQ_SHARED_DIR/datasets,\n"
    "                        ../shared/datasets, $DSQ_CACHE/datasets) or a text file (.zst ok)\n"
    "  --protocol P          llamacpp (default): llama-perplexity's chunks, BOS first in each,\n"
    "                        second half of each chunk scored; wikitext2 = wiki.test.raw\n"
    "                        hf: AWQ/GPTQ windows, all but the first token scored;\n"
    "                        wikitext2 = the \"\\n\\n\".join of the Hugging Face rows\n"
    "  --ctx N               tokens per chunk (default 512 for llamacpp, 2048 for hf)\n"
    "  --chunks K            only the first K chunks (default: all)\n"
    "  --batch B             tokens per forward pass (default: ctx)\n"
    "  --llamacpp-act        round activations to each weight type's vec_dot type in every\n"
    "                        product, as llama.cpp's CPU backend does (default: F32\n"
    "                        activations in batched products, rounded only in decode)\n"
    "  --threads T           CPU threads (default: all)\n"
    "  --json                one JSON object on stdout\n"
    "  -h, --help            this text\n";

typedef struct ppl_args {
    const char *model, *data;
    dsq_ppl_opts o;
    int threads;
    bool json, ctx_given, llamacpp_act;
} ppl_args;

/* Returns 0 to go on, or the exit status. */
static int parse(int argc, char **argv, ppl_args *a)
{
    const dsq_cli_eval_ints ints = {&a->o.ctx, &a->o.chunks, &a->o.batch, &a->threads, &a->ctx_given};
    dsq_ppl_opts_default(&a->o);
    for (int i = 1; i < argc; i++) {
        int exit_now, taken;
        const char *opt = argv[i];
        if (dsq_cli_common_opt(argc, argv, &i, g_usage, &exit_now)) {
            if (exit_now) return -1;
        } else if ((taken = dsq_cli_eval_int_opt(argc, argv, &i, 1 << 24, &ints))) {
            if (taken < 0) return 2;
        } else if (!strcmp(opt, "--json")) {
            a->json = true;
        } else if (!strcmp(opt, "--llamacpp-act")) {
            a->llamacpp_act = true;
        } else if (!strcmp(opt, "--data")) {
            if (!(a->data = i + 1 < argc ? argv[++i] : NULL)) {
                fprintf(stderr, "dsquant: error: --data needs a value\n");
                return 2;
            }
        } else if (!strcmp(opt, "--protocol")) {
            if (i + 1 >= argc || dsq_ppl_protocol_from_name(argv[++i], &a->o.protocol) != DSQ_OK) {
                fprintf(stderr, "dsquant: error: --protocol takes llamacpp or hf\n");
                return 2;
            }
        } else if (opt[0] == '-' && opt[1]) {
            fprintf(stderr, "dsquant: error: ppl: unknown option %s (see dsquant ppl --help)\n", opt);
            return 2;
        } else if (!a->model) {
            a->model = opt;
        } else {
            fprintf(stderr, "dsquant: error: ppl: unexpected argument %s\n", opt);
            return 2;
        }
    }
    if (!a->model || !a->data) {
        fprintf(stderr, "dsquant: error: ppl: %s (see dsquant ppl --help)\n",
                !a->model ? "missing MODEL" : "missing --data");
        return 2;
    }
    return 0;
}

static void progress(void *user, const dsq_ppl_progress *p)
{
    (void)user;
    fprintf(stderr, "[%d/%d] ppl %.4f  %.0f tok/s  ETA %.0f s\n", p->chunk, p->n_chunks, p->ppl, p->tokens_per_s,
            p->eta_s);
}

static dsq_status load_text(const ppl_args *a, char *path, size_t cap, char **text, size_t *len)
{
    if (dsq_dataset_known(a->data)) {
        dsq_text_layout lay = a->o.protocol == DSQ_PPL_HF ? DSQ_TEXT_HF_JOIN : DSQ_TEXT_RAW;
        DSQ_TRY(dsq_dataset_path(a->data, lay, path, cap));
    } else {
        snprintf(path, cap, "%s", a->data);
    }
    return dsq_text_read(path, text, len);
}

static void print_result(const ppl_args *a, const char *data_path, const dsq_ppl_result *r)
{
    if (!a->json) {
        printf("%s: %s protocol, ctx %d, %d chunks, %lld tokens scored\n", data_path,
               dsq_ppl_protocol_name(a->o.protocol), a->o.ctx, r->n_chunks, (long long)r->n_scored);
        printf("PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "data", data_path);
    cJSON_AddStringToObject(o, "protocol", dsq_ppl_protocol_name(a->o.protocol));
    cJSON_AddNumberToObject(o, "ctx", a->o.ctx);
    cJSON_AddNumberToObject(o, "chunks", r->n_chunks);
    cJSON_AddNumberToObject(o, "n_tokens", (double)r->n_tokens);
    cJSON_AddNumberToObject(o, "n_scored", (double)r->n_scored);
    cJSON_AddNumberToObject(o, "ppl", r->ppl);
    cJSON_AddNumberToObject(o, "ppl_err", r->ppl_err);
    cJSON_AddNumberToObject(o, "nll_mean", r->nll_mean);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddNumberToObject(o, "tokens_per_second", r->tokens_per_s);
    char *s = cJSON_Print(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

static dsq_status run(ppl_args *a)
{
    char data_path[4096];
    char *text = NULL;
    size_t len = 0;
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_ctx *c = NULL;
    dsq_ppl_result r;
    dsq_status s = load_text(a, data_path, sizeof data_path, &text, &len);
    if (s == DSQ_OK) s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK && !a->ctx_given && a->o.protocol == DSQ_PPL_HF) {
        int64_t mp = m->arch.max_position_embeddings;
        a->o.ctx = mp > 0 && mp < 2048 ? (int)mp : 2048;
    }
    if (s == DSQ_OK) s = dsq_ctx_new(m, a->o.ctx, a->threads, &c);
    if (s == DSQ_OK) {
        dsq_ctx_set_matmul(c, a->llamacpp_act ? DSQ_MATMUL_LLAMACPP : DSQ_MATMUL_DEFAULT);
        a->o.progress = progress;
        s = dsq_ppl_text(c, tok, text, len, &a->o, &r);
    }
    if (s == DSQ_OK) print_result(a, data_path, &r);
    dsq_ctx_free(c);
    dsq_tokenizer_free(tok);
    dsq_model_close(m);
    free(text);
    return s;
}

int dsq_cmd_ppl(int argc, char **argv)
{
    ppl_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a) == DSQ_OK ? 0 : dsq_cli_fail();
}
