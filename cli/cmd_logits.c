/* dsquant logits: the runtime's log-probabilities for given token ids, as a
 * raw float32 file, so any other implementation (transformers, llama.cpp)
 * can be compared with ours position by position. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "runtime/forward.h"
#include "runtime/model.h"

static const char g_usage[] =
    "usage: dsquant logits MODEL --tokens IDS -o OUT [--decode N] [--chunk N] [--threads N] [--force] [--json]\n"
    "\n"
    "Runs MODEL (GGUF, Hugging Face folder or quantized artifact) on the token\n"
    "ids and writes the log-softmax of every position's logits to OUT: n rows of\n"
    "vocab float32 values, little-endian, row i predicting token i + 1.\n"
    "\n"
    "options:\n"
    "  --tokens IDS   the token ids, separated by spaces or commas\n"
    "  -o, --output   the output file (written atomically)\n"
    "  --decode N     run the last N tokens one at a time through the KV cache (the\n"
    "                 decode path); the others as one prefill (default 0)\n"
    "  --chunk N      prefill in chunks of N tokens (default: all at once)\n"
    "  --threads N    CPU threads (default: all)\n"
    "  --w8-weight-only  run an 8-bit checkpoint weight-only (activations unquantized),\n"
    "                 as transformers does on the CPU (default: its activation scheme)\n"
    "  --force        replace OUT if it exists\n"
    "  --json         print a JSON summary on stdout\n"
    "  -h, --help     this text\n";

typedef struct logits_args {
    const char *pos[1];
    int n_pos;
    const char *tokens, *out;
    int decode, chunk, threads;
    bool force, json, w8_weight_only;
} logits_args;

static int usage_error(const char *msg, const char *what) { return dsq_cli_usage_error("logits", msg, what); }

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    logits_args *a = user;
    const char *opt = argv[*i];
    if (!strcmp(opt, "--force"))
        a->force = true;
    else if (!strcmp(opt, "--json"))
        a->json = true;
    else if (!strcmp(opt, "--w8-weight-only"))
        a->w8_weight_only = true;
    else {
        const char *val = *i + 1 < argc ? argv[++*i] : NULL;
        if (!val) return usage_error(opt, " needs a value");
        long long v = 0;
        if (!strcmp(opt, "--tokens"))
            a->tokens = val;
        else if (!strcmp(opt, "-o") || !strcmp(opt, "--output"))
            a->out = val;
        else if (!strcmp(opt, "--decode") && (v = dsq_cli_parse_int(opt, val, 0, 1 << 20)) >= 0)
            a->decode = (int)v;
        else if (!strcmp(opt, "--chunk") && (v = dsq_cli_parse_int(opt, val, 1, 1 << 20)) >= 0)
            a->chunk = (int)v;
        else if (!strcmp(opt, "--threads") && (v = dsq_cli_parse_int(opt, val, 1, 4096)) >= 0)
            a->threads = (int)v;
        else if (v < 0)
            return 2;
        else
            return usage_error("unknown option ", opt);
    }
    return 0;
}

/* Ids separated by spaces or commas; each below vocab. */
static dsq_status parse_ids(const char *s, int64_t vocab, int32_t **out, int *n)
{
    size_t cap = strlen(s) / 2 + 1;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return dsq_fail(DSQ_ERR_NOMEM, "--tokens: out of memory");
    int k = 0;
    for (const char *p = s; *p;) {
        if (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
            p++;
            continue;
        }
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v >= vocab || (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            free(ids);
            return dsq_fail(DSQ_ERR_ARG, "--tokens: \"%.20s\" is not a token id below the vocabulary size %lld", p,
                            (long long)vocab);
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    if (k == 0) {
        free(ids);
        return dsq_fail(DSQ_ERR_ARG, "--tokens: no token ids");
    }
    *out = ids;
    *n = k;
    return DSQ_OK;
}

/* In place: row = row - logsumexp(row), in double like llama-perplexity's sums. */
static void log_softmax(float *row, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)row[i] - mx);
    float lse = (float)(mx + log(sum));
    for (int64_t i = 0; i < n; i++) row[i] -= lse;
}

/* Prefill of ids[0..n_pre) (in chunks), then one token at a time. */
static dsq_status run(dsq_ctx *ctx, const int32_t *ids, int n, int n_pre, int chunk, int64_t vocab, float *lp)
{
    for (int p = 0; p < n_pre; p += chunk) {
        int k = n_pre - p < chunk ? n_pre - p : chunk;
        DSQ_TRY(dsq_forward(ctx, ids + p, k, p, lp + (size_t)p * (size_t)vocab));
    }
    for (int p = n_pre; p < n; p++) DSQ_TRY(dsq_forward(ctx, ids + p, 1, p, lp + (size_t)p * (size_t)vocab));
    for (int p = 0; p < n; p++) log_softmax(lp + (size_t)p * (size_t)vocab, vocab);
    return DSQ_OK;
}

static dsq_status write_out(const char *path, bool force, const float *lp, size_t count)
{
    dsq_outfile *f;
    DSQ_TRY(dsq_outfile_open(path, force, &f));
    dsq_status s = dsq_outfile_write(f, lp, count * sizeof *lp);
    if (s != DSQ_OK) {
        dsq_outfile_abort(f);
        return s;
    }
    return dsq_outfile_commit(f);
}

static dsq_status logits_main(const logits_args *a, dsq_model *m)
{
    int32_t *ids = NULL;
    int n = 0;
    DSQ_TRY(parse_ids(a->tokens, m->vocab, &ids, &n));
    if (a->decode > n) {
        free(ids);
        return dsq_fail(DSQ_ERR_ARG, "--decode %d: only %d tokens", a->decode, n);
    }
    int n_pre = n - a->decode, chunk = a->chunk > 0 ? a->chunk : (n_pre > 0 ? n_pre : 1);
    float *lp = malloc((size_t)n * (size_t)m->vocab * sizeof *lp);
    dsq_ctx *ctx = NULL;
    dsq_status s = lp ? dsq_ctx_new(m, n, a->threads, &ctx) : dsq_fail(DSQ_ERR_NOMEM, "logits: out of memory");
    double t0 = dsq_now_s();
    if (s == DSQ_OK) s = run(ctx, ids, n, n_pre, chunk, m->vocab, lp);
    double dt = dsq_now_s() - t0;
    if (s == DSQ_OK) s = write_out(a->out, a->force, lp, (size_t)n * (size_t)m->vocab);
    if (s == DSQ_OK && a->json)
        printf("{\"tokens\": %d, \"vocab\": %lld, \"prefill\": %d, \"decode\": %d, \"seconds\": %.3f, \"output\": "
               "\"%s\"}\n",
               n, (long long)m->vocab, n_pre, a->decode, dt, a->out);
    dsq_ctx_free(ctx);
    free(lp);
    free(ids);
    return s;
}

int dsq_cmd_logits(int argc, char **argv)
{
    logits_args a = {0};
    int rc = dsq_cli_walk(argc, argv, "logits", g_usage, parse_opt, &a, a.pos, 1, &a.n_pos);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.n_pos != 1) return usage_error("missing MODEL", NULL);
    if (!a.tokens) return usage_error("missing --tokens", NULL);
    if (!a.out) return usage_error("missing -o OUT", NULL);
    dsq_model *m;
    dsq_model_opts mo = {a.w8_weight_only};
    if (dsq_model_open_with(a.pos[0], &mo, &m) != DSQ_OK) return dsq_cli_fail();
    dsq_status s = logits_main(&a, m);
    dsq_model_close(m);
    return s == DSQ_OK ? 0 : dsq_cli_fail();
}
