/* dsquant kld: KL divergence of a quantized model from its base, like
 * llama-perplexity --kl-divergence (eval/kld.h). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/kld.h"
#include "eval/kld_file.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

static const char g_usage[] =
    "usage: dsquant kld BASE QUANT --data wikitext2|FILE [options]\n"
    "       dsquant kld BASE --data wikitext2|FILE --save-logits FILE [options]\n"
    "       dsquant kld --logits FILE QUANT [--data wikitext2|FILE] [options]\n"
    "\n"
    "KL divergence of QUANT from BASE over a text, as llama-perplexity --kl-divergence:\n"
    "chunks of --ctx tokens, BOS first in each, the second half of each chunk scored.\n"
    "BASE's log-probabilities can be saved once (--save-logits, zstd-compressed) and\n"
    "reused for any number of quantized models (--logits).\n"
    "\n"
    "options:\n"
    "  --data NAME|FILE      wikitext2 (wiki.test.raw) or another registered dataset, or a\n"
    "                        text file (.zst ok); with --logits only checks the file's tokens\n"
    "  --ctx N               tokens per chunk (default 512; with --logits the file's)\n"
    "  --chunks K            only the first K chunks (default: all)\n"
    "  --batch B             tokens per forward pass (default: ctx)\n"
    "  --llamacpp-act        round activations to each weight type's vec_dot type in every\n"
    "                        product of both models, as llama.cpp's CPU backend does\n"
    "  --save-logits FILE    write BASE's log-probabilities to FILE\n"
    "  --logits FILE         read BASE's log-probabilities from FILE instead of running BASE\n"
    "  --force               replace the --save-logits file if it exists\n"
    "  --threads T           CPU threads (default: all)\n"
    "  --json                one JSON object on stdout\n"
    "  -h, --help            this text\n";

typedef struct kld_args {
    const char *pos[2];
    int n_pos;
    const char *data, *save, *logits;
    dsq_kld_opts o;
    int threads;
    bool json, ctx_given, llamacpp_act;
} kld_args;

static int usage_error(const char *msg, const char *what) { return dsq_cli_usage_error("kld", msg, what); }

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    kld_args *a = user;
    const char *opt = argv[*i];
    const dsq_cli_eval_ints ints = {&a->o.ctx, &a->o.chunks, &a->o.batch, &a->threads, &a->ctx_given};
    int taken = dsq_cli_eval_int_opt(argc, argv, i, 1 << 20, &ints);
    if (taken) return taken < 0 ? 2 : 0;
    if (!strcmp(opt, "--json"))
        a->json = true;
    else if (!strcmp(opt, "--llamacpp-act"))
        a->llamacpp_act = true;
    else if (!strcmp(opt, "--force"))
        a->o.overwrite = true;
    else if (!strcmp(opt, "--data") || !strcmp(opt, "--save-logits") || !strcmp(opt, "--logits")) {
        const char *val = *i + 1 < argc ? argv[++*i] : NULL;
        if (!val) return usage_error(opt, " needs a value");
        if (!strcmp(opt, "--data"))
            a->data = val;
        else if (!strcmp(opt, "--save-logits"))
            a->save = val;
        else
            a->logits = val;
    } else {
        return usage_error("unknown option ", opt);
    }
    return 0;
}

/* Returns 0 to go on, -1 after --help, or the exit status. */
static int parse(int argc, char **argv, kld_args *a)
{
    dsq_kld_opts_default(&a->o);
    int rc = dsq_cli_walk(argc, argv, "kld", g_usage, parse_opt, a, a->pos, 2, &a->n_pos);
    if (rc) return rc;
    if (a->logits) {
        if (a->n_pos != 1) return usage_error("with --logits give exactly one model, the quantized one", NULL);
        if (a->save) return usage_error("--logits and --save-logits exclude each other", NULL);
        if (!a->ctx_given) a->o.ctx = 0;
        return 0;
    }
    if (a->n_pos == 0) return usage_error("missing BASE", NULL);
    if (a->n_pos == 1 && !a->save) return usage_error("missing QUANT (or --save-logits to only save BASE's)", NULL);
    if (!a->data) return usage_error("missing --data", NULL);
    return 0;
}

