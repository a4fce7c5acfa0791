/* Large working buffers (Hessians, calibration hidden states, captured
 * inputs): tens to hundreds of MiB that are written once per layer. With 4 KiB
 * pages every first write is a page fault, and with two threads in the
 * process each fault's TLB flush interrupts the other core (in a VM an IPI
 * costs microseconds): a 1536-wide Hessian spent a third of its time there.
 * dsq_bigbuf_alloc aligns to 2 MiB and asks for transparent huge pages
 * (madvise MADV_HUGEPAGE, which the usual THP "madvise" setting honours), so
 * such a buffer faults a few dozen times instead of thousands. Free with
 * free(). NULL on failure (including allocation-failure injection: it goes
 * through aligned_alloc). */
#ifndef DSQ_CORE_BIGBUF_H
#define DSQ_CORE_BIGBUF_H

#include <stddef.h>

void *dsq_bigbuf_alloc(size_t bytes);
/* The same, zero-filled. */
void *dsq_bigbuf_calloc(size_t n, size_t size);

#endif
