/* The one place that answers "does this CPU have X?", and the settings shared
 * by the CPU kernels: which instruction set they use (chosen at run time; tests
 * force the scalar reference to compare it with the SIMD one) and how many
 * OpenMP threads they start. Nothing else in the library asks the CPU
 * (scripts/check-layers.sh rejects the compiler's CPU builtins and CPUID
 * anywhere but kernels/cpu_features.c). */
#ifndef DSQ_KERNELS_CPU_H
#define DSQ_KERNELS_CPU_H

#include <stdbool.h>
#include <stddef.h>

/* Instruction-set extensions, each answered only when the OS also saves the
 * register state it needs (XCR0 through XGETBV): YMM for the AVX family,
 * opmask + ZMM for AVX512, the tile state for AMX. So "yes" means an
 * instruction of that extension runs, not just that CPUID lists it.
 * AMX caveat: Linux also wants each process to ask for the tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM) before its first tile instruction; the AMX
 * kernels do that (dsq_amx_ready, kernels/amx.h), dsq_cpu_has() never does (it has no side effects). */
typedef enum dsq_cpu_feature {
    DSQ_CPU_AVX2,
    DSQ_CPU_FMA,
    DSQ_CPU_F16C,
    DSQ_CPU_AVX512F,
    DSQ_CPU_AVX512BW,
    DSQ_CPU_AVX512VL,
    DSQ_CPU_AVX512_BF16, /* vdpbf16ps, 512-bit and (with VL) narrower */
    DSQ_CPU_AVX512_VNNI, /* vpdpbusd on ZMM */
    DSQ_CPU_AVX_VNNI,    /* the VEX-encoded vpdpbusd of CPUs without AVX512 */
    DSQ_CPU_AMX_BF16,
    DSQ_CPU_AMX_INT8,
    DSQ_CPU_N_FEATURES
} dsq_cpu_feature;

/* True when the running CPU and OS support f; false for unknown values and on
 * other architectures. Probed once per process. */
bool dsq_cpu_has(dsq_cpu_feature f);
/* The CPU's brand string ("Intel(R) Xeon(R) Processor"), or "unknown", into
 * buf (benchmarks print it next to their figures). */
void dsq_cpu_model(char *buf, size_t cap);
/* Lower-case name as in /proc/cpuinfo style lists ("avx512_bf16"); "?" if unknown. */
const char *dsq_cpu_feature_name(dsq_cpu_feature f);

/* The combinations the kernels are built for. */
/* AVX2+FMA+F16C: the AVX2 paths of kernels/ and runtime/cpu/. */
bool dsq_cpu_has_avx2(void);
/* AVX2+FMA: the legacy and IQ4 quantizers' AVX2 paths (no F16C conversions). */
bool dsq_cpu_has_avx2_fma(void);
/* AVX512 F/BW/VL + AVX512-BF16: the fast BF16 GEMM kernel. */
bool dsq_cpu_has_avx512bf16(void);

typedef enum dsq_cpu_isa {
    DSQ_CPU_ISA_AUTO = 0, /* AVX2+FMA when the CPU has it, else scalar */
    DSQ_CPU_ISA_SCALAR,
    DSQ_CPU_ISA_AVX2, /* falls back to scalar on a CPU without AVX2+FMA */
    /* AUTO's choice, named: AVX2+FMA, and the AVX-512 F32 GEMM kernel where
     * the CPU has AVX512F; forcing AVX2 instead keeps that kernel off */
    DSQ_CPU_ISA_AVX512,
} dsq_cpu_isa;

/* Process-wide; call while no kernel runs. The GGUF quantizers ignore it: their
 * SIMD paths give the scalar reference's bytes, and tests call the references
 * directly. */
void dsq_cpu_set_isa(dsq_cpu_isa isa);
/* True when the kernels should take their AVX2+FMA(+F16C) paths now. */
bool dsq_cpu_use_avx2(void);
/* True when dsq_gemm_f32 should take its 12x32 AVX-512 kernel now: AVX2 is in
 * use, the CPU has AVX512F and AVX2 alone is not forced. */
bool dsq_cpu_use_avx512_gemm(void);
/* True when dsq_gemm_bf16 should take its AVX512-BF16 kernel now (the CPU has
 * it and the scalar reference is not forced). */
bool dsq_cpu_use_bf16_gemm(void);

/* Threads for every parallel kernel the calling thread starts; n <= 0
 * restores the default (omp_get_max_threads(), i.e. OMP_NUM_THREADS or the
 * CPU count). Per calling thread: a runtime context sets its own count
 * before each op (runtime/backend.h). */
void dsq_cpu_set_threads(int n);
int dsq_cpu_threads(void);

/* On the calling thread until dsq_cpu_denormals_restore: denormal results
 * flushed to zero and denormal inputs read as zero (x86 MXCSR FTZ and DAZ;
 * elsewhere nothing). Returns the state to restore. For float loops whose
 * values can underflow (GPTQ's float factor): each denormal operand costs a
 * microcode assist, which made a factor with tiny entries 6x slower. */
unsigned dsq_cpu_flush_denormals(void);
void dsq_cpu_denormals_restore(unsigned state);

#endif
