/* The wrappers behind tests/helpers/failalloc.h. Counters are atomics: the
 * GGUF quantizer allocates from OpenMP workers. */
#include "tests/helpers/failalloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

/* The wrappers are defined here for the linker's --wrap; they are no part of
 * any header. */
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static atomic_bool g_on;
static atomic_long g_count;
static atomic_long g_fail_at;
static atomic_bool g_hit;
static atomic_bool g_seen;
static atomic_bool g_paused;

/* Counts one allocation; true when it is the one to fail. */
static bool inject(void)
{
    atomic_store_explicit(&g_seen, true, memory_order_relaxed);
    if (!atomic_load(&g_on) || atomic_load(&g_paused)) return false;
    long n = atomic_fetch_add(&g_count, 1) + 1;
    if (n != atomic_load(&g_fail_at)) return false;
    atomic_store(&g_hit, true);
#if defined(__SANITIZE_ADDRESS__)
    /* DSQ_FAILALLOC_TRACE=1: where the failed allocation was, to find the
     * caller that ignored it. */
    if (getenv("DSQ_FAILALLOC_TRACE")) __sanitizer_print_stack_trace();
#endif
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t n) { return inject() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return inject() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return inject() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return inject() ? NULL : __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return inject() ? ENOMEM : __real_posix_memalign(p, a, n); }
char *__wrap_strdup(const char *s) { return inject() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return inject() ? NULL : __real_strndup(s, n); }

static void hook_free(void *p) { free(p); }

void dsq_failalloc_arm(long n)
{
    static cJSON_Hooks hooks = {__wrap_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    atomic_store(&g_count, 0);
    atomic_store(&g_hit, false);
    atomic_store(&g_fail_at, n > 0 ? n : 0);
    atomic_store(&g_on, true);
}

long dsq_failalloc_disarm(void)
{
    atomic_store(&g_on, false);
    atomic_store(&g_fail_at, 0);
    cJSON_InitHooks(NULL);
    return atomic_load(&g_count);
}

void dsq_failalloc_pause(bool paused) { atomic_store(&g_paused, paused); }

bool dsq_failalloc_hit(void) { return atomic_load(&g_hit); }

bool dsq_failalloc_active(void) { return atomic_load_explicit(&g_seen, memory_order_relaxed); }
