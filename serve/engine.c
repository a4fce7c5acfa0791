#include "serve/engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "runtime/model.h"

struct dsq_srv_req {
    /* fixed at submission */
    int32_t *prompt;
    int n_prompt;
    dsq_srv_params p;
    int32_t *stop_ids;
    /* the engine's */
    dsq_sampler *smp;
    int32_t *counts; /* per vocabulary entry, for the penalties (NULL without them) */
    int n_gen, n_fed, n_past, slot;
    int32_t last;
    double t_submit, t_last;
    dsq_srv_req *next; /* in the waiting queue */
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dsq_srv_tok *ev;
    int n_ev, cap_ev, read;
    dsq_srv_finish fin;
    char err[256];
    int refs;
    atomic_int cancelled;
};

struct dsq_srv {
    const dsq_model *m;
    dsq_srv_opts o;
    dsq_ctx *ctx;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    dsq_srv_req *qhead, *qtail;
    int n_waiting;
    dsq_srv_req **slots;
    dsq_srv_counts counts;
    dsq_srv_observe_fn observe;
    void *observe_user;
    /* the step's batch */
    int32_t *toks;
    dsq_seg *segs;
    int *out_rows, *seg_out0;
    dsq_srv_req **seg_req;
    float *logits, *raw;
};

/* ---- requests ---- */

static void req_free(dsq_srv_req *r)
{
    dsq_sampler_free(r->smp);
    free(r->counts);
    free(r->prompt);
    free(r->stop_ids);
    free(r->ev);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void req_unref(dsq_srv_req *r)
{
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left == 0) req_free(r);
}

void dsq_srv_release(dsq_srv_req *r)
{
    if (!r) return;
    atomic_store(&r->cancelled, 1);
    req_unref(r);
}

void dsq_srv_cancel(dsq_srv_req *r) { atomic_store(&r->cancelled, 1); }

const char *dsq_srv_error(const dsq_srv_req *r) { return r->err; }

