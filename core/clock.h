/* The one clock for elapsed-time reports (progress lines, tokens/s, bench rates). */
#ifndef DSQ_CORE_CLOCK_H
#define DSQ_CORE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: only differences mean anything, and they never
 * jump when the wall clock is set, so a rate never goes negative. */
double dsq_now_s(void);

#endif
