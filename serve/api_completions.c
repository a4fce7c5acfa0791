/* POST /v1/completions and /v1/chat/completions: prompts to engine
 * requests, engine tokens to OpenAI's response shapes, whole or streamed as
 * server-sent events (chunks with id, object, created, model and choices;
 * a usage-only chunk with stream_options.include_usage; `data: [DONE]`).
 *
 * Text is the concatenation of the tokens' pieces; stop strings are looked
 * for in the generated text as it grows (the text ends before the stop
 * string, which is not echoed, and the request is cancelled), and a stream
 * holds back as many bytes as the longest stop string could still need. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/grow.h"
#include "core/log.h"
#include "core/utf8.h"
#include "serve/api_request.h"

#define MAX_PROMPTS 256
#define WAIT_MS 100
#define KEEPALIVE_S 10.0

typedef struct choice {
    dsq_srv_req *req;
    int n_prompt, n_gen;
    char *text; /* echoed prompt + generated text */
    size_t len, cap, gen0, sent, scanned;
    size_t lp_off; /* text offset of the next logprob entry */
    dsq_srv_finish fin;
    bool done;
    cJSON *lp; /* logprob entries not yet sent (legacy: an object of four arrays; chat: an array) */
} choice;

typedef struct job {
    dsq_server *sv;
    bool chat;
    dsq_api_params p;
    cJSON *body; /* owns the stop strings */
    choice *ch;
    int n_ch, fd, cur;
    size_t max_stop;
    char id[48];
    long long created;
    /* streaming */
    bool role_sent, ended;
    double last_out; /* when bytes last went out, for keep-alive comments */
    char *out;
    size_t out_len, out_cap, out_off;
} job;

/* ---- text and log probabilities ---- */

static bool append(char **p, size_t *len, size_t *cap, const char *s, size_t n)
{
    char *q = dsq_grow(*p, cap, *len + n + 1, 1);
    if (!q) return false;
    *p = q;
    memcpy(q + *len, s, n);
    *len += n;
    q[*len] = 0;
    return true;
}

/* A token's text for logprobs: its piece with special tokens shown, made
 * valid UTF-8; "token_id:N" when the request asked for ids (vLLM's
 * return_tokens_as_token_ids). */
static cJSON *token_string(const dsq_tokenizer *tok, int32_t id, bool as_id)
{
    if (as_id) {
        char b[32];
        snprintf(b, sizeof b, "token_id:%d", (int)id);
        return cJSON_CreateString(b);
    }
    size_t n = 0;
    const char *piece = dsq_tokenizer_piece(tok, id, true, &n);
    char *fixed = dsq_utf8_repair(piece ? piece : "", n);
    cJSON *s = fixed ? cJSON_CreateString(fixed) : NULL;
    free(fixed);
    return s;
}

static cJSON *token_bytes(const dsq_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *piece = dsq_tokenizer_piece(tok, id, true, &n);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)piece[i]));
    return a;
}

static cJSON *legacy_lp_new(void)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON_AddArrayToObject(o, "text_offset");
    return o;
}

/* One token's entry: legacy arrays (completions) or a content item (chat). */
static void add_logprob(job *j, choice *c, const dsq_srv_tok *t)
{
    const dsq_tokenizer *tok = j->sv->tok;
    bool ids = j->p.ids_as_tokens;
    if (!c->lp) c->lp = j->chat ? cJSON_CreateArray() : legacy_lp_new();
    if (!c->lp) return;
    if (j->chat) {
        cJSON *e = cJSON_CreateObject(), *tops = cJSON_CreateArray();
        if (!e || !tops) return cJSON_Delete(e), cJSON_Delete(tops);
        cJSON_AddItemToObject(e, "token", token_string(tok, t->id, ids));
        cJSON_AddNumberToObject(e, "logprob", t->logprob);
        cJSON_AddItemToObject(e, "bytes", token_bytes(tok, t->id));
        for (int i = 0; i < t->n_top; i++) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddItemToObject(a, "token", token_string(tok, t->top_id[i], ids));
            cJSON_AddNumberToObject(a, "logprob", t->top_lp[i]);
            cJSON_AddItemToObject(a, "bytes", token_bytes(tok, t->top_id[i]));
            cJSON_AddItemToArray(tops, a);
        }
        cJSON_AddItemToObject(e, "top_logprobs", tops);
        cJSON_AddItemToArray(c->lp, e);
        return;
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "tokens"), token_string(tok, t->id, ids));
    cJSON *tl = cJSON_GetObjectItem(c->lp, "token_logprobs"), *tp = cJSON_GetObjectItem(c->lp, "top_logprobs");
    if (isnan(t->logprob)) {
        cJSON_AddItemToArray(tl, cJSON_CreateNull());
        cJSON_AddItemToArray(tp, cJSON_CreateNull());
    } else {
        cJSON_AddItemToArray(tl, cJSON_CreateNumber(t->logprob));
        cJSON *d = cJSON_CreateObject();
        for (int i = 0; d && i < t->n_top; i++) {
            cJSON *k = token_string(tok, t->top_id[i], ids);
            if (k && !cJSON_GetObjectItemCaseSensitive(d, k->valuestring))
                cJSON_AddNumberToObject(d, k->valuestring, t->top_lp[i]);
            cJSON_Delete(k);
        }
        cJSON *k = token_string(tok, t->id, ids); /* the chosen token is always listed, as vLLM does */
        if (d && k && !cJSON_GetObjectItemCaseSensitive(d, k->valuestring))
            cJSON_AddNumberToObject(d, k->valuestring, t->logprob);
        cJSON_Delete(k);
        cJSON_AddItemToArray(tp, d);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "text_offset"), cJSON_CreateNumber((double)c->lp_off));
}

