#include "kernels/cpu.h"

#include <omp.h>

static dsq_cpu_isa g_isa = DSQ_CPU_ISA_AUTO;
/* per calling thread, so that contexts driven from different threads keep their own counts */
static _Thread_local int g_threads = 0;

/* -1 until probed; a benign race (every thread stores the same answer). */
static int g_has_avx2 = -1;

bool dsq_cpu_has_avx2(void)
{
    if (g_has_avx2 < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        /* F16C comes with every AVX2 CPU we know of, but the F16 dot asks for it. */
        g_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
        g_has_avx2 = 0;
#endif
    }
    return g_has_avx2 == 1;
}

static int g_has_bf16 = -1;

bool dsq_cpu_has_avx512bf16(void)
{
    if (g_has_bf16 < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        /* __builtin_cpu_supports also checks that the OS saves the ZMM state */
        g_has_bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
        g_has_bf16 = 0;
#endif
    }
    return g_has_bf16 == 1;
}

bool dsq_cpu_use_bf16_gemm(void) { return g_isa != DSQ_CPU_ISA_SCALAR && dsq_cpu_has_avx512bf16(); }

void dsq_cpu_set_isa(dsq_cpu_isa isa) { g_isa = isa; }

bool dsq_cpu_use_avx2(void)
{
    return g_isa != DSQ_CPU_ISA_SCALAR && dsq_cpu_has_avx2();
}

void dsq_cpu_set_threads(int n) { g_threads = n > 0 ? n : 0; }

int dsq_cpu_threads(void)
{
    if (g_threads > 0) return g_threads;
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
}
