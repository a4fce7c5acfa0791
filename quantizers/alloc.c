/* Multiple-choice knapsack by dynamic programming (see alloc.h). */
#include "quantizers/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dp_run {
    const dsq_alloc_problem *p;
    uint64_t *min_bytes; /* per item */
    uint32_t *units;     /* per item and option, DSQ_ALLOC_MAX_OPTIONS apart */
    uint64_t unit;
    size_t states;
    bool exact;
} dp_run;

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static dsq_status check_problem(const dsq_alloc_problem *p)
{
    if (!p || !p->items || p->n_items == 0) return dsq_fail(DSQ_ERR_ARG, "allocation: no items");
    for (size_t i = 0; i < p->n_items; i++) {
        const dsq_alloc_item *it = &p->items[i];
        const char *name = it->name ? it->name : "?";
        if (it->n_options < 1 || it->n_options > DSQ_ALLOC_MAX_OPTIONS || !it->options)
            return dsq_fail(DSQ_ERR_ARG, "allocation: %s: %d options (1..%d allowed)", name, it->n_options,
                            DSQ_ALLOC_MAX_OPTIONS);
        for (int o = 0; o < it->n_options; o++)
            if (!isfinite(it->options[o].cost) || it->options[o].cost < 0)
                return dsq_fail(DSQ_ERR_NUMERIC, "allocation: %s: option %d has cost %g", name, o, it->options[o].cost);
    }
    if (p->goal == DSQ_ALLOC_MIN_BYTES && !(p->limit_cost >= 0))
        return dsq_fail(DSQ_ERR_ARG, "allocation: cost limit %g is not a non-negative number", p->limit_cost);
    return DSQ_OK;
}

/* Sums of the smallest sizes, the cheapest costs and the largest extra size. */
static void totals(const dsq_alloc_problem *p, uint64_t *min_bytes, uint64_t *base, uint64_t *max_extra,
                   double *min_cost)
{
    *base = *max_extra = 0;
    *min_cost = 0;
    for (size_t i = 0; i < p->n_items; i++) {
        const dsq_alloc_item *it = &p->items[i];
        uint64_t lo = UINT64_MAX, hi = 0;
        double c = INFINITY;
        for (int o = 0; o < it->n_options; o++) {
            lo = it->options[o].bytes < lo ? it->options[o].bytes : lo;
            hi = it->options[o].bytes > hi ? it->options[o].bytes : hi;
            c = it->options[o].cost < c ? it->options[o].cost : c;
        }
        min_bytes[i] = lo;
        *base += lo;
        *max_extra += hi - lo;
        *min_cost += c;
    }
}

/* The unit: the gcd of every extra size (exact) or coarser so that
 * span / unit + 1 states fit in max_states. */
static void choose_unit(dp_run *d, uint64_t span)
{
    const dsq_alloc_problem *p = d->p;
    size_t max_states = p->max_states ? p->max_states : (size_t)1 << 18;
    if (max_states < 2) max_states = 2;
    uint64_t g = 0;
    for (size_t i = 0; i < p->n_items; i++)
        for (int o = 0; o < p->items[i].n_options; o++) g = gcd64(g, p->items[i].options[o].bytes - d->min_bytes[i]);
    d->unit = g ? g : 1;
    d->exact = true;
    if (span / d->unit + 1 > max_states) {
        d->unit = (span + max_states - 2) / (max_states - 1);
        d->exact = false;
    }
    d->states = (size_t)(span / d->unit) + 1;
    for (size_t i = 0; i < p->n_items; i++)
        for (int o = 0; o < p->items[i].n_options; o++) {
            uint64_t extra = p->items[i].options[o].bytes - d->min_bytes[i];
            uint64_t u = (extra + d->unit - 1) / d->unit; /* rounded up: the budget holds in bytes */
            d->units[i * DSQ_ALLOC_MAX_OPTIONS + o] = u >= d->states ? UINT32_MAX : (uint32_t)u;
        }
}

/* dp[s] after every item: least cost with at most s extra units; the
 * option taken for item i at level s goes to pick[i * states + s]. */
static void fill_table(const dp_run *d, double *dp, double *next, uint8_t *pick)
{
    const dsq_alloc_problem *p = d->p;
    for (size_t s = 0; s < d->states; s++) dp[s] = 0;
    for (size_t i = 0; i < p->n_items; i++) {
        const dsq_alloc_item *it = &p->items[i];
        const uint32_t *u = &d->units[i * DSQ_ALLOC_MAX_OPTIONS];
        uint8_t *row = &pick[i * d->states];
        for (size_t s = 0; s < d->states; s++) {
            double best = INFINITY;
            int arg = 0;
            for (int o = 0; o < it->n_options; o++) {
                if (u[o] > s) continue;
                double c = dp[s - u[o]] + it->options[o].cost;
                /* Equal costs: the smaller option, so ties never waste bytes. */
                if (c < best || (c == best && it->options[o].bytes < it->options[arg].bytes)) {
                    best = c;
                    arg = o;
                }
            }
            next[s] = best;
            row[s] = (uint8_t)arg;
        }
        memcpy(dp, next, d->states * sizeof *dp);
    }
}