/* The earliest stop string in the generated text, searched where new bytes could complete one. */
static void find_stop(job *j, choice *c)
{
    if (!j->p.n_stop || !c->text) return; /* no text yet: the first tokens decoded to no bytes */
    size_t gl = c->len - c->gen0, from = c->scanned + 1 > j->max_stop ? c->scanned + 1 - j->max_stop : 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < j->p.n_stop; i++) {
        const char *hit = memmem(c->text + c->gen0 + from, gl - from, j->p.stop[i], strlen(j->p.stop[i]));
        if (hit && (size_t)(hit - (c->text + c->gen0)) < best) best = (size_t)(hit - (c->text + c->gen0));
    }
    c->scanned = gl;
    if (best == (size_t)-1) return;
    c->len = c->gen0 + best;
    c->text[c->len] = 0;
    c->fin = DSQ_FINISH_STOP;
    c->done = true;
    dsq_srv_cancel(c->req);
}

static void take_token(job *j, choice *c, const dsq_srv_tok *t)
{
    size_t n = 0;
    const char *piece = t->stop ? "" : dsq_tokenizer_piece(j->sv->tok, t->id, false, &n);
    if (j->p.sp.logprobs >= 0 && (!t->prompt || j->p.sp.echo_logprobs)) add_logprob(j, c, t);
    c->lp_off += n;
    if (t->prompt) return; /* the echoed prompt's text is in place already */
    c->n_gen++;
    if (n && !append(&c->text, &c->len, &c->cap, piece, n)) {
        c->fin = DSQ_FINISH_ERROR;
        c->done = true;
        return;
    }
    find_stop(j, c);
}

/* Reads what the engine has for c (waiting up to ms); false when the client left. */
static bool pump(job *j, choice *c, int ms)
{
    dsq_srv_tok ev[32];
    dsq_srv_finish fin = DSQ_FINISH_NONE;
    int n = dsq_srv_wait(c->req, ev, 32, ms, &fin);
    for (int i = 0; i < n && !c->done; i++) take_token(j, c, &ev[i]);
    if (!c->done && fin != DSQ_FINISH_NONE) {
        c->fin = fin;
        c->done = true;
    }
    if (!c->done && n == 0 && dsq_peer_gone(j->fd)) {
        DSQ_LOGD("serve: %s: the client closed the connection", j->id);
        dsq_srv_cancel(c->req);
        return false;
    }
    return true;
}

/* ---- prompts ---- */

static bool id_list(dsq_server *sv, const cJSON *a, dsq_tokens *t, dsq_reply *r)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, a)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= (double)sv->m->vocab)
            return dsq_reply_error(r, 400, "prompt", "prompt token ids must be integers in [0, %lld)",
                                   (long long)sv->m->vocab),
                   false;
        int32_t *ids = dsq_grow(t->ids, &t->cap, t->n + 1, sizeof *ids);
        if (!ids) return dsq_reply_error(r, 500, NULL, "out of memory"), false;
        t->ids = ids;
        t->ids[t->n++] = (int32_t)x->valuedouble;
    }
    if (t->n == 0) return dsq_reply_error(r, 400, "prompt", "a prompt is empty"), false;
    return true;
}

