#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/grow.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct dsq_sampler {
    dsq_sampler_params p;
    int64_t n_vocab;
    uint64_t rng[4];
    cand *c;
    double *prob;
};

void dsq_sampler_params_default(dsq_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->top_p = 1;
}

/* splitmix64 and xoshiro256** (Blackman and Vigna, public domain reference). */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

dsq_status dsq_sampler_new(const dsq_sampler_params *p, int64_t n_vocab, dsq_sampler **out)
{
    *out = NULL;
    if (n_vocab < 1 || n_vocab > INT32_MAX) return dsq_fail(DSQ_ERR_ARG, "sampler: vocabulary of %lld", (long long)n_vocab);
    if (!(p->temp == p->temp) || !(p->top_p == p->top_p))
        return dsq_fail(DSQ_ERR_ARG, "sampler: temperature and top-p must be numbers");
    dsq_sampler *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    if (p->temp > 0) {
        s->c = malloc((size_t)n_vocab * sizeof *s->c);
        s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
        if (!s->c || !s->prob) {
            dsq_sampler_free(s);
            return dsq_fail(DSQ_ERR_NOMEM, "sampler: out of memory for %lld candidates", (long long)n_vocab);
        }
    }
    *out = s;
    return DSQ_OK;
}

void dsq_sampler_free(dsq_sampler *s)
{
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s);
}

int32_t dsq_argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Softmax of the first n candidates' logits / t into s->prob (sums to 1). */
static void softmax(dsq_sampler *s, size_t n, float t)
{
    double sum = 0, mx = s->c[0].logit / t;
    for (size_t i = 0; i < n; i++) sum += s->prob[i] = exp(s->c[i].logit / t - mx);
    for (size_t i = 0; i < n; i++) s->prob[i] /= sum;
}

