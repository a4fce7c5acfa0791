/* DeepSeek's MoE routers (ops.h describes the rule). Per token, in F32 as
 * transformers computes it: the router logits come from an F32 product. */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/cpu.h"
#include "runtime/cpu/ops.h"

static void scores_of(const dsq_arch_moe *m, const float *logit, float *sc)
{
    int64_t E = m->n_routed;
    if (m->scoring == DSQ_SCORING_SIGMOID) {
        for (int64_t e = 0; e < E; e++) sc[e] = 1.0f / (1.0f + expf(-logit[e]));
        return;
    }
    float mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; e++) mx = logit[e] > mx ? logit[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += sc[e] = expf(logit[e] - mx);
    for (int64_t e = 0; e < E; e++) sc[e] /= sum;
}

/* The k largest of v[0..n) into out (indices, best first); v[i] = -inf never wins over a finite one. */
static void top_k(const float *v, int64_t n, int64_t k, int32_t *out)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            bool taken = false;
            for (int64_t t = 0; t < j && !taken; t++) taken = out[t] == i;
            if (!taken && (best < 0 || v[i] > v[best])) best = i;
        }
        out[j] = (int32_t)best;
    }
}

/* Masks (to -inf) the experts of every group but the topk_group best. */
static void limit_groups(const dsq_arch_moe *m, float *choice, float *gscore, int32_t *gsel)
{
    int64_t G = m->n_group, per = m->n_routed / G;
    for (int64_t g = 0; g < G; g++) {
        const float *c = choice + g * per;
        if (m->topk_method == DSQ_TOPK_NOAUX_TC) {
            int32_t two[2];
            top_k(c, per, 2, two);
            gscore[g] = c[two[0]] + c[two[1]];
        } else {
            float mx = -INFINITY;
            for (int64_t i = 0; i < per; i++) mx = c[i] > mx ? c[i] : mx;
            gscore[g] = mx;
        }
    }
    top_k(gscore, G, m->topk_group, gsel);
    for (int64_t g = 0; g < G; g++) {
        bool keep = false;
        for (int64_t t = 0; t < m->topk_group && !keep; t++) keep = gsel[t] == g;
        if (!keep)
            for (int64_t i = 0; i < per; i++) choice[g * per + i] = -INFINITY;
    }
}

static void route_one(const dsq_arch_moe *m, const float *logit, const float *bias, float *sc, float *choice,
                      float *gscore, int32_t *gsel, int32_t *idx, float *wt)
{
    int64_t E = m->n_routed, K = m->top_k;
    scores_of(m, logit, sc);
    for (int64_t e = 0; e < E; e++) choice[e] = sc[e] + (bias && m->topk_method == DSQ_TOPK_NOAUX_TC ? bias[e] : 0.0f);
    if (m->topk_method != DSQ_TOPK_GREEDY) limit_groups(m, choice, gscore, gsel);
    top_k(choice, E, K, idx);
    float sum = 0;
    for (int64_t j = 0; j < K; j++) sum += wt[j] = sc[idx[j]];
    float norm = m->norm_topk_prob ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int64_t j = 0; j < K; j++) wt[j] = wt[j] * norm * (float)m->routed_scaling;
}

dsq_status dsq_cpu_moe_route(const dsq_arch_moe *m, const float *logits, const float *bias, int32_t *idx, float *wt,
                             int n)
{
    int64_t E = m->n_routed, G = m->n_group > 0 ? m->n_group : 1;
    if (E <= 0 || m->top_k < 1 || m->top_k > E)
        return dsq_fail(DSQ_ERR_ARG, "moe route: %lld of %lld experts", (long long)m->top_k, (long long)E);
    int threads = dsq_cpu_threads();
    size_t per = (size_t)(2 * E + G) * sizeof(float) + (size_t)G * sizeof(int32_t);
    char *work = malloc(per * (size_t)threads);
    if (!work) return dsq_fail(DSQ_ERR_NOMEM, "moe route: out of memory");
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 64)
    for (int t = 0; t < n; t++) {
        char *w = work + per * (size_t)omp_get_thread_num();
        float *sc = (float *)w, *choice = sc + E, *gscore = choice + E;
        int32_t *gsel = (int32_t *)(gscore + G);
        route_one(m, logits + (int64_t)t * E, bias, sc, choice, gscore, gsel, idx + (int64_t)t * m->top_k,
                  wt + (int64_t)t * m->top_k);
    }
    free(work);
    return DSQ_OK;
}