static bool text_prompt(dsq_server *sv, const char *s, dsq_tokens *t, dsq_reply *r)
{
    if (dsq_tokenizer_encode(sv->tok, s, strlen(s), true, true, t) != DSQ_OK)
        return dsq_reply_error(r, 400, "prompt", "cannot tokenize the prompt: %s", dsq_errmsg()), false;
    if (t->n == 0) return dsq_reply_error(r, 400, "prompt", "the prompt is empty"), false;
    return true;
}

/* prompt: a string, a list of strings, a list of ids or a list of id lists. */
static bool completion_prompts(dsq_server *sv, const cJSON *b, dsq_tokens *out, int *n, dsq_reply *r)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    *n = 0;
    if (cJSON_IsString(p)) {
        *n = 1;
        return text_prompt(sv, p->valuestring, &out[0], r);
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return dsq_reply_error(r, 400, "prompt", "prompt must be a string, a list of strings or token ids"), false;
    if (cJSON_IsNumber(p->child)) {
        *n = 1;
        return id_list(sv, p, &out[0], r);
    }
    if (cJSON_GetArraySize(p) > MAX_PROMPTS)
        return dsq_reply_error(r, 400, "prompt", "at most %d prompts per request", MAX_PROMPTS), false;
    const cJSON *x;
    cJSON_ArrayForEach(x, p)
    {
        bool ok = cJSON_IsString(x) ? text_prompt(sv, x->valuestring, &out[*n], r)
                  : cJSON_IsArray(x)
                      ? id_list(sv, x, &out[*n], r)
                      : (dsq_reply_error(r, 400, "prompt", "prompt lists hold strings or id lists"), false);
        (*n)++;
        if (!ok) return false;
    }
    return true;
}

/* ---- responses ---- */

static const char *finish_name(dsq_srv_finish f)
{
    return f == DSQ_FINISH_STOP ? "stop" : f == DSQ_FINISH_LENGTH ? "length" : "abort";
}

static cJSON *usage(const job *j)
{
    int pt = 0, ct = 0;
    for (int i = 0; i < j->n_ch; i++) pt += j->ch[i].n_prompt, ct += j->ch[i].n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", pt);
    cJSON_AddNumberToObject(u, "completion_tokens", ct);
    cJSON_AddNumberToObject(u, "total_tokens", pt + ct);
    return u;
}

static cJSON *envelope(const job *j, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object",
                            j->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->sv->name);
    return o;
}

/* A string item from bytes that may not be valid UTF-8. */
static cJSON *text_item(const char *s, size_t n)
{
    char *fixed = dsq_utf8_repair(s, n);
    cJSON *x = fixed ? cJSON_CreateString(fixed) : NULL;
    free(fixed);
    return x;
}

/* One choice: text (or message / delta) bytes [from, to), logprobs taken, finish reason or null. */
static cJSON *choice_obj(job *j, int idx, size_t from, size_t to, bool delta, bool role, const char *finish)
{
    choice *c = &j->ch[idx];
    const char *text = c->text ? c->text + from : ""; /* no text yet: max_tokens 0 */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", idx);
    if (j->chat) {
        cJSON *m = cJSON_AddObjectToObject(o, delta ? "delta" : "message");
        if (role) cJSON_AddStringToObject(m, "role", "assistant");
        if (to > from || !delta || role) cJSON_AddItemToObject(m, "content", text_item(text, to - from));
    } else {
        cJSON_AddItemToObject(o, "text", text_item(text, to - from));
    }
    if (c->lp && j->chat) {
        cJSON *l = cJSON_AddObjectToObject(o, "logprobs");
        cJSON_AddItemToObject(l, "content", c->lp);
    } else if (c->lp) {
        cJSON_AddItemToObject(o, "logprobs", c->lp);
    } else {
        cJSON_AddNullToObject(o, "logprobs");
    }
    c->lp = NULL;
    if (finish)
        cJSON_AddStringToObject(o, "finish_reason", finish);
    else
        cJSON_AddNullToObject(o, "finish_reason");
    if (!j->chat && !delta) cJSON_AddNullToObject(o, "stop_reason");
    return o;
}

