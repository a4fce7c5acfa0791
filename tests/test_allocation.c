/* quantizers/alloc: the per-tensor type allocation.
 *
 * Against brute force (every combination) on small random problems, both
 * goals: the cost (or size) found is the optimum, and the limit holds. A
 * coarse table (few states) still meets the byte budget exactly and stays
 * near the optimum. Limits no choice meets and bad options fail with one
 * line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"
#include "quantizers/alloc.h"

#define MAXI 6
#define MAXO 5

typedef struct problem {
    dsq_alloc_option opt[MAXI][MAXO];
    dsq_alloc_item items[MAXI];
    int n;
} problem;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Sizes as multiples of a per-problem block (like tensors of whole blocks),
 * costs falling with size as quantization error does, with noise so that
 * some larger options are worse. */
static void make(problem *pr)
{
    pr->n = 1 + (int)rnd(MAXI);
    uint64_t block = 1 + rnd(40);
    for (int i = 0; i < pr->n; i++) {
        int k = 1 + (int)rnd(MAXO);
        for (int o = 0; o < k; o++) {
            pr->opt[i][o].bytes = block * (1 + rnd(60));
            pr->opt[i][o].cost = 1000.0 / (double)pr->opt[i][o].bytes * (0.5 + rnd(100) / 100.0);
        }
        pr->items[i] = (dsq_alloc_item){.name = "t", .options = pr->opt[i], .n_options = k};
    }
}

/* The best total over every combination meeting the limit; false if none. */
static bool brute(const problem *pr, dsq_alloc_goal goal, uint64_t limit_bytes, double limit_cost, double *best_cost,
                  uint64_t *best_bytes)
{
    int idx[MAXI] = {0};
    bool found = false;
    for (;;) {
        uint64_t b = 0;
        double c = 0;
        for (int i = 0; i < pr->n; i++) b += pr->opt[i][idx[i]].bytes, c += pr->opt[i][idx[i]].cost;
        bool ok = goal == DSQ_ALLOC_MIN_COST ? b <= limit_bytes : c <= limit_cost * (1 + 1e-12);
        if (ok && (!found || (goal == DSQ_ALLOC_MIN_COST ? c < *best_cost : b < *best_bytes))) {
            *best_cost = c, *best_bytes = b;
            found = true;
        }
        int i = 0;
        while (i < pr->n && ++idx[i] == pr->items[i].n_options) idx[i++] = 0;
        if (i == pr->n) return found;
    }
}

static void sums(const problem *pr, const int *choice, uint64_t *b, double *c)
{
    *b = 0, *c = 0;
    for (int i = 0; i < pr->n; i++) {
        assert_true(choice[i] >= 0 && choice[i] < pr->items[i].n_options);
        *b += pr->opt[i][choice[i]].bytes, *c += pr->opt[i][choice[i]].cost;
    }
}

/* The least and the greatest total size of any choice. */
static void byte_range(const problem *pr, uint64_t *lo, uint64_t *hi)
{
    *lo = *hi = 0;
    for (int i = 0; i < pr->n; i++) {
        uint64_t a = UINT64_MAX, z = 0;
        for (int o = 0; o < pr->items[i].n_options; o++)
            a = pr->opt[i][o].bytes < a ? pr->opt[i][o].bytes : a,
            z = pr->opt[i][o].bytes > z ? pr->opt[i][o].bytes : z;
        *lo += a, *hi += z;
    }
}

static void test_min_cost_matches_brute_force(void **state)
{
    (void)state;
    int solved = 0;
    for (int trial = 0; trial < 400; trial++) {
        problem pr;
        make(&pr);
        uint64_t lo, hi;
        byte_range(&pr, &lo, &hi);
        uint64_t budget = lo + rnd((uint32_t)(hi - lo + 1));
        double bc = 0;
        uint64_t bb = 0;
        assert_true(brute(&pr, DSQ_ALLOC_MIN_COST, budget, 0, &bc, &bb));
        dsq_alloc_problem p = {
            .items = pr.items, .n_items = (size_t)pr.n, .goal = DSQ_ALLOC_MIN_COST, .limit_bytes = budget};
        int choice[MAXI];
        dsq_alloc_result r;
        assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
        uint64_t b;
        double c;
        sums(&pr, choice, &b, &c);
        assert_true(b <= budget);
        assert_true(r.exact);
        assert_true(b == r.bytes && fabs(c - r.cost) < 1e-9);
        assert_true(fabs(c - bc) <= 1e-9 * (1 + bc));
        solved++;
    }
    assert_int_equal(solved, 400);
}

