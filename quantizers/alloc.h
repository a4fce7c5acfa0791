/* Per-tensor type allocation under a budget: a multiple-choice knapsack.
 *
 * Each item (a tensor) has options (its candidate types), each with a size
 * in bytes and a cost (its predicted contribution to the output error). One
 * option is chosen per item so that either
 *   - the total cost is least with the total size at most a budget, or
 *   - the total size is least with the total cost at most a limit.
 *
 * Solved by dynamic programming over the size above every item's smallest
 * option, counted in units: dp[s] is the least cost of any choice whose
 * extra size is at most s units. The unit is the greatest common divisor of
 * every option's extra size, which makes the solution exact, unless that
 * gives more than max_states states; then the unit grows so that the table
 * fits, every option's extra size is rounded up to whole units (so the
 * budget still holds exactly in bytes) and the choice is optimal for the
 * rounded sizes only (result.exact is false). Either way a final pass
 * spends the bytes the rounding left over on the upgrades that lower the
 * cost most per byte. Memory: one byte per item and state. */
#ifndef DSQ_QUANTIZERS_ALLOC_H
#define DSQ_QUANTIZERS_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define DSQ_ALLOC_MAX_OPTIONS 64

typedef struct dsq_alloc_option {
    uint64_t bytes;
    double cost; /* finite, >= 0 */
} dsq_alloc_option;

typedef struct dsq_alloc_item {
    const char *name; /* for messages */
    const dsq_alloc_option *options;
    int n_options; /* 1 .. DSQ_ALLOC_MAX_OPTIONS */
} dsq_alloc_item;

typedef enum dsq_alloc_goal {
    DSQ_ALLOC_MIN_COST,  /* least cost, total bytes <= limit_bytes */
    DSQ_ALLOC_MIN_BYTES, /* least bytes, total cost <= limit_cost */
} dsq_alloc_goal;

typedef struct dsq_alloc_problem {
    const dsq_alloc_item *items;
    size_t n_items;
    dsq_alloc_goal goal;
    uint64_t limit_bytes;
    double limit_cost;
    size_t max_states; /* 0: 1 << 20 */
} dsq_alloc_problem;

typedef struct dsq_alloc_result {
    uint64_t bytes; /* total of the chosen options */
    double cost;
    uint64_t unit; /* bytes per DP state */
    bool exact;    /* optimal (the unit divides every extra size) */
} dsq_alloc_result;

/* choice[i] receives the index of item i's chosen option. Fails with
 * DSQ_ERR_ARG, naming the limit and the least possible total, when no
 * choice meets it (a budget below the sum of the smallest options, a cost
 * limit below the sum of the cheapest). */
dsq_status dsq_alloc_solve(const dsq_alloc_problem *p, int *choice, dsq_alloc_result *r);

#endif