int32_t dsq_sampler_sample(dsq_sampler *s, const float *logits)
{
    if (s->p.temp <= 0) return dsq_argmax(logits, s->n_vocab);
    size_t n = (size_t)s->n_vocab;
    for (size_t i = 0; i < n; i++) s->c[i] = (cand){logits[i], (int32_t)i};
    qsort(s->c, n, sizeof *s->c, by_logit);
    if (s->p.top_k > 0 && (size_t)s->p.top_k < n) n = (size_t)s->p.top_k;
    if (s->p.top_p < 1) {
        softmax(s, n, 1);
        double cum = 0;
        size_t keep = n;
        for (size_t i = 0; i < n; i++) {
            cum += s->prob[i];
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    softmax(s, n, s->p.temp);
    double u = uniform(s->rng), cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id; /* u fell in the rounding gap below 1 */
}

/* ---- decoding ---- */

static bool is_stop(const dsq_gen_opts *o, int32_t t)
{
    for (size_t i = 0; i < o->n_stop; i++)
        if (o->stop[i] == t) return true;
    return false;
}

static dsq_status push(dsq_tokens *v, int32_t t)
{
    int32_t *p = dsq_grow(v->ids, &v->cap, v->n + 1, sizeof *p);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "generate: out of memory");
    v->ids = p;
    v->ids[v->n++] = t;
    return DSQ_OK;
}

/* Logits of the last of seq[0..n), the cache holding seq[0..done). */
static dsq_status step(dsq_ctx *c, const int32_t *seq, int n, int done, bool f32, float *win, float *logits)
{
    const int W = DSQ_LINEAR_GEMV_MAX_TOKENS + 1;
    int64_t vocab = dsq_ctx_model(c)->vocab;
    if (!f32) return dsq_forward_range(c, seq + done, n - done, done, n - done - 1, logits);
    if (n - done >= W) {
        DSQ_TRY(dsq_forward_range(c, seq + done, n - done, done, n - done - W, win));
    } else {
        int s0 = n > W ? n - W : 0;
        int32_t buf[DSQ_LINEAR_GEMV_MAX_TOKENS + 1];
        for (int i = 0; i < W; i++) buf[i] = seq[s0 + i < n ? s0 + i : n - 1];
        DSQ_TRY(dsq_forward_range(c, buf, W, s0, 0, win));
        memmove(win + (size_t)(W - 1) * (size_t)vocab, win + (size_t)(n - 1 - s0) * (size_t)vocab,
                (size_t)vocab * sizeof *win);
    }
    memcpy(logits, win + (size_t)(W - 1) * (size_t)vocab, (size_t)vocab * sizeof *logits);
    return DSQ_OK;
}

static dsq_status check_gen(const dsq_ctx *c, int n_prompt, const dsq_gen_opts *o)
{
    int n_ctx = dsq_ctx_n_ctx(c);
    if (n_prompt < 1) return dsq_fail(DSQ_ERR_ARG, "generate: the prompt is empty");
    if (n_prompt >= n_ctx)
        return dsq_fail(DSQ_ERR_ARG, "generate: the prompt has %d tokens; the context holds %d", n_prompt, n_ctx);
    if (o->f32_activations && n_ctx < DSQ_LINEAR_GEMV_MAX_TOKENS + 1)
        return dsq_fail(DSQ_ERR_ARG, "generate: F32 activations need a context of at least %d",
                        DSQ_LINEAR_GEMV_MAX_TOKENS + 1);
    return DSQ_OK;
}

dsq_status dsq_generate(dsq_ctx *c, dsq_sampler *s, const int32_t *prompt, int n_prompt, const dsq_gen_opts *o,
                        dsq_tokens *out, dsq_gen_stats *st)
{
    memset(st, 0, sizeof *st);
    DSQ_TRY(check_gen(c, n_prompt, o));
    int n_ctx = dsq_ctx_n_ctx(c);
    int64_t vocab = dsq_ctx_model(c)->vocab;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    float *win = o->f32_activations ? malloc((size_t)(DSQ_LINEAR_GEMV_MAX_TOKENS + 1) * (size_t)vocab * sizeof *win)
                                    : NULL;
    int32_t *seq = malloc(((size_t)n_ctx + 1) * sizeof *seq);
    dsq_status r = logits && seq && (win || !o->f32_activations) ? DSQ_OK
                                                                  : dsq_fail(DSQ_ERR_NOMEM, "generate: out of memory");
    if (r == DSQ_OK) memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    st->n_prompt = n_prompt;
    double t0 = dsq_now_s();
    if (r == DSQ_OK) r = step(c, seq, n_prompt, 0, o->f32_activations, win, logits);
    double t1 = dsq_now_s();
    st->prompt_s = t1 - t0;
    /* seq[0..n) is known; the cache holds all but seq[n-1] after each step. */
    for (int n = n_prompt; r == DSQ_OK && (o->n_predict < 0 || st->n_gen < o->n_predict); n++) {
        int32_t t = dsq_sampler_sample(s, logits);
        if (is_stop(o, t)) {
            st->stopped = true;
            break;
        }
        seq[n] = t;
        r = push(out, t);
        st->n_gen++;
        if (r == DSQ_OK && o->on_token) r = o->on_token(o->user, t);
        bool more = (o->n_predict < 0 || st->n_gen < o->n_predict) && n < n_ctx;
        if (!more) break;
        if (r == DSQ_OK) r = step(c, seq, n + 1, n, o->f32_activations, win, logits);
    }
    st->gen_s = dsq_now_s() - t1;
    free(logits);
    free(win);
    free(seq);
    return r;
}

/* ---- streaming text ---- */

size_t dsq_utf8_complete(const char *s, size_t n)
{
    /* Look back at most 3 bytes for the lead byte of an unfinished sequence. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char b = (unsigned char)s[n - back];
        if ((b & 0xc0) == 0x80) continue; /* continuation: keep looking */
        size_t need = b >= 0xf0 && b < 0xf8 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        if (b >= 0xf8) need = 1;
        return need > back ? n - back : n;
    }
    return n;
}
