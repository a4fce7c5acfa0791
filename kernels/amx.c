/* The one arch_prctl request for the tile data state, and the tile
 * configuration the kernels share (kernels/amx.h). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mamx-tile (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/amx.h"

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)

#include <asm/prctl.h>
#include <immintrin.h>
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

/* LDTILECFG's 64-byte operand (Intel SDM vol. 1, 3.2.1), all eight tiles of
 * palette 1 as 16 rows x 64 bytes. Static data rather than a local: GCC 12
 * does not see that the builtin reads its operand and drops the stores
 * that fill a local one (the instruction then faults on a half-zero
 * configuration). */
typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static const tilecfg k_cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

void dsq_amx_configure(void) { _tile_loadconfig(&k_cfg); }

#else

bool dsq_amx_ready(void) { return false; }

void dsq_amx_configure(void) {}

#endif
