/* The one arch_prctl request for the tile data state (kernels/amx.h). */
#include "kernels/amx.h"

#if defined(__x86_64__) && defined(__linux__)

#include <asm/prctl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define XFEATURE_XTILEDATA 18

static bool g_ready;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void ask(void) { g_ready = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

bool dsq_amx_ready(void)
{
    pthread_once(&g_once, ask);
    return g_ready;
}

#else

bool dsq_amx_ready(void) { return false; }

#endif
