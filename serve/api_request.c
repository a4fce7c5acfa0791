/* Parsing the JSON bodies of /v1/completions and /v1/chat/completions into
 * engine parameters: every field checked for type and range, a 400 naming
 * the field otherwise; fields we do not implement refused by name; fields
 * we do not know logged and ignored (as vLLM does). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "serve/api_request.h"

static const char *g_known[] = {"model",
                                "prompt",
                                "messages",
                                "max_tokens",
                                "max_completion_tokens",
                                "temperature",
                                "top_p",
                                "top_k",
                                "seed",
                                "stop",
                                "presence_penalty",
                                "frequency_penalty",
                                "ignore_eos",
                                "echo",
                                "logprobs",
                                "top_logprobs",
                                "stream",
                                "stream_options",
                                "n",
                                "best_of",
                                "tools",
                                "tool_choice",
                                "response_format",
                                "logit_bias",
                                "suffix",
                                "user",
                                "functions",
                                "function_call",
                                "parallel_tool_calls",
                                "add_generation_prompt",
                                "return_tokens_as_token_ids"};

bool dsq_api_parse_body(const dsq_http_req *q, dsq_reply *r, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(q->body, q->len, &end, false);
    if (!*out) {
        dsq_reply_error(r, 400, NULL, "the body is not valid JSON (near byte %lld)",
                        end ? (long long)(end - q->body) : 0ll);
        return false;
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        dsq_reply_error(r, 400, NULL, "the body must be a JSON object");
        return false;
    }
    return true;
}

bool dsq_api_check_model(dsq_server *sv, const cJSON *body, dsq_reply *r)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (m && !cJSON_IsNull(m) && !cJSON_IsString(m)) {
        dsq_reply_error(r, 400, "model", "model must be a string");
        return false;
    }
    if (sv->o.strict_model && (!cJSON_IsString(m) || strcmp(m->valuestring, sv->name))) {
        dsq_reply_error(r, 404, "model", "the model `%s` does not exist; this server serves `%s`",
                        cJSON_IsString(m) ? m->valuestring : "", sv->name);
        return false;
    }
    return true;
}

/* A number field in [lo, hi]; absent or null leaves *v. */
static bool num_field(const cJSON *b, const char *name, double lo, double hi, double *v, dsq_reply *r)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, name);
    if (!x || cJSON_IsNull(x)) return true;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi) {
        dsq_reply_error(r, 400, name, "%s must be a number in [%g, %g]", name, lo, hi);
        return false;
    }
    *v = x->valuedouble;
    return true;
}

static bool int_field(const cJSON *b, const char *name, double lo, double hi, long long *v, bool *given, dsq_reply *r)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, name);
    if (!x || cJSON_IsNull(x)) return true;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi) {
        dsq_reply_error(r, 400, name, "%s must be an integer in [%.0f, %.0f]", name, lo, hi);
        return false;
    }
    *v = (long long)x->valuedouble;
    if (given) *given = true;
    return true;
}

static bool bool_field(const cJSON *b, const char *name, bool *v, dsq_reply *r)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, name);
    if (!x || cJSON_IsNull(x)) return true;
    if (!cJSON_IsBool(x)) {
        dsq_reply_error(r, 400, name, "%s must be true or false", name);
        return false;
    }
    *v = cJSON_IsTrue(x);
    return true;
}

/* Fields we know but do not implement: refused when they ask for something. */
static bool refuse_unimplemented(const cJSON *b, dsq_reply *r)
{
    long long n = 1;
    if (!int_field(b, "n", 1, 1e9, &n, NULL, r)) return false;
    if (n != 1) return dsq_reply_error(r, 400, "n", "n > 1 is not supported"), false;
    long long best = 1;
    if (!int_field(b, "best_of", 1, 1e9, &best, NULL, r)) return false;
    if (best != 1) return dsq_reply_error(r, 400, "best_of", "best_of > 1 is not supported"), false;
    const char *arrays[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, arrays[i]);
        if (x && !cJSON_IsNull(x) && !(cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0))
            return dsq_reply_error(r, 400, arrays[i], "%s (tool calling) is not supported", arrays[i]), false;
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    if (tc && !cJSON_IsNull(tc) && !(cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")))
        return dsq_reply_error(r, 400, "tool_choice", "tool_choice other than \"none\" is not supported"), false;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(b, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return dsq_reply_error(r, 400, "response_format",
                                   "response_format other than {\"type\": \"text\"} is not "
                                   "supported"),
                   false;
    }
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "logit_bias");
    if (lb && !cJSON_IsNull(lb) && !(cJSON_IsObject(lb) && !lb->child))
        return dsq_reply_error(r, 400, "logit_bias", "logit_bias is not supported"), false;
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(b, "suffix");
    if (sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && !sf->valuestring[0]))
        return dsq_reply_error(r, 400, "suffix", "suffix is not supported"), false;
    return true;
}