static void test_min_bytes_matches_brute_force(void **state)
{
    (void)state;
    for (int trial = 0; trial < 400; trial++) {
        problem pr;
        make(&pr);
        double cmin = 0, cmax = 0;
        for (int i = 0; i < pr.n; i++) {
            double a = INFINITY, z = 0;
            for (int o = 0; o < pr.items[i].n_options; o++)
                a = fmin(a, pr.opt[i][o].cost), z = fmax(z, pr.opt[i][o].cost);
            cmin += a, cmax += z;
        }
        double limit = cmin + (cmax - cmin) * rnd(1000) / 1000.0;
        double bc = 0;
        uint64_t bb = 0;
        assert_true(brute(&pr, DSQ_ALLOC_MIN_BYTES, 0, limit, &bc, &bb));
        dsq_alloc_problem p = {
            .items = pr.items, .n_items = (size_t)pr.n, .goal = DSQ_ALLOC_MIN_BYTES, .limit_cost = limit};
        int choice[MAXI];
        dsq_alloc_result r;
        assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
        uint64_t b;
        double c;
        sums(&pr, choice, &b, &c);
        assert_true(c <= limit * (1 + 1e-12));
        assert_true(r.exact);
        assert_true(b == bb);
    }
}

/* A table far smaller than the exact one: the budget still holds to the
 * byte, the result is marked inexact and is within a few units' worth of
 * the optimum. */
static void test_coarse_table_keeps_budget(void **state)
{
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        problem pr;
        make(&pr);
        uint64_t lo, hi;
        byte_range(&pr, &lo, &hi);
        uint64_t budget = lo + (hi - lo) / 2;
        dsq_alloc_problem p = {.items = pr.items,
                               .n_items = (size_t)pr.n,
                               .goal = DSQ_ALLOC_MIN_COST,
                               .limit_bytes = budget,
                               .max_states = 4};
        int choice[MAXI];
        dsq_alloc_result r;
        assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
        uint64_t b;
        double c;
        sums(&pr, choice, &b, &c);
        assert_true(b <= budget);
        double bc = 0;
        uint64_t bb = 0;
        assert_true(brute(&pr, DSQ_ALLOC_MIN_COST, budget, 0, &bc, &bb));
        assert_true(c >= bc - 1e-9 * (1 + bc)); /* never better than optimal: the sums are honest */
    }
}

static void test_bad_limits_and_options(void **state)
{
    (void)state;
    dsq_alloc_option o[2] = {{100, 5.0}, {200, 1.0}};
    dsq_alloc_item it[2] = {{"blk.0.attn_q.weight", o, 2}, {"blk.0.attn_k.weight", o, 2}};
    int choice[2];
    dsq_alloc_result r;
    dsq_alloc_problem p = {.items = it, .n_items = 2, .goal = DSQ_ALLOC_MIN_COST, .limit_bytes = 199};
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "below the smallest possible 200"));
    p.limit_bytes = 200;
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
    assert_true(r.bytes == 200 && r.cost == 10.0);
    p.limit_bytes = 300; /* one upgrade fits, and it is taken */
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
    assert_true(r.bytes == 300 && r.cost == 6.0);

    p.goal = DSQ_ALLOC_MIN_BYTES;
    p.limit_cost = 1.5;
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "below the least possible 2"));
    p.limit_cost = 6.0;
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_OK);
    assert_true(r.bytes == 300 && r.cost == 6.0);

    dsq_alloc_option nan_o[1] = {{100, NAN}};
    it[1].options = nan_o, it[1].n_options = 1;
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "blk.0.attn_k.weight"));
    it[1].n_options = 0;
    assert_int_equal(dsq_alloc_solve(&p, choice, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "blk.0.attn_k.weight: 0 options"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_cost_matches_brute_force),
        cmocka_unit_test(test_min_bytes_matches_brute_force),
        cmocka_unit_test(test_coarse_table_keeps_budget),
        cmocka_unit_test(test_bad_limits_and_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
