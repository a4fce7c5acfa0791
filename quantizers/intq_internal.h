/* Private to quantizers/: the rule step of intq.c that the group search
 * (intq_search.c) repeats for each candidate ratio. */
#ifndef DSQ_QUANTIZERS_INTQ_INTERNAL_H
#define DSQ_QUANTIZERS_INTQ_INTERNAL_H

#include <stdint.h>

#include "quantizers/intq.h"

/* Scale and zero of one group of finite values under p's rule at the total
 * clip ratio `clip`, and the bound t the AWQ rule clamps the values to
 * before coding (INFINITY when it does not clamp). */
void dsq_intq_rule_params(const float *w, int64_t n, const dsq_intq_params *p, float clip, float *scale, int *zero,
                          float *t);
/* The group's min and max (finite values, n >= 1). */
void dsq_intq_min_max(const float *w, int64_t n, float *mn, float *mx);
/* dsq_intq_rule_params from the group's min and max (the search computes them once). */
void dsq_intq_range_params(float mn, float mx, const dsq_intq_params *p, float clip, float *scale, int *zero, float *t);

#endif