static void backtrack(const dp_run *d, const uint8_t *pick, size_t s, int *choice)
{
    for (size_t i = d->p->n_items; i-- > 0;) {
        int o = pick[i * d->states + s];
        choice[i] = o;
        s -= d->units[i * DSQ_ALLOC_MAX_OPTIONS + o];
    }
}

static void sum_choice(const dsq_alloc_problem *p, const int *choice, dsq_alloc_result *r)
{
    r->bytes = 0;
    r->cost = 0;
    for (size_t i = 0; i < p->n_items; i++) {
        r->bytes += p->items[i].options[choice[i]].bytes;
        r->cost += p->items[i].options[choice[i]].cost;
    }
}

/* Spends what rounding left of the byte budget on the upgrade that lowers
 * the cost most per byte, while one fits. */
static void spend_slack(const dsq_alloc_problem *p, int *choice, dsq_alloc_result *r)
{
    for (;;) {
        size_t bi = 0;
        int bo = -1;
        double best = 0;
        for (size_t i = 0; i < p->n_items; i++) {
            const dsq_alloc_option *cur = &p->items[i].options[choice[i]];
            for (int o = 0; o < p->items[i].n_options; o++) {
                const dsq_alloc_option *op = &p->items[i].options[o];
                if (op->cost >= cur->cost) continue;
                if (op->bytes <= cur->bytes) { /* cheaper and no larger: always better */
                    bi = i, bo = o, best = INFINITY;
                    continue;
                }
                if (op->bytes - cur->bytes > p->limit_bytes - r->bytes) continue;
                double gain = (cur->cost - op->cost) / (double)(op->bytes - cur->bytes + 1);
                if (gain > best) bi = i, bo = o, best = gain;
            }
        }
        if (bo < 0) return;
        choice[bi] = bo;
        sum_choice(p, choice, r);
    }
}

static dsq_status solve(dp_run *d, uint64_t span, int *choice, dsq_alloc_result *r)
{
    const dsq_alloc_problem *p = d->p;
    choose_unit(d, span);
    double *dp = malloc(d->states * sizeof *dp), *next = malloc(d->states * sizeof *next);
    uint8_t *pick = malloc(p->n_items * d->states);
    if (!dp || !next || !pick) {
        free(dp), free(next), free(pick);
        return dsq_fail(DSQ_ERR_NOMEM, "allocation: %zu x %zu table", p->n_items, d->states);
    }
    fill_table(d, dp, next, pick);
    size_t s = d->states - 1;
    if (p->goal == DSQ_ALLOC_MIN_BYTES) {
        /* The least level whose cost meets the limit; relative slack for the
         * order in which sums were added. */
        double lim = p->limit_cost * (1 + 1e-12);
        for (s = 0; s < d->states && !(dp[s] <= lim); s++) {
        }
        if (s == d->states) s = d->states - 1; /* unreachable: the cheapest choice meets it */
    }
    backtrack(d, pick, s, choice);
    free(dp), free(next), free(pick);
    r->unit = d->unit;
    r->exact = d->exact;
    sum_choice(p, choice, r);
    if (p->goal == DSQ_ALLOC_MIN_COST) spend_slack(p, choice, r);
    return DSQ_OK;
}

dsq_status dsq_alloc_solve(const dsq_alloc_problem *p, int *choice, dsq_alloc_result *r)
{
    DSQ_TRY(check_problem(p));
    dp_run d = {.p = p};
    d.min_bytes = malloc(p->n_items * sizeof *d.min_bytes);
    d.units = malloc(p->n_items * DSQ_ALLOC_MAX_OPTIONS * sizeof *d.units);
    if (!d.min_bytes || !d.units) {
        free(d.min_bytes), free(d.units);
        return dsq_fail(DSQ_ERR_NOMEM, "allocation: %zu items", p->n_items);
    }
    uint64_t base, max_extra;
    double min_cost;
    totals(p, d.min_bytes, &base, &max_extra, &min_cost);
    dsq_status st = DSQ_OK;
    if (p->goal == DSQ_ALLOC_MIN_COST && p->limit_bytes < base)
        st = dsq_fail(DSQ_ERR_ARG, "allocation: a budget of %llu bytes is below the smallest possible %llu",
                      (unsigned long long)p->limit_bytes, (unsigned long long)base);
    else if (p->goal == DSQ_ALLOC_MIN_BYTES && min_cost > p->limit_cost * (1 + 1e-12))
        st = dsq_fail(DSQ_ERR_ARG, "allocation: a cost limit of %g is below the least possible %g", p->limit_cost,
                      min_cost);
    if (st == DSQ_OK) {
        uint64_t span = max_extra;
        if (p->goal == DSQ_ALLOC_MIN_COST && p->limit_bytes - base < span) span = p->limit_bytes - base;
        st = solve(&d, span, choice, r);
    }
    free(d.min_bytes), free(d.units);
    return st;
}
