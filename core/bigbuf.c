/* Huge-page backed large buffers (core/bigbuf.h). */
#include "core/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE ((size_t)2 << 20)

void *dsq_bigbuf_alloc(size_t bytes)
{
    if (bytes < HUGE_PAGE) return malloc(bytes ? bytes : 1); /* small: the heap serves it better */
    if (bytes > SIZE_MAX - HUGE_PAGE) return NULL;
    size_t rounded = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

void *dsq_bigbuf_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = dsq_bigbuf_alloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}
