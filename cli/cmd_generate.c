/* dsquant generate: text from a prompt, greedy or sampled, streamed as it
 * comes (runtime/sampler.h), optionally through the model's chat template
 * (runtime/chat.h). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "core/status.h"
#include "runtime/chat.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"

static const char g_usage[] =
    "usage: dsquant generate MODEL -p PROMPT [options]\n"
    "\n"
    "Continues PROMPT with MODEL (a GGUF file or a Hugging Face folder), printing the\n"
    "new text as it is generated; speed goes to stderr. Greedy unless --temp > 0.\n"
    "\n"
    "options:\n"
    "  -p, --prompt TEXT     the prompt (special tokens written in it are parsed)\n"
    "  -n, --n-predict N     at most N new tokens (default 128; -1: until EOS or the context is full)\n"
    "  --temp T              temperature; 0 (default) is greedy\n"
    "  --top-k K             keep the K most likely tokens (default 0: off)\n"
    "  --top-p P             keep the most likely tokens up to probability P (default 1: off)\n"
    "  --seed S              random seed for sampling (default: from the clock, printed)\n"
    "  --chat                wrap the prompt as a user message in the model's chat template\n"
    "                        (ChatML, Llama 3, Llama 2/Mistral, DeepSeek-R1, rendered in C: no Jinja)\n"
    "                        and also stop at the template's end-of-turn token\n"
    "  --system TEXT         with --chat: a system message first\n"
    "  --f32-act             keep activations in F32 in every product, as transformers does\n"
    "                        (default: the decode path rounds them to the weight type's\n"
    "                        dot-product type, as llama.cpp does, and so does the prompt's\n"
    "                        batch for Q8_0, Q4_0, Q5_0 and IQ4_NL weights); much slower\n"
    "  --ctx N               context size (default: prompt + N, at most the model's)\n"
    "  --threads T           CPU threads (default: all)\n"
    "  -h, --help            this text\n";

typedef struct gen_args {
    const char *model, *prompt, *system;
    int n_predict, ctx, threads;
    bool chat, seed_given, f32_act;
    dsq_sampler_params sp;
} gen_args;

static int usage_error(const char *msg, const char *what) { return dsq_cli_usage_error("generate", msg, what); }

static int parse_float(const char *opt, const char *val, float lo, float hi, float *out)
{
    char *end;
    if (!val) return usage_error(opt, " needs a value");
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "dsquant: error: %s: \"%s\" is not a number in [%g, %g]\n", opt, val, lo, hi);
        return 2;
    }
    *out = (float)v;
    return 0;
}

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    gen_args *a = user;
    const char *opt = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long v;
    if (!strcmp(opt, "--chat") || !strcmp(opt, "--f32-act")) {
        if (!strcmp(opt, "--chat"))
            a->chat = true;
        else
            a->f32_act = true;
        return 0;
    }
    ++*i;
    if (!strcmp(opt, "-p") || !strcmp(opt, "--prompt") || !strcmp(opt, "--system")) {
        if (!val) return usage_error(opt, " needs a value");
        if (!strcmp(opt, "--system"))
            a->system = val;
        else
            a->prompt = val;
    } else if (!strcmp(opt, "-n") || !strcmp(opt, "--n-predict")) {
        if ((v = dsq_cli_parse_int(opt, val, -1, 1 << 24)) < -1 || (v == -1 && (!val || strcmp(val, "-1")))) return 2;
        a->n_predict = (int)v;
    } else if (!strcmp(opt, "--temp")) {
        return parse_float(opt, val, 0, 100, &a->sp.temp);
    } else if (!strcmp(opt, "--top-p")) {
        return parse_float(opt, val, 0, 1, &a->sp.top_p);
    } else if (!strcmp(opt, "--top-k") || !strcmp(opt, "--ctx") || !strcmp(opt, "--threads") ||
               !strcmp(opt, "--seed")) {
        long long max = !strcmp(opt, "--seed") ? (1ll << 62) : (1 << 24);
        if ((v = dsq_cli_parse_int(opt, val, 0, max)) < 0) return 2;
        if (!strcmp(opt, "--top-k"))
            a->sp.top_k = (int)v;
        else if (!strcmp(opt, "--ctx"))
            a->ctx = (int)v;
        else if (!strcmp(opt, "--threads"))
            a->threads = (int)v;
        else
            a->sp.seed = (uint64_t)v, a->seed_given = true;
    } else {
        return usage_error("unknown option ", opt);
    }
    return 0;
}

static int parse(int argc, char **argv, gen_args *a)
{
    dsq_sampler_params_default(&a->sp);
    a->n_predict = 128;
    int n_pos, rc = dsq_cli_walk(argc, argv, "generate", g_usage, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc;
    if (!a->model) return usage_error("missing MODEL", NULL);
    if (!a->prompt) return usage_error("missing -p PROMPT", NULL);
    if (a->system && !a->chat) return usage_error("--system needs --chat", NULL);
    return 0;
}

/* Stream state: bytes of pieces not yet printed (an unfinished UTF-8 character). */
typedef struct stream {
    const dsq_tokenizer *tok;
    char pending[64];
    size_t n;
} stream;