static void whole_reply(job *j, dsq_reply *r)
{
    for (int i = 0; i < j->n_ch; i++) {
        choice *c = &j->ch[i];
        while (!c->done)
            if (!pump(j, c, WAIT_MS)) return dsq_reply_error(r, 499, NULL, "the client closed the connection");
        if (c->fin == DSQ_FINISH_ERROR)
            return dsq_reply_error(r, 500, NULL, "%s", c->req ? dsq_srv_error(c->req) : "out of memory");
    }
    cJSON *o = envelope(j, false), *chs = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < j->n_ch; i++)
        cJSON_AddItemToArray(chs, choice_obj(j, i, 0, j->ch[i].len, false, true, finish_name(j->ch[i].fin)));
    cJSON_AddItemToObject(o, "usage", usage(j));
    dsq_reply_json(r, 200, o);
}

/* ---- streaming ---- */

static void sse(job *j, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    bool ok = append(&j->out, &j->out_len, &j->out_cap, "data: ", 6) &&
              append(&j->out, &j->out_len, &j->out_cap, s, strlen(s)) &&
              append(&j->out, &j->out_len, &j->out_cap, "\n\n", 2);
    (void)ok;
    free(s);
}

/* Bytes of c's text that can go out now: not an unfinished UTF-8 character,
 * nor what a stop string might still claim. */
static size_t sendable(const job *j, const choice *c)
{
    if (c->done) return c->len;
    size_t end = c->len, hold = j->max_stop > 0 ? j->max_stop - 1 : 0;
    end = end > c->gen0 + hold ? end - hold : c->gen0;
    if (end <= c->sent) return c->sent;
    return c->sent + dsq_utf8_complete(c->text + c->sent, end - c->sent);
}

static void stream_chunk(job *j, int idx, const char *finish)
{
    choice *c = &j->ch[idx];
    size_t to = sendable(j, c);
    bool role = j->chat && !j->role_sent;
    if (to == c->sent && !c->lp && !finish && !role) return;
    cJSON *o = envelope(j, true), *chs = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(chs, choice_obj(j, idx, c->sent, to, true, role, finish));
    if (j->p.include_usage) cJSON_AddNullToObject(o, "usage");
    c->sent = to;
    j->role_sent = true;
    sse(j, o);
}

static void stream_error(job *j, const char *msg)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", "server_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", 500);
    sse(j, o);
}

/* Advances the stream until it has bytes to send; false when the client left. */
static bool stream_fill(job *j)
{
    while (j->out_off == j->out_len && !j->ended) {
        j->out_len = j->out_off = 0;
        if (j->cur == j->n_ch) {
            if (j->p.include_usage) {
                cJSON *o = envelope(j, true);
                cJSON_AddArrayToObject(o, "choices");
                cJSON_AddItemToObject(o, "usage", usage(j));
                sse(j, o);
            }
            append(&j->out, &j->out_len, &j->out_cap, "data: [DONE]\n\n", 14);
            j->ended = true;
            break;
        }
        choice *c = &j->ch[j->cur];
        if (!pump(j, c, WAIT_MS)) return false;
        if (!c->done) {
            stream_chunk(j, j->cur, NULL);
            /* a request waiting in the queue says nothing for a while: an SSE comment keeps the connection alive */
            if (j->out_len == 0 && dsq_now_s() - j->last_out > KEEPALIVE_S)
                append(&j->out, &j->out_len, &j->out_cap, ": keep-alive\n\n", 14);
            continue;
        }
        if (c->fin == DSQ_FINISH_ERROR)
            stream_error(j, c->req ? dsq_srv_error(c->req) : "out of memory");
        else
            stream_chunk(j, j->cur, finish_name(c->fin));
        j->cur++;
        j->role_sent = false;
    }
    return true;
}

static ssize_t stream_next(void *st, char *buf, size_t max)
{
    job *j = st;
    if (!stream_fill(j)) return -1;
    size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
    if (n > 0) memcpy(buf, j->out + j->out_off, n);
    j->last_out = dsq_now_s();
    j->out_off += n;
    return (ssize_t)n;
}

/* ---- the request ---- */

static void job_free(job *j)
{
    for (int i = 0; i < j->n_ch; i++) {
        dsq_srv_release(j->ch[i].req);
        free(j->ch[i].text);
        cJSON_Delete(j->ch[i].lp);
    }
    free(j->ch);
    free(j->out);
    cJSON_Delete(j->body);
    free(j);
}

static void stream_done(void *st) { job_free(st); }

