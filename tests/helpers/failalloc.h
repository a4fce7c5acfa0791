/* Allocation-failure injection for tests, as SQLite's test harness does it:
 * the Nth allocation after dsq_failalloc_arm(N) fails, once.
 *
 * Only a program linked with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,
 *   --wrap=posix_memalign,--wrap=strdup,--wrap=strndup
 * sends the library's allocations through here (CMake: tests/test_alloc_fail.c);
 * the library's sources stay untouched. cJSON lives in a shared library that
 * --wrap cannot reach, so dsq_failalloc_arm also installs cJSON hooks that
 * count through the same functions. Allocations inside other shared libraries
 * (libc's stdio, pcre2, zstd, libgomp) are not counted. */
#ifndef DSQ_TESTS_FAILALLOC_H
#define DSQ_TESTS_FAILALLOC_H

#include <stdbool.h>

/* Starts counting from zero; allocation number n (1-based) fails with ENOMEM.
 * n = 0 only counts (to learn how many allocations an operation makes). */
void dsq_failalloc_arm(long n);
/* Stops counting and failing; returns the allocations counted since arm. */
long dsq_failalloc_disarm(void);
/* While paused, allocations are neither counted nor failed (fixture work
 * inside an operation, such as opening the model it then changes). */
void dsq_failalloc_pause(bool paused);
/* True once the armed failure has been handed out. */
bool dsq_failalloc_hit(void);
/* True when this program was linked with the --wrap options (the wrappers
 * have seen at least one call): a sweep that sees nothing is not a pass. */
bool dsq_failalloc_active(void);

#endif