static dsq_status on_token(void *user, int32_t t)
{
    stream *s = user;
    size_t len;
    const char *piece = dsq_tokenizer_piece(s->tok, t, false, &len);
    for (size_t i = 0; piece && i < len; i++) {
        if (s->n == sizeof s->pending) { /* not UTF-8 at all: print it as it is */
            fwrite(s->pending, 1, s->n, stdout);
            s->n = 0;
        }
        s->pending[s->n++] = piece[i];
    }
    size_t k = dsq_utf8_complete(s->pending, s->n);
    fwrite(s->pending, 1, k, stdout);
    memmove(s->pending, s->pending + k, s->n - k);
    s->n -= k;
    fflush(stdout);
    return DSQ_OK;
}

/* The prompt's token ids, through the chat template when asked. Adds the
 * chat end token to the stop list. */
static dsq_status prompt_tokens(const gen_args *a, const dsq_model *m, const dsq_tokenizer *tok, dsq_tokens *ids,
                                int32_t *stop, size_t *n_stop)
{
    if (!a->chat) return dsq_tokenizer_encode(tok, a->prompt, strlen(a->prompt), true, true, ids);
    char *tmpl = NULL;
    dsq_chat_template t = {0};
    dsq_status s = dsq_chat_template_text(m->ckpt, &tmpl);
    if (s == DSQ_OK) s = dsq_chat_detect(tmpl, &t);
    dsq_chat_msg msgs[2] = {{"system", a->system}, {"user", a->prompt}};
    int32_t et = -1;
    if (s == DSQ_OK) s = dsq_chat_tokens(&t, tok, a->system ? msgs : msgs + 1, a->system ? 2 : 1, ids, &et);
    if (et >= 0) stop[(*n_stop)++] = et;
    if (s == DSQ_OK)
        fprintf(stderr, "dsquant: chat template: %s%s\n", dsq_chat_format_name(t.format),
                t.default_system ? " (with its default system prompt)" : "");
    dsq_chat_template_free(&t);
    free(tmpl);
    return s;
}

static int context_size(const gen_args *a, const dsq_model *m, size_t n_prompt)
{
    int64_t max = m->arch.max_position_embeddings > 0 ? m->arch.max_position_embeddings : 4096;
    if (a->ctx > 0) return a->ctx;
    int64_t want = a->n_predict < 0 ? 4096 : (int64_t)n_prompt + a->n_predict + 1;
    if (want < DSQ_LINEAR_GEMV_MAX_TOKENS + 1) want = DSQ_LINEAR_GEMV_MAX_TOKENS + 1; /* --f32-act's window */
    return (int)(want < max ? want : max);
}

static dsq_status run(gen_args *a)
{
    dsq_model *m = NULL;
    dsq_tokenizer *tok = NULL;
    dsq_ctx *c = NULL;
    dsq_sampler *smp = NULL;
    dsq_tokens ids = {0}, out = {0};
    int32_t stop[4];
    size_t n_stop = 0;
    dsq_status s = dsq_model_open(a->model, &m);
    if (s == DSQ_OK) s = dsq_tokenizer_load(a->model, &tok);
    if (s == DSQ_OK && dsq_tokenizer_eos(tok) >= 0) stop[n_stop++] = dsq_tokenizer_eos(tok);
    if (s == DSQ_OK) s = prompt_tokens(a, m, tok, &ids, stop, &n_stop);
    if (s == DSQ_OK) s = dsq_ctx_new(m, context_size(a, m, ids.n), a->threads, &c);
    if (s == DSQ_OK)
        dsq_ctx_set_matmul(c, a->f32_act ? DSQ_MATMUL_DEFAULT
                                         : DSQ_MATMUL_INT8ACT); /* the prompt as llama.cpp computes it, in int8 */
    if (s == DSQ_OK && !a->f32_act) s = dsq_model_pack_int8(m);
    if (s == DSQ_OK) s = dsq_sampler_new(&a->sp, m->vocab, &smp);
    if (s == DSQ_OK && a->sp.temp > 0 && !a->seed_given)
        fprintf(stderr, "dsquant: seed %llu\n", (unsigned long long)a->sp.seed);
    stream st = {.tok = tok};
    dsq_gen_opts go = {a->n_predict, stop, n_stop, on_token, &st, a->f32_act};
    dsq_gen_stats gs;
    if (s == DSQ_OK && ids.n > (size_t)1 << 24) s = dsq_fail(DSQ_ERR_ARG, "generate: the prompt is too long");
    if (s == DSQ_OK) s = dsq_generate(c, smp, ids.ids, (int)ids.n, &go, &out, &gs);
    if (st.n) fwrite(st.pending, 1, st.n, stdout);
    if (s == DSQ_OK) {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "dsquant: prompt %d tokens in %.2f s (%.1f tok/s); generated %d tokens in %.2f s (%.1f tok/s)%s\n",
                gs.n_prompt, gs.prompt_s, gs.prompt_s > 0 ? gs.n_prompt / gs.prompt_s : 0, gs.n_gen, gs.gen_s,
                gs.gen_s > 0 ? gs.n_gen / gs.gen_s : 0, gs.stopped ? ", stopped at end of text" : "");
    }
    dsq_tokens_free(&ids);
    dsq_tokens_free(&out);
    dsq_sampler_free(smp);
    dsq_ctx_free(c);
    dsq_tokenizer_free(tok);
    dsq_model_close(m);
    return s;
}

int dsq_cmd_generate(int argc, char **argv)
{
    gen_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a.seed_given) a.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return run(&a) == DSQ_OK ? 0 : dsq_cli_fail();
}
