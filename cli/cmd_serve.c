/* dsquant serve: the OpenAI-compatible validation server (serve/server.h).
 * Listens first (/health says 503 while the model loads), loads, then
 * serves until SIGTERM or SIGINT, when it refuses new requests, lets those
 * in flight finish (up to --grace seconds) and exits 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "serve/server.h"

static const char g_usage[] =
    "usage: dsquant serve MODEL [options]\n"
    "\n"
    "Serves MODEL (a GGUF file, a Hugging Face folder or any INT/FP8 artifact the\n"
    "runtime reads) on an OpenAI-compatible HTTP API with continuous batching:\n"
    "/v1/completions (echo + logprobs for lm-eval), /v1/chat/completions, /v1/models,\n"
    "/tokenize, /detokenize, /tokenizer_info (vLLM's shapes), /health, /metrics.\n"
    "\n"
    "options:\n"
    "  --host H              address to listen on (default 127.0.0.1)\n"
    "  --port N              port (default 8000; 0: any free port, printed)\n"
    "  --served-name N       the model's name in responses and /v1/models (default: MODEL)\n"
    "  --strict-model        refuse requests whose \"model\" is not that name (default: any name)\n"
    "  --ctx N               positions per sequence (default: min(2048, the model's))\n"
    "  --parallel P          sequences decoded together (default 4)\n"
    "  --max-queue Q         requests waiting beyond those (default 64; more get 429)\n"
    "  --chunk N             prompt tokens prefilled per step (default 512)\n"
    "  --api-key K           require \"Authorization: Bearer K\"\n"
    "  --api-key-file F      the same, the key read from F's first line\n"
    "  --chat-template T     auto (default: the model's) or chatml, llama3, llama2, mistral, deepseek-r1\n"
    "  --max-body BYTES      largest request body (default 16777216; larger: 413)\n"
    "  --request-timeout S   seconds a client has to deliver a whole request, headers and\n"
    "                        body, from connecting or from its last answer (default 30);\n"
    "                        slower clients are cut off\n"
    "  --grace S             seconds in-flight requests get after SIGTERM (default 30)\n"
    "  --threads T           CPU threads for the forward pass (default: all)\n"
    "  --int8-act            prompts over Q8_0, Q4_0, Q5_0 and IQ4_NL weights in int8 on\n"
    "                        activations rounded to Q8_0, as llama.cpp and the decode steps\n"
    "                        compute them: faster prefill; scores then differ from\n"
    "                        `dsquant ppl` in the last digits (default: F32 activations)\n"
    "  -h, --help            this text\n";

typedef struct serve_args {
    dsq_serve_opts o;
    const char *key_file;
    int grace, request_timeout;
} serve_args;

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    serve_args *a = user;
    const char *opt = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(opt, "--strict-model")) {
        a->o.strict_model = true;
        return 0;
    }
    if (!strcmp(opt, "--int8-act")) {
        a->o.int8_act = true;
        return 0;
    }
    ++*i;
    const char **str = !strcmp(opt, "--host")            ? &a->o.host
                       : !strcmp(opt, "--served-name")   ? &a->o.served_name
                       : !strcmp(opt, "--api-key")       ? &a->o.api_key
                       : !strcmp(opt, "--api-key-file")  ? &a->key_file
                       : !strcmp(opt, "--chat-template") ? &a->o.chat_template
                                                         : NULL;
    if (str) {
        if (!val || !val[0]) return dsq_cli_usage_error("serve", opt, " needs a value");
        *str = val;
        return 0;
    }
    struct {
        const char *name;
        long long lo, hi;
        int *dst;
    } ints[] = {{"--port", 0, 65535, &a->o.port},       {"--ctx", 2, 1 << 22, &a->o.n_ctx},
                {"--parallel", 1, 256, &a->o.parallel}, {"--max-queue", 0, 1 << 20, &a->o.max_queue},
                {"--chunk", 1, 1 << 16, &a->o.chunk},   {"--threads", 1, 1024, &a->o.threads},
                {"--grace", 0, 86400, &a->grace},       {"--request-timeout", 1, 86400, &a->request_timeout}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        if (strcmp(opt, ints[k].name)) continue;
        long long v = dsq_cli_parse_int(opt, val, ints[k].lo, ints[k].hi);
        if (v < 0) return 2;
        *ints[k].dst = (int)v;
        return 0;
    }
    if (!strcmp(opt, "--max-body")) {
        long long v = dsq_cli_parse_int(opt, val, 1024, 1ll << 32);
        if (v < 0) return 2;
        a->o.max_body = (size_t)v;
        return 0;
    }
    return dsq_cli_usage_error("serve", "unknown option ", opt);
}

/* The first line of the key file, without its newline. */
static dsq_status read_key(const char *path, char **out)
{
    FILE *f = fopen(path, "r");
    if (!f) return dsq_fail_errno(DSQ_ERR_IO, "--api-key-file %s", path);
    char buf[4096];
    bool got = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    buf[got ? strcspn(buf, "\r\n") : 0] = 0;
    if (!buf[0]) return dsq_fail(DSQ_ERR_ARG, "--api-key-file %s: the first line is empty", path);
    if (!(*out = strdup(buf))) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    return DSQ_OK;
}

static int serve(serve_args *a)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    /* every thread started from here on inherits the mask; this one takes the signals */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char *key = NULL;
    if (a->key_file && read_key(a->key_file, &key) != DSQ_OK) return dsq_cli_fail();
    if (key) a->o.api_key = key;
    dsq_server *sv = NULL;
    a->o.request_timeout = a->request_timeout;
    if (dsq_server_start(&a->o, &sv) != DSQ_OK) {
        free(key);
        return dsq_cli_fail();
    }
    DSQ_LOGI("serve: listening on http://%s:%d, loading %s", a->o.host, dsq_server_port(sv), a->o.model_path);
    if (dsq_server_load(sv) != DSQ_OK) {
        int rc = dsq_cli_fail();
        dsq_server_free(sv);
        free(key);
        return rc;
    }
    fprintf(stderr, "dsquant: serving %s on http://%s:%d (%d sequences decoded together)\n", a->o.model_path, a->o.host,
            dsq_server_port(sv), a->o.parallel);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    fprintf(stderr, "dsquant: %s: finishing the requests in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    dsq_server_stop(sv, (double)a->grace);
    dsq_server_free(sv);
    free(key);
    return 0;
}

int dsq_cmd_serve(int argc, char **argv)
{
    serve_args a;
    memset(&a, 0, sizeof a);
    a.o.host = "127.0.0.1";
    a.o.port = 8000;
    a.o.parallel = 4;
    a.o.max_queue = 64;
    a.o.chunk = 512;
    a.o.chat_template = "auto";
    a.o.max_body = 16u << 20;
    a.request_timeout = 30;
    a.grace = 30;
    const char *pos[1];
    int n_pos, rc = dsq_cli_walk(argc, argv, "serve", g_usage, parse_opt, &a, pos, 1, &n_pos);
    if (rc) return rc < 0 ? 0 : rc;
    if (n_pos < 1) return dsq_cli_usage_error("serve", "missing MODEL", NULL);
    if (a.o.api_key && a.key_file)
        return dsq_cli_usage_error("serve", "--api-key and --api-key-file", " exclude each other");
    a.o.model_path = pos[0];
    return serve(&a);
}