/* Appends one event; false when out of memory (the request then ends in error). */
static bool push_event(dsq_srv_req *r, const dsq_srv_tok *t)
{
    pthread_mutex_lock(&r->mu);
    bool ok = true;
    if (r->n_ev == r->cap_ev) {
        int cap = r->cap_ev ? 2 * r->cap_ev : 64;
        dsq_srv_tok *ev = realloc(r->ev, (size_t)cap * sizeof *ev);
        if (ev)
            r->ev = ev, r->cap_ev = cap;
        else
            ok = false;
    }
    if (ok) r->ev[r->n_ev++] = *t;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void set_finish(dsq_srv_req *r, dsq_srv_finish f, const char *err)
{
    pthread_mutex_lock(&r->mu);
    r->fin = f;
    if (err) snprintf(r->err, sizeof r->err, "%s", err);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int dsq_srv_wait(dsq_srv_req *r, dsq_srv_tok *out, int max, int timeout_ms, dsq_srv_finish *fin)
{
    pthread_mutex_lock(&r->mu);
    if (r->read == r->n_ev && r->fin == DSQ_FINISH_NONE && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (r->read == r->n_ev && r->fin == DSQ_FINISH_NONE)
            if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) break;
    }
    int n = r->n_ev - r->read < max ? r->n_ev - r->read : max;
    if (n > 0) memcpy(out, r->ev + r->read, (size_t)n * sizeof *out);
    r->read += n;
    *fin = r->read == r->n_ev ? r->fin : DSQ_FINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- log probabilities and sampling ---- */

static double log_sum_exp(const float *x, int64_t n)
{
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

/* The k largest entries of x (descending, lower id first on ties). */
static int top_k(const float *x, int64_t n, int k, int32_t *ids)
{
    int have = 0;
    for (int64_t i = 0; i < n; i++) {
        if (have == k && x[i] <= x[ids[k - 1]]) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && x[ids[j - 1]] < x[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    return have;
}

/* tok's log probability under row, and the n_top alternatives. */
static void fill_logprobs(const float *row, int64_t vocab, int n_top, dsq_srv_tok *t)
{
    double lse = log_sum_exp(row, vocab);
    t->logprob = (float)(row[t->id] - lse);
    t->n_top = top_k(row, vocab, n_top < DSQ_SRV_MAX_TOP ? n_top : DSQ_SRV_MAX_TOP, t->top_id);
    for (int i = 0; i < t->n_top; i++) t->top_lp[i] = (float)(row[t->top_id[i]] - lse);
}

/* OpenAI's penalties: each generated token's logit less presence once and
 * frequency times its count. */
static void apply_penalties(const dsq_srv_req *r, float *row, int64_t vocab)
{
    for (int64_t i = 0; i < vocab; i++)
        if (r->counts[i]) row[i] -= r->p.presence_penalty + r->p.frequency_penalty * (float)r->counts[i];
}

static bool is_stop(const dsq_srv_req *r, int32_t t)
{
    for (int i = 0; i < r->p.n_stop_ids; i++)
        if (r->stop_ids[i] == t) return true;
    return false;
}

static void observe(dsq_srv *e, dsq_srv_timing what, double s)
{
    if (e->observe) e->observe(e->observe_user, what, s);
}

/* The next token of r from its logits row; false when the request is done. */
static bool sample_next(dsq_srv *e, dsq_srv_req *r, float *row)
{
    int64_t vocab = e->m->vocab;
    const float *raw = row;
    if (r->counts) {
        memcpy(e->raw, row, (size_t)vocab * sizeof *row);
        raw = e->raw;
        apply_penalties(r, row, vocab);
    }
    dsq_srv_tok t = {.id = dsq_sampler_sample(r->smp, row), .logprob = NAN};
    if (r->p.logprobs >= 0) fill_logprobs(raw, vocab, r->p.logprobs, &t);
    t.stop = !r->p.ignore_eos && is_stop(r, t.id);
    double now = dsq_now_s();
    observe(e, r->n_gen == 0 ? DSQ_TIMING_TTFT : DSQ_TIMING_ITL, now - (r->n_gen == 0 ? r->t_submit : r->t_last));
    r->t_last = now;
    r->n_gen++;
    if (r->counts) r->counts[t.id]++;
    r->last = t.id;
    if (!push_event(r, &t)) {
        set_finish(r, DSQ_FINISH_ERROR, "out of memory for the request's tokens");
        return false;
    }
    if (t.stop) {
        set_finish(r, DSQ_FINISH_STOP, NULL);
        return false;
    }
    if (r->n_gen >= r->p.max_tokens || r->n_past + 1 >= e->o.n_ctx) {
        set_finish(r, DSQ_FINISH_LENGTH, NULL);
        return false;
    }
    return true;
}

/* ---- submission ---- */

dsq_status dsq_srv_submit(dsq_srv *e, const int32_t *prompt, int n_prompt, const dsq_srv_params *p, dsq_srv_req **out)
{
    *out = NULL;
    if (n_prompt <= 0) return dsq_fail(DSQ_ERR_ARG, "the prompt is empty");
    if (n_prompt >= e->o.n_ctx)
        return dsq_fail(DSQ_ERR_ARG, "the prompt has %d tokens; this server's context is %d", n_prompt, e->o.n_ctx);
    if (p->max_tokens < 0 || (int64_t)n_prompt + p->max_tokens > e->o.n_ctx)
        return dsq_fail(DSQ_ERR_ARG, "max_tokens %d with a prompt of %d tokens exceeds the context of %d",
                        p->max_tokens, n_prompt, e->o.n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->m->vocab)
            return dsq_fail(DSQ_ERR_ARG, "prompt token %d is outside the vocabulary of %lld", prompt[i],
                            (long long)e->m->vocab);
    dsq_srv_req *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for a request");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2; /* the submitter's and the engine's */
    r->p = *p;
    r->n_prompt = n_prompt;
    r->slot = -1;
    r->prompt = malloc((size_t)n_prompt * sizeof *r->prompt);
    r->stop_ids = malloc((size_t)(p->n_stop_ids + 1) * sizeof *r->stop_ids);
    bool pen = p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (pen) r->counts = calloc((size_t)e->m->vocab, sizeof *r->counts);
    dsq_status s = r->prompt && r->stop_ids && (r->counts || !pen)
                       ? DSQ_OK
                       : dsq_fail(DSQ_ERR_NOMEM, "out of memory for a request");
    if (s == DSQ_OK) s = dsq_sampler_new(&p->sp, e->m->vocab, &r->smp);
    if (s != DSQ_OK) {
        req_free(r);
        return s;
    }
    memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    if (p->n_stop_ids) memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *p->stop_ids);
    r->p.stop_ids = r->stop_ids;
    r->t_submit = dsq_now_s();
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->n_waiting >= e->o.max_queue) {
        bool stopping = e->stop;
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        stopping ? "the server is shutting down" : "the queue is full (%d waiting requests)",
                        e->o.max_queue);
    }
    if (e->qtail)
        e->qtail->next = r;
    else
        e->qhead = r;
    e->qtail = r;
    e->n_waiting++;
    e->counts.waiting = e->n_waiting;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return DSQ_OK;
}

/* ---- the engine thread ---- */

/* Ends r's stay in the engine (slot and reference). Under e->mu. */
static void leave(dsq_srv *e, dsq_srv_req *r, dsq_srv_finish f, const char *err)
{
    if (r->fin == DSQ_FINISH_NONE) set_finish(r, f, err);
    if (r->slot >= 0) {
        e->slots[r->slot] = NULL;
        e->counts.running--;
        e->counts.kv_used -= r->n_past;
    }
    e->counts.requests_finished[r->fin]++;
    e->counts.prompt_tokens += r->n_fed;
    e->counts.generation_tokens += r->n_gen;
    observe(e, DSQ_TIMING_E2E, dsq_now_s() - r->t_submit);
    req_unref(r);
}

/* Moves waiting requests into free slots; drops cancelled ones. Under e->mu. */
static void admit(dsq_srv *e)
{
    for (int i = 0; i < e->o.n_slots; i++) {
        dsq_srv_req *r = e->slots[i];
        if (r && atomic_load(&r->cancelled)) leave(e, r, DSQ_FINISH_CANCELLED, NULL);
    }
    for (int i = 0; i < e->o.n_slots && e->qhead; i++) {
        if (e->slots[i]) continue;
        dsq_srv_req *r = e->qhead;
        e->qhead = r->next;
        if (!e->qhead) e->qtail = NULL;
        e->n_waiting--;
        if (atomic_load(&r->cancelled)) {
            leave(e, r, DSQ_FINISH_CANCELLED, NULL);
            i--;
            continue;
        }
        r->slot = i;
        e->slots[i] = r;
        e->counts.running++;
        if (r->p.echo_logprobs) {
            dsq_srv_tok first = {.id = r->prompt[0], .prompt = true, .logprob = NAN};
            push_event(r, &first);
        }
    }
    e->counts.waiting = e->n_waiting;
}

static bool any_running(const dsq_srv *e)
{
    for (int i = 0; i < e->o.n_slots; i++)
        if (e->slots[i]) return true;
    return false;
}

/* Which rows of a segment want logits. */
typedef enum { OUT_NONE, OUT_LAST, OUT_ALL } seg_out;

/* One segment of r into the step's batch. */
static void add_seg(dsq_srv *e, dsq_srv_req *r, int pos0, int n, const int32_t *toks, seg_out out, int *ns, int *rows,
                    int *n_out)
{
    int s = (*ns)++;
    e->segs[s] = (dsq_seg){r->slot, pos0, n};
    e->seg_req[s] = r;
    e->seg_out0[s] = out == OUT_NONE ? -1 : *n_out;
    memcpy(e->toks + *rows, toks, (size_t)n * sizeof *toks);
    if (out != OUT_NONE)
        for (int i = out == OUT_ALL ? 0 : n - 1; i < n; i++) e->out_rows[(*n_out)++] = *rows + i;
    *rows += n;
}

/* Decoding slots one row each, then prompt chunks within the budget. */
static int build_batch(dsq_srv *e, int *n_out)
{
    int ns = 0, rows = 0;
    *n_out = 0;
    for (int i = 0; i < e->o.n_slots; i++) {
        dsq_srv_req *r = e->slots[i];
        if (r && r->n_fed == r->n_prompt) add_seg(e, r, r->n_past, 1, &r->last, OUT_LAST, &ns, &rows, n_out);
    }
    int budget = e->o.chunk;
    for (int i = 0; i < e->o.n_slots && budget > 0; i++) {
        dsq_srv_req *r = e->slots[i];
        if (!r || r->n_fed == r->n_prompt) continue;
        int k = r->n_prompt - r->n_fed < budget ? r->n_prompt - r->n_fed : budget;
        /* rows whose logits are wanted: every one for prompt log probabilities, else the prompt's last */
        seg_out out = r->p.echo_logprobs ? OUT_ALL : r->n_fed + k == r->n_prompt ? OUT_LAST : OUT_NONE;
        add_seg(e, r, r->n_fed, k, r->prompt + r->n_fed, out, &ns, &rows, n_out);
        budget -= k;
    }
    return ns;
}

/* The prompt rows' log probabilities: row j predicts prompt token pos0 + j + 1. */
static bool prompt_events(dsq_srv *e, dsq_srv_req *r, const dsq_seg *g, const float *lg)
{
    int64_t vocab = e->m->vocab;
    for (int j = 0; j < g->n; j++) {
        int p = g->pos0 + j + 1;
        if (p >= r->n_prompt) break;
        dsq_srv_tok t = {.id = r->prompt[p], .prompt = true};
        fill_logprobs(lg + (size_t)j * (size_t)vocab, vocab, r->p.logprobs > 0 ? r->p.logprobs : 0, &t);
        if (!push_event(r, &t)) return false;
    }
    return true;
}

/* After the forward: log probabilities, sampling, and who leaves. */
static void finish_step(dsq_srv *e, int ns)
{
    int64_t vocab = e->m->vocab;
    pthread_mutex_lock(&e->mu);
    for (int s = 0; s < ns; s++) {
        dsq_srv_req *r = e->seg_req[s];
        const dsq_seg *g = &e->segs[s];
        bool prefill = r->n_fed < r->n_prompt;
        r->n_past += g->n;
        e->counts.kv_used += g->n;
        if (prefill) r->n_fed += g->n;
        if (e->seg_out0[s] < 0) continue;
        float *lg = e->logits + (size_t)e->seg_out0[s] * (size_t)vocab;
        bool alive = true;
        if (prefill && r->p.echo_logprobs) {
            alive = prompt_events(e, r, g, lg);
            lg += (size_t)(g->n - 1) * (size_t)vocab;
        }
        if (!alive) {
            leave(e, r, DSQ_FINISH_ERROR, "out of memory for the request's tokens");
            continue;
        }
        if (prefill && r->n_fed < r->n_prompt) continue;
        if (r->p.max_tokens == 0) {
            leave(e, r, DSQ_FINISH_LENGTH, NULL);
            continue;
        }
        if (!sample_next(e, r, lg)) leave(e, r, r->fin, NULL);
    }
    pthread_mutex_unlock(&e->mu);
}

/* The forward failed: every request of the batch ends with its message. */
static void fail_step(dsq_srv *e, int ns)
{
    char msg[256];
    snprintf(msg, sizeof msg, "forward pass failed: %s", dsq_errmsg());
    pthread_mutex_lock(&e->mu);
    for (int s = 0; s < ns; s++)
        if (e->seg_req[s]->slot >= 0 && e->slots[e->seg_req[s]->slot] == e->seg_req[s])
            leave(e, e->seg_req[s], DSQ_FINISH_ERROR, msg);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg)
{
    dsq_srv *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        admit(e);
        while (!e->stop && !any_running(e) && !e->qhead) pthread_cond_wait(&e->cv, &e->mu);
        if (!e->stop) admit(e);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        int n_out, ns = build_batch(e, &n_out);
        if (ns == 0) continue;
        dsq_status s = dsq_forward_batch(e->ctx, e->toks, e->segs, ns, e->out_rows, n_out, e->logits);
        if (s == DSQ_OK)
            finish_step(e, ns);
        else
            fail_step(e, ns);
    }
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->o.n_slots; i++)
        if (e->slots[i]) leave(e, e->slots[i], DSQ_FINISH_CANCELLED, NULL);
    while (e->qhead) {
        dsq_srv_req *r = e->qhead;
        e->qhead = r->next;
        e->n_waiting--;
        leave(e, r, DSQ_FINISH_CANCELLED, NULL);
    }
    e->qtail = NULL;
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- life cycle ---- */

void dsq_srv_set_observer(dsq_srv *e, dsq_srv_observe_fn fn, void *user)
{
    pthread_mutex_lock(&e->mu);
    e->observe = fn;
    e->observe_user = user;
    pthread_mutex_unlock(&e->mu);
}

void dsq_srv_counts_get(dsq_srv *e, dsq_srv_counts *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->counts;
    pthread_mutex_unlock(&e->mu);
}

static void free_buffers(dsq_srv *e)
{
    free(e->toks);
    free(e->segs);
    free(e->out_rows);
    free(e->seg_out0);
    free(e->seg_req);
    free(e->logits);
    free(e->raw);
    free(e->slots);
}

void dsq_srv_shutdown(dsq_srv *e)
{
    if (!e || !e->started) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->th, NULL);
    e->started = false;
}

