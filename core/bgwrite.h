/* Writes on a thread of their own, one buffer at a time, so that producing
 * the next buffer (quantizing the next tensor) overlaps writing this one (the
 * kernel's copy into the page cache, or a direct write waiting on the disk).
 * The writes happen in the order handed over, through the caller's function;
 * a failure is recorded on the thread, with its message, and returned by the
 * next call the producer makes. */
#ifndef DSQ_CORE_BGWRITE_H
#define DSQ_CORE_BGWRITE_H

#include <stdint.h>

#include "core/status.h"

typedef dsq_status (*dsq_bgwrite_fn)(void *user, const void *buf, uint64_t n);
typedef struct dsq_bgwrite dsq_bgwrite;

/* Starts the thread; fn(user, buf, n) does each write. */
dsq_status dsq_bgwrite_start(dsq_bgwrite **out, dsq_bgwrite_fn fn, void *user);
/* Waits for the previous write, then hands buf over and returns: buf must stay
 * untouched until the next submit or wait has returned. Returns the previous
 * write's failure, if any (then buf is not written). */
dsq_status dsq_bgwrite_submit(dsq_bgwrite *b, const void *buf, uint64_t n);
/* Waits until nothing is pending; the status of the writes so far. A caller
 * writing on its own in between (to keep the order) waits first. */
dsq_status dsq_bgwrite_wait(dsq_bgwrite *b);
/* Waits, ends the thread and frees b. NULL is a no-op. */
void dsq_bgwrite_stop(dsq_bgwrite *b);

#endif