/* The echoed prompt's text, the pieces of its tokens. */
static bool echo_text(job *j, choice *c, const dsq_tokens *t)
{
    for (size_t i = 0; i < t->n; i++) {
        size_t n = 0;
        const char *piece = dsq_tokenizer_piece(j->sv->tok, t->ids[i], false, &n);
        if (n && !append(&c->text, &c->len, &c->cap, piece, n)) return false;
    }
    c->gen0 = c->len;
    return true;
}

/* Submits every prompt; on failure cancels those already queued. */
static bool submit_all(job *j, dsq_tokens *prompts, int32_t chat_end, dsq_reply *r)
{
    dsq_server *sv = j->sv;
    int32_t stops[2];
    int n_stops = 0;
    if (dsq_tokenizer_eos(sv->tok) >= 0) stops[n_stops++] = dsq_tokenizer_eos(sv->tok);
    if (chat_end >= 0 && (n_stops == 0 || chat_end != stops[0])) stops[n_stops++] = chat_end;
    for (int i = 0; i < j->n_ch; i++) {
        choice *c = &j->ch[i];
        dsq_srv_params sp = j->p.sp;
        int room = sv->o.n_ctx - (int)prompts[i].n;
        sp.max_tokens = j->p.max_tokens < 0 ? (room > 0 ? room : 0) : j->p.max_tokens;
        sp.stop_ids = stops;
        sp.n_stop_ids = n_stops;
        c->n_prompt = (int)prompts[i].n;
        if (j->p.echo && !echo_text(j, c, &prompts[i])) return dsq_reply_error(r, 500, NULL, "out of memory"), false;
        if (prompts[i].n > (size_t)sv->o.n_ctx) {
            dsq_reply_error(r, 400, j->chat ? "messages" : "prompt",
                            "the prompt has %zu tokens; this server's context is %d", prompts[i].n, sv->o.n_ctx);
            return false;
        }
        dsq_status s = dsq_srv_submit(sv->eng, prompts[i].ids, (int)prompts[i].n, &sp, &c->req);
        if (s == DSQ_ERR_UNSUPPORTED) {
            r->retry_after = 1;
            dsq_reply_error(r, atomic_load(&sv->draining) ? 503 : 429, NULL, "%s", dsq_errmsg());
        } else if (s != DSQ_OK) {
            dsq_reply_error(r, s == DSQ_ERR_ARG ? 400 : 500, s == DSQ_ERR_ARG ? "max_tokens" : NULL, "%s",
                            dsq_errmsg());
        }
        if (s != DSQ_OK) return false;
    }
    return true;
}

void dsq_api_completions(dsq_server *sv, const dsq_http_req *q, bool chat, dsq_reply *r)
{
    job *j = calloc(1, sizeof *j);
    dsq_tokens prompts[MAX_PROMPTS];
    memset(prompts, 0, sizeof prompts);
    int n = 0;
    int32_t chat_end = -1;
    if (!j) return dsq_reply_error(r, 500, NULL, "out of memory");
    j->sv = sv;
    j->chat = chat;
    j->fd = q->fd;
    j->created = (long long)time(NULL);
    static _Atomic unsigned long long seq;
    snprintf(j->id, sizeof j->id, "%s-%llx%llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)j->created,
             (unsigned long long)++seq);
    bool ok = dsq_api_parse_body(q, r, &j->body) && dsq_api_check_model(sv, j->body, r) &&
              dsq_api_parse_params(j->body, chat, &j->p, r);
    if (ok && chat) {
        ok = dsq_api_chat_prompt(sv, cJSON_GetObjectItemCaseSensitive(j->body, "messages"), &prompts[0], &chat_end, r);
        n = 1;
    } else if (ok) {
        ok = completion_prompts(sv, j->body, prompts, &n, r);
    }
    for (int i = 0; i < j->p.n_stop; i++)
        if (strlen(j->p.stop[i]) > j->max_stop) j->max_stop = strlen(j->p.stop[i]);
    if (ok && !(j->ch = calloc((size_t)n, sizeof *j->ch))) ok = (dsq_reply_error(r, 500, NULL, "out of memory"), false);
    if (ok) j->n_ch = n;
    if (ok) ok = submit_all(j, prompts, chat_end, r);
    for (int i = 0; i < n; i++) dsq_tokens_free(&prompts[i]);
    if (!ok) return job_free(j);
    if (!j->p.stream) {
        whole_reply(j, r);
        return job_free(j);
    }
    j->last_out = dsq_now_s();
    r->status = 200;
    r->stream = (dsq_stream){stream_next, stream_done, j};
}
