/* Settings shared by the CPU backend's kernels: which instruction set the
 * kernels use (chosen at run time; tests force the scalar reference to
 * compare it with the SIMD one) and how many OpenMP threads they start. */
#ifndef DSQ_KERNELS_CPU_H
#define DSQ_KERNELS_CPU_H

#include <stdbool.h>

typedef enum dsq_cpu_isa {
    DSQ_CPU_ISA_AUTO = 0, /* AVX2+FMA when the CPU has it, else scalar */
    DSQ_CPU_ISA_SCALAR,
    DSQ_CPU_ISA_AVX2, /* falls back to scalar on a CPU without AVX2+FMA */
} dsq_cpu_isa;

/* Process-wide; call while no kernel runs. */
void dsq_cpu_set_isa(dsq_cpu_isa isa);
/* True when the kernels should take their AVX2+FMA(+F16C) paths now. */
bool dsq_cpu_use_avx2(void);
/* True when the CPU could run them (whatever was forced). */
bool dsq_cpu_has_avx2(void);

/* AVX512-BF16 (vdpbf16ps) with AVX512 F/BW/VL: the fast BF16 GEMM kernel. */
bool dsq_cpu_has_avx512bf16(void);
/* True when dsq_gemm_bf16 should take its AVX512-BF16 kernel now (the CPU has
 * it and the scalar reference is not forced). */
bool dsq_cpu_use_bf16_gemm(void);

/* Threads for every parallel kernel the calling thread starts; n <= 0
 * restores the default (omp_get_max_threads(), i.e. OMP_NUM_THREADS or the
 * CPU count). Per calling thread: a runtime context sets its own count
 * before each op (runtime/backend.h). */
void dsq_cpu_set_threads(int n);
int dsq_cpu_threads(void);

#endif
