/* The one array-growth step: doubling, with the size checked for overflow. */
#ifndef DSQ_CORE_GROW_H
#define DSQ_CORE_GROW_H

#include <stddef.h>

/* Room for need elements of elem bytes in the array p of *cap elements.
 * Returns p itself when it has room; else p reallocated to the larger of
 * need and twice *cap (at least 16), with *cap updated. Returns NULL, leaving
 * p and *cap as they were, when the size overflows or memory runs out; it
 * records no message, so the caller can say what it was growing:
 *
 *     int32_t *ids = dsq_grow(v->ids, &v->cap, v->n + 1, sizeof *ids);
 *     if (!ids) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for token ids", path);
 *     v->ids = ids;
 *
 * (It returns the pointer rather than taking a void ** so that no caller
 * converts an int32_t ** to void **, which C does not allow.) */
void *dsq_grow(void *p, size_t *cap, size_t need, size_t elem);

#endif