static void progress(void *user, const dsq_kld_progress *p)
{
    (void)user;
    if (!p->r) {
        fprintf(stderr, "[%d/%d] base log-probs saved  %.0f tok/s  ETA %.0f s\n", p->chunk, p->n_chunks,
                p->tokens_per_s, p->eta_s);
        return;
    }
    const dsq_kld_result *r = p->r;
    if (p->chunk == 1)
        fprintf(stderr, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                        "Δp RMS            Same top p\n");
    fprintf(stderr,
            "%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
            p->chunk, r->ppl, r->ppl_err, r->ln_ratio, r->ln_ratio_err, r->kld, r->kld_err, 100 * r->dp_rms,
            100 * r->dp_rms_err, 100 * r->same_top, 100 * r->same_top_err);
}

static const char *q_label(double f)
{
    static char buf[16];
    if (f >= 1) return "Maximum";
    if (f <= 0) return "Minimum";
    if (f == 0.5) return "Median ";
    snprintf(buf, sizeof buf, "%4.1f%%  ", 100 * f);
    return buf;
}

/* llama-perplexity's closing tables. */
static void print_text(const dsq_kld_result *r)
{
    printf("%d chunks of %d tokens, %lld positions scored\n\n", r->n_chunks, r->ctx, (long long)r->count);
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r->ppl, r->ppl_err);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r->ppl_base, r->ppl_base_err);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * r->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->ln_ratio, r->ln_ratio_err);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r->ratio, r->ratio_err);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", r->diff, r->diff_err);
    printf("====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", r->kld, r->kld_err);
    for (int i = 0; i < DSQ_KLD_NQ; i++) printf("%s KLD: %10.6f\n", q_label(dsq_kld_quantiles[i]), r->kld_q[i]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * r->dp, 100 * r->dp_err);
    for (int i = 0; i < DSQ_KLD_DP_NQ; i++)
        printf("%s Δp: %6.3f%%\n", q_label(dsq_kld_dp_quantiles[i]), 100 * r->dp_q[i]);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * r->dp_rms, 100 * r->dp_rms_err);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * r->same_top, 100 * r->same_top_err);
}

static void add_pm(cJSON *o, const char *key, double v, double err)
{
    cJSON *p = cJSON_AddObjectToObject(o, key);
    cJSON_AddNumberToObject(p, "value", v);
    cJSON_AddNumberToObject(p, "error", err);
}

static void add_quantiles(cJSON *o, const char *key, const double *fr, const double *v, int n)
{
    cJSON *q = cJSON_AddObjectToObject(o, key);
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "%g", 100 * fr[i]);
        cJSON_AddNumberToObject(q, k, v[i]);
    }
}