static void log_unknown(const cJSON *b)
{
    for (const cJSON *x = b->child; x; x = x->next) {
        bool known = false;
        for (size_t i = 0; i < sizeof g_known / sizeof g_known[0] && !known; i++)
            known = !strcmp(x->string, g_known[i]);
        if (!known) DSQ_LOGI("serve: ignoring unknown request field \"%s\"", x->string);
    }
}

static bool parse_stop(const cJSON *b, dsq_api_params *p, dsq_reply *r)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "stop");
    if (!s || cJSON_IsNull(s)) return true;
    if (cJSON_IsString(s)) {
        p->stop[0] = s->valuestring;
        p->n_stop = s->valuestring[0] ? 1 : 0;
        return true;
    }
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) > DSQ_API_MAX_STOP)
        return dsq_reply_error(r, 400, "stop", "stop must be a string or an array of at most %d strings",
                               DSQ_API_MAX_STOP),
               false;
    const cJSON *x;
    cJSON_ArrayForEach(x, s)
    {
        if (!cJSON_IsString(x)) return dsq_reply_error(r, 400, "stop", "stop must hold strings"), false;
        if (x->valuestring[0]) p->stop[p->n_stop++] = x->valuestring;
    }
    return true;
}

/* logprobs: completions take a count (0..20), chat takes a bool plus top_logprobs. */
static bool parse_logprobs(const cJSON *b, bool chat, dsq_api_params *p, dsq_reply *r)
{
    p->sp.logprobs = -1;
    if (!chat) {
        long long k = -1;
        bool given = false;
        if (!int_field(b, "logprobs", 0, DSQ_SRV_MAX_TOP, &k, &given, r)) return false;
        if (given) p->sp.logprobs = (int)k;
        return true;
    }
    bool want = false;
    long long k = 0;
    bool given = false;
    if (!bool_field(b, "logprobs", &want, r)) return false;
    if (!int_field(b, "top_logprobs", 0, DSQ_SRV_MAX_TOP, &k, &given, r)) return false;
    if (given && !want) return dsq_reply_error(r, 400, "top_logprobs", "top_logprobs needs logprobs: true"), false;
    if (want) p->sp.logprobs = (int)k;
    return true;
}

static uint64_t fresh_seed(void)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ (counter++ << 40);
}

bool dsq_api_parse_params(const cJSON *b, bool chat, dsq_api_params *p, dsq_reply *r)
{
    memset(p, 0, sizeof *p);
    dsq_sampler_params_default(&p->sp.sp);
    log_unknown(b);
    if (!refuse_unimplemented(b, r)) return false;
    double temp = 1, top_p = 1, /* OpenAI's defaults */ pres = 0, freq = 0;
    long long top_k = 0, seed = 0, max_tokens = -1;
    bool seed_given = false, mt_given = false;
    if (!num_field(b, "temperature", 0, 100, &temp, r) || !num_field(b, "top_p", 1e-9, 1, &top_p, r) ||
        !num_field(b, "presence_penalty", -2, 2, &pres, r) || !num_field(b, "frequency_penalty", -2, 2, &freq, r) ||
        !int_field(b, "top_k", -1, 1 << 30, &top_k, NULL, r) ||
        !int_field(b, "seed", -9.2e18, 9.2e18, &seed, &seed_given, r) ||
        !bool_field(b, "ignore_eos", &p->sp.ignore_eos, r) || !bool_field(b, "echo", &p->echo, r) ||
        !bool_field(b, "stream", &p->stream, r) || !bool_field(b, "return_tokens_as_token_ids", &p->ids_as_tokens, r) ||
        !parse_stop(b, p, r) || !parse_logprobs(b, chat, p, r))
        return false;
    const char *mt_name =
        chat && cJSON_GetObjectItemCaseSensitive(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!int_field(b, mt_name, 0, 1 << 30, &max_tokens, &mt_given, r)) return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(b, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return dsq_reply_error(r, 400, "stream_options", "stream_options must be an object"), false;
        if (!bool_field(so, "include_usage", &p->include_usage, r)) return false;
    }
    if (chat && p->echo) return dsq_reply_error(r, 400, "echo", "echo is for /v1/completions"), false;
    p->sp.sp.temp = (float)temp;
    p->sp.sp.top_p = (float)top_p;
    p->sp.sp.top_k = top_k > 0 ? (int)top_k : 0;
    p->sp.sp.seed = seed_given ? (uint64_t)seed : fresh_seed();
    p->sp.presence_penalty = (float)pres;
    p->sp.frequency_penalty = (float)freq;
    /* OpenAI's default for completions is 16 tokens; chat runs to the context's end */
    p->max_tokens = mt_given                                                        ? (int)max_tokens
                    : (!chat && !cJSON_GetObjectItemCaseSensitive(b, "max_tokens")) ? 16
                                                                                    : -1;
    p->sp.echo_logprobs = p->echo && p->sp.logprobs >= 0;
    return true;
}
