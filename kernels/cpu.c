/* The ISA and thread settings of the CPU kernels; the feature probe is
 * kernels/cpu_features.c. */
#include "kernels/cpu.h"

#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040u /* flush-to-zero (bit 15), denormals-are-zero (bit 6) */
#endif

static dsq_cpu_isa g_isa = DSQ_CPU_ISA_AUTO;
/* per calling thread, so that contexts driven from different threads keep their own counts */
static _Thread_local int g_threads = 0;

bool dsq_cpu_use_bf16_gemm(void) { return g_isa != DSQ_CPU_ISA_SCALAR && dsq_cpu_has_avx512bf16(); }

void dsq_cpu_set_isa(dsq_cpu_isa isa) { g_isa = isa; }

bool dsq_cpu_use_avx2(void) { return g_isa != DSQ_CPU_ISA_SCALAR && dsq_cpu_has_avx2(); }

void dsq_cpu_set_threads(int n) { g_threads = n > 0 ? n : 0; }

bool dsq_cpu_use_avx512_gemm(void)
{
    return g_isa != DSQ_CPU_ISA_AVX2 && dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F);
}

int dsq_cpu_threads(void)
{
    if (g_threads > 0) return g_threads;
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
}

unsigned dsq_cpu_flush_denormals(void)
{
#ifdef MXCSR_FTZ_DAZ
    const unsigned old = _mm_getcsr();
    _mm_setcsr(old | MXCSR_FTZ_DAZ);
    return old;
#else
    return 0;
#endif
}

void dsq_cpu_denormals_restore(unsigned state)
{
#ifdef MXCSR_FTZ_DAZ
    _mm_setcsr(state);
#else
    (void)state;
#endif
}