static void print_json(const kld_args *a, const char *data_path, const dsq_kld_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "base", a->logits ? a->logits : a->pos[0]);
    cJSON_AddStringToObject(o, "quant", a->logits ? a->pos[0] : a->pos[1]);
    if (data_path) cJSON_AddStringToObject(o, "data", data_path);
    cJSON_AddNumberToObject(o, "ctx", r->ctx);
    cJSON_AddNumberToObject(o, "chunks", r->n_chunks);
    cJSON_AddNumberToObject(o, "n_scored", (double)r->count);
    add_pm(o, "ppl", r->ppl, r->ppl_err);
    add_pm(o, "ppl_base", r->ppl_base, r->ppl_base_err);
    cJSON_AddNumberToObject(o, "ppl_correlation", r->cor);
    add_pm(o, "ln_ppl_ratio", r->ln_ratio, r->ln_ratio_err);
    add_pm(o, "ppl_ratio", r->ratio, r->ratio_err);
    add_pm(o, "ppl_diff", r->diff, r->diff_err);
    add_pm(o, "kld", r->kld, r->kld_err);
    add_quantiles(o, "kld_percentiles", dsq_kld_quantiles, r->kld_q, DSQ_KLD_NQ);
    add_pm(o, "delta_p", r->dp, r->dp_err);
    add_quantiles(o, "delta_p_percentiles", dsq_kld_dp_quantiles, r->dp_q, DSQ_KLD_DP_NQ);
    add_pm(o, "delta_p_rms", r->dp_rms, r->dp_rms_err);
    add_pm(o, "same_top", r->same_top, r->same_top_err);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    char *s = cJSON_Print(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

static void print_saved(const kld_args *a, const dsq_kld_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "saved", a->save);
    cJSON_AddNumberToObject(o, "ctx", r->ctx);
    cJSON_AddNumberToObject(o, "chunks", r->n_chunks);
    char *s = cJSON_Print(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

typedef struct loaded {
    dsq_model *m;
    dsq_tokenizer *tok;
    dsq_ctx *c;
} loaded;

static dsq_status load(const kld_args *a, const char *path, int ctx, bool need_tok, loaded *l)
{
    DSQ_TRY(dsq_model_open(path, &l->m));
    if (need_tok) DSQ_TRY(dsq_tokenizer_load(path, &l->tok));
    DSQ_TRY(dsq_ctx_new(l->m, ctx, a->threads, &l->c));
    dsq_ctx_set_matmul(l->c, a->llamacpp_act ? DSQ_MATMUL_LLAMACPP : DSQ_MATMUL_DEFAULT);
    return DSQ_OK;
}

static void unload(loaded *l)
{
    dsq_ctx_free(l->c);
    dsq_tokenizer_free(l->tok);
    dsq_model_close(l->m);
}

static dsq_status text_tokens(kld_args *a, const dsq_tokenizer *tok, char *path, size_t cap, dsq_tokens *ids)
{
    char *text;
    size_t len;
    DSQ_TRY(dsq_dataset_resolve(a->data, DSQ_TEXT_RAW, path, cap, &text, &len));
    dsq_status s = dsq_kld_tokenize(tok, text, len, &a->o, ids);
    free(text);
    return s;
}

/* --logits FILE QUANT: the context comes from the file (read it first). */
static dsq_status run_from_file(kld_args *a, char *path, size_t cap, dsq_kld_result *r)
{
    loaded q = {0};
    dsq_tokens ids = {0};
    int ctx = a->o.ctx;
    if (!ctx) {
        dsq_kld_reader *rd;
        DSQ_TRY(dsq_kld_reader_open(a->logits, &rd));
        ctx = (int)dsq_kld_reader_header(rd)->n_ctx;
        dsq_kld_reader_close(rd);
    }
    dsq_status s = load(a, a->pos[0], ctx, true, &q);
    if (s == DSQ_OK && a->data) s = text_tokens(a, q.tok, path, cap, &ids);
    if (s == DSQ_OK && !a->data) a->o.bos = dsq_tokenizer_add_bos(q.tok) ? dsq_tokenizer_bos(q.tok) : -1;
    if (s == DSQ_OK) s = dsq_kld_from_file(a->logits, q.c, a->data ? ids.ids : NULL, (int64_t)ids.n, &a->o, r);
    dsq_tokens_free(&ids);
    unload(&q);
    return s;
}

static dsq_status run_compute(kld_args *a, char *path, size_t cap, dsq_kld_result *r)
{
    loaded b = {0}, q = {0};
    dsq_tokens ids = {0};
    a->o.save_path = a->save;
    dsq_status s = load(a, a->pos[0], a->o.ctx, true, &b);
    if (s == DSQ_OK && a->n_pos == 2) s = load(a, a->pos[1], a->o.ctx, false, &q);
    if (s == DSQ_OK) s = text_tokens(a, b.tok, path, cap, &ids);
    if (s == DSQ_OK) s = dsq_kld_compute(b.c, q.c, ids.ids, (int64_t)ids.n, &a->o, r);
    dsq_tokens_free(&ids);
    unload(&q);
    unload(&b);
    return s;
}

int dsq_cmd_kld(int argc, char **argv)
{
    kld_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    a.o.progress = progress;
    char data_path[4096] = "";
    dsq_kld_result r;
    dsq_status s = a.logits ? run_from_file(&a, data_path, sizeof data_path, &r)
                            : run_compute(&a, data_path, sizeof data_path, &r);
    if (s != DSQ_OK) return dsq_cli_fail();
    bool compared = a.logits || a.n_pos == 2;
    if (!compared) {
        fprintf(stderr, "dsquant: base log-probabilities of %d chunks of %d tokens saved to %s\n", r.n_chunks, r.ctx,
                a.save);
        if (a.json) print_saved(&a, &r);
        return 0;
    }
    if (a.json)
        print_json(&a, data_path[0] ? data_path : NULL, &r);
    else
        print_text(&r);
    return 0;
}