void dsq_srv_free(dsq_srv *e)
{
    if (!e) return;
    dsq_srv_shutdown(e);
    dsq_ctx_free(e->ctx);
    free_buffers(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

static void *exit_at_once(void *arg) { pthread_exit(arg); }

/* The engine thread owns an OpenMP thread pool; when it ends, libgomp ends
 * the pool's threads with pthread_exit, and glibc loads libgcc_s (the
 * unwinder) on the first pthread_exit. At shutdown that first load can
 * race the process's own exit, fail, and abort ("libgcc_s.so.1 must be
 * installed for pthread_exit to work", exit by SIGABRT after SIGTERM).
 * One pthread_exit now, while nothing is ending, loads it for good. */
static void warm_unwinder(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, exit_at_once, NULL) == 0) pthread_join(t, NULL);
}

dsq_status dsq_srv_new(const dsq_model *m, const dsq_srv_opts *o, dsq_srv **out)
{
    *out = NULL;
    if (o->n_slots < 1 || o->n_slots > 1024 || o->n_ctx < 2 || o->chunk < 1 || o->max_queue < 0)
        return dsq_fail(DSQ_ERR_ARG, "serve: %d slots of %d positions, chunks of %d, a queue of %d", o->n_slots,
                        o->n_ctx, o->chunk, o->max_queue);
    dsq_srv *e = calloc(1, sizeof *e);
    if (!e) return dsq_fail(DSQ_ERR_NOMEM, "serve: out of memory");
    e->m = m;
    e->o = *o;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    size_t rows = (size_t)o->n_slots + (size_t)o->chunk, vocab = (size_t)m->vocab;
    e->toks = malloc(rows * sizeof *e->toks);
    e->segs = malloc((size_t)o->n_slots * sizeof *e->segs);
    e->out_rows = malloc(rows * sizeof *e->out_rows);
    e->seg_out0 = malloc((size_t)o->n_slots * sizeof *e->seg_out0);
    e->seg_req = malloc((size_t)o->n_slots * sizeof *e->seg_req);
    e->logits = malloc(rows * vocab * sizeof *e->logits);
    e->raw = malloc(vocab * sizeof *e->raw);
    e->slots = calloc((size_t)o->n_slots, sizeof *e->slots);
    dsq_status s = e->toks && e->segs && e->out_rows && e->seg_out0 && e->seg_req && e->logits && e->raw && e->slots
                       ? DSQ_OK
                       : dsq_fail(DSQ_ERR_NOMEM, "serve: out of memory for batches of %zu rows", rows);
    if (s == DSQ_OK) s = dsq_ctx_new_seqs(m, &dsq_backend_cpu, o->n_ctx, o->n_slots, o->threads, &e->ctx);
    if (s == DSQ_OK) dsq_ctx_set_matmul(e->ctx, o->int8_act ? DSQ_MATMUL_INT8ACT : DSQ_MATMUL_DEFAULT);
    e->counts.kv_total = (int64_t)o->n_slots * o->n_ctx;
    if (s == DSQ_OK) warm_unwinder();
    if (s == DSQ_OK && pthread_create(&e->th, NULL, engine_main, e) != 0)
        s = dsq_fail(DSQ_ERR_NOMEM, "serve: cannot start the engine thread");
    e->started = s == DSQ_OK;
    if (s != DSQ_OK) {
        dsq_srv_free(e);
        return s;
    }
    *out = e;
    return DSQ_OK;
}
