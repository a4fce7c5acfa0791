#include "core/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *dsq_grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need == 0) need = 1; /* so that a non-NULL answer always means room */
    if (p && need <= *cap) return p;
    if (elem == 0) return NULL;
    size_t n = *cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * *cap;
    if (n < 16) n = 16;
    if (n < need) n = need;
    if (n > SIZE_MAX / elem) {
        /* Doubling overflows; exactly need may still fit. */
        if (need > SIZE_MAX / elem) return NULL;
        n = need;
    }
    void *q = realloc(p, n * elem);
    if (!q) return NULL;
    *cap = n;
    return q;
}
