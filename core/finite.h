/* Finiteness scans: every quantizer refuses NaN and infinite weights by
 * name and position, and the scan runs over every value of every tensor, so
 * it has to cost next to nothing next to the quantization itself. */
#ifndef DSQ_CORE_FINITE_H
#define DSQ_CORE_FINITE_H

#include <stdint.h>

/* The index of the first NaN or infinity in x[0, n), or -1 when every value
 * is finite. Chunks of values are tested with integer operations and no
 * branch, so the scan vectorizes; only a chunk that holds a bad value is
 * searched value by value. */
int64_t dsq_find_nonfinite(const float *x, int64_t n);

#endif
