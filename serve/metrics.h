/* Prometheus metrics for `dsquant serve`, with vLLM's meanings under a
 * `dsquant:` prefix: latency histograms (time to first token, inter-token
 * latency, end-to-end request latency) fed by the engine's observer, and
 * the engine's counters and gauges read when /metrics is asked. */
#ifndef DSQ_SERVE_METRICS_H
#define DSQ_SERVE_METRICS_H

#include <stddef.h>

#include "serve/engine.h"

typedef struct dsq_metrics dsq_metrics;

dsq_metrics *dsq_metrics_new(const char *model_name);
void dsq_metrics_free(dsq_metrics *mt);
/* The engine's observer (dsq_srv_set_observer): user is the dsq_metrics. */
void dsq_metrics_observe(void *user, dsq_srv_timing what, double seconds);
/* The exposition text (malloc'd, *len bytes); NULL when out of memory. */
char *dsq_metrics_render(dsq_metrics *mt, const dsq_srv_counts *c, size_t *len);

#endif
