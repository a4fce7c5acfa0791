#include "serve/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bucket bounds for these histograms (vllm/engine/metrics.py). */
static const double g_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                   0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
static const double g_itl_le[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double g_e2e_le[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,  2.5,  5.0,
                                  10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0};

#define MAX_BUCKETS 24

typedef struct histo {
    const char *name, *help;
    const double *le;
    int n_le;
    uint64_t count[MAX_BUCKETS + 1]; /* per bucket (not cumulative); the last is +Inf */
    uint64_t n;
    double sum;
} histo;

struct dsq_metrics {
    pthread_mutex_t mu;
    char *model;
    histo h[DSQ_TIMING_COUNT];
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A label value in the exposition format: backslash, quote and newline escaped. */
static char *label_value(const char *s)
{
    char *out = malloc(2 * strlen(s) + 1), *o = out;
    if (!out) return NULL;
    for (; *s; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') *o++ = '\\';
        *o++ = *s == '\n' ? 'n' : *s;
    }
    *o = 0;
    return out;
}

dsq_metrics *dsq_metrics_new(const char *model_name)
{
    dsq_metrics *mt = calloc(1, sizeof *mt);
    if (!mt || !(mt->model = label_value(model_name))) {
        free(mt);
        return NULL;
    }
    pthread_mutex_init(&mt->mu, NULL);
    mt->h[DSQ_TIMING_TTFT] = (histo){"time_to_first_token_seconds",
                                     "Histogram of time to first token in seconds.",
                                     g_ttft_le,
                                     N_OF(g_ttft_le),
                                     {0},
                                     0,
                                     0};
    mt->h[DSQ_TIMING_ITL] = (histo){"inter_token_latency_seconds",
                                    "Histogram of inter-token latency in seconds.",
                                    g_itl_le,
                                    N_OF(g_itl_le),
                                    {0},
                                    0,
                                    0};
    mt->h[DSQ_TIMING_E2E] = (histo){"e2e_request_latency_seconds",
                                    "Histogram of end to end request latency in seconds.",
                                    g_e2e_le,
                                    N_OF(g_e2e_le),
                                    {0},
                                    0,
                                    0};
    return mt;
}

void dsq_metrics_free(dsq_metrics *mt)
{
    if (!mt) return;
    pthread_mutex_destroy(&mt->mu);
    free(mt->model);
    free(mt);
}

void dsq_metrics_observe(void *user, dsq_srv_timing what, double seconds)
{
    dsq_metrics *mt = user;
    if (what < 0 || what >= DSQ_TIMING_COUNT) return;
    histo *h = &mt->h[what];
    int b = 0;
    while (b < h->n_le && seconds > h->le[b]) b++;
    pthread_mutex_lock(&mt->mu);
    h->count[b]++;
    h->n++;
    h->sum += seconds;
    pthread_mutex_unlock(&mt->mu);
}

typedef struct out {
    char *p;
    size_t n, cap;
    int oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !o->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)k < o->cap - o->n) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = 2 * o->cap + (size_t)k + 1;
        char *p = realloc(o->p, cap);
        if (!p)
            o->oom = 1;
        else
            o->p = p, o->cap = cap;
    }
}

static void gauge(out *o, const dsq_metrics *mt, const char *type, const char *name, const char *help, double v)
{
    put(o, "# HELP dsquant:%s %s\n# TYPE dsquant:%s %s\ndsquant:%s{model_name=\"%s\"} %.17g\n", name, help, name, type,
        name, mt->model, v);
}

static void histogram(out *o, const dsq_metrics *mt, const histo *h)
{
    put(o, "# HELP dsquant:%s %s\n# TYPE dsquant:%s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int b = 0; b <= h->n_le; b++) {
        cum += h->count[b];
        if (b < h->n_le)
            put(o, "dsquant:%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", h->name, h->le[b], mt->model,
                (unsigned long long)cum);
        else
            put(o, "dsquant:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", h->name, mt->model,
                (unsigned long long)cum);
    }
    put(o, "dsquant:%s_sum{model_name=\"%s\"} %.9g\ndsquant:%s_count{model_name=\"%s\"} %llu\n", h->name, mt->model,
        h->sum, h->name, mt->model, (unsigned long long)h->n);
}

char *dsq_metrics_render(dsq_metrics *mt, const dsq_srv_counts *c, size_t *len)
{
    out o = {malloc(4096), 0, 4096, 0};
    if (!o.p) return NULL;
    o.p[0] = 0;
    gauge(&o, mt, "gauge", "num_requests_running", "Number of requests in model execution batches.", c->running);
    gauge(&o, mt, "gauge", "num_requests_waiting", "Number of requests waiting to be processed.", c->waiting);
    gauge(&o, mt, "gauge", "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          c->kv_total ? (double)c->kv_used / (double)c->kv_total : 0);
    gauge(&o, mt, "counter", "prompt_tokens_total", "Number of prefill tokens processed.", (double)c->prompt_tokens);
    gauge(&o, mt, "counter", "generation_tokens_total", "Number of generation tokens processed.",
          (double)c->generation_tokens);
    static const char *reason[] = {"none", "stop", "length", "abort", "error"};
    put(&o, "# HELP dsquant:request_success_total Count of finished requests by finish reason.\n"
            "# TYPE dsquant:request_success_total counter\n");
    for (int f = DSQ_FINISH_STOP; f <= DSQ_FINISH_ERROR; f++)
        put(&o, "dsquant:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %lld\n", reason[f], mt->model,
            (long long)c->requests_finished[f]);
    pthread_mutex_lock(&mt->mu);
    for (int i = 0; i < DSQ_TIMING_COUNT; i++) histogram(&o, mt, &mt->h[i]);
    pthread_mutex_unlock(&mt->mu);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    *len = o.n;
    return o.p;
}
