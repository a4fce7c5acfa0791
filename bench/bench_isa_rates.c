/* Instruction throughput of the products the calibration GEMMs are built on,
 * against vfmadd231ps (the F32 GEMM's instruction) in the same run: 14
 * independent ZMM accumulators per loop iteration, so each instruction's
 * latency is hidden and the loop measures its issue rate. This is what
 * decides `--compute auto` (kernels/gemm_bf16.h, dsq_gemm_bf16_preferred):
 * on the Xeon of stop 39, vdpbf16ps retired at a quarter of vfmadd231ps's
 * rate, so its twice-as-wide products ran at half the F32 flop rate.
 *
 * Printed per instruction: G instructions/s, GFLOP/s (GOP/s for the integer
 * dot product: 2 per multiply-add) and the ratio to vfmadd231ps; an
 * instruction the CPU lacks is reported as such and not run. x86-64 only.
 *
 * usage: bench_isa_rates [--iters N] [--reps R]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* 14 instructions into zmm0..zmm13 from zmm14 and zmm15 (zeroed: no
 * denormals, no exceptions); without -mavx512f the compiler only knows the
 * lower 16 registers, so that is all the loop uses. */
#define N_ACC 14
#define ONE(I, d) I " %%zmm14, %%zmm15, %%zmm" #d "\n"
#define FOURTEEN(I)                                                                                                    \
    ONE(I, 0)                                                                                                          \
    ONE(I, 1) ONE(I, 2) ONE(I, 3) ONE(I, 4) ONE(I, 5) ONE(I, 6) ONE(I, 7) ONE(I, 8) ONE(I, 9) ONE(I, 10) ONE(I, 11)    \
        ONE(I, 12) ONE(I, 13)

#define LOOP(I)                                                                                                        \
    __asm__ volatile(                                                                                                  \
        "vpxord %%zmm14, %%zmm14, %%zmm14\n vpxord %%zmm15, %%zmm15, %%zmm15\n mov %0, %%rcx\n 1:\n" FOURTEEN(         \
            I) "dec %%rcx\n jnz 1b\n"                                                                                  \
        :                                                                                                              \
        : "r"(iters)                                                                                                   \
        : "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",     \
          "xmm12", "xmm13", "xmm14", "xmm15", "memory")

static void run_fma(long iters) { LOOP("vfmadd231ps"); }
static void run_dpbf16(long iters) { LOOP("vdpbf16ps"); }
static void run_vnni(long iters) { LOOP("vpdpbusd"); }

typedef struct insn {
    const char *name;
    void (*run)(long);
    double flops; /* per instruction */
    int available;
} insn;

int main(int argc, char **argv)
{
    long iters = 50000000;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_isa_rates [--iters N] [--reps R]\n");
            return 2;
        }
    }
    if (iters < 1000 || reps < 1) {
        fprintf(stderr, "bench_isa_rates: --iters must be >= 1000 and --reps >= 1\n");
        return 2;
    }
    char model[128];
    dsq_cpu_model(model, sizeof model);
    if (!dsq_cpu_has(DSQ_CPU_AVX512F)) {
        printf("CPU: %s: no AVX512F, nothing to measure\n", model);
        return 0;
    }
    insn t[] = {
        {"vfmadd231ps zmm", run_fma, 32.0, 1},
        {"vdpbf16ps zmm", run_dpbf16, 64.0, dsq_cpu_has_avx512bf16()},
        {"vpdpbusd zmm", run_vnni, 128.0, dsq_cpu_has(DSQ_CPU_AVX512_VNNI)},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    double best[3] = {0, 0, 0};
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n; k++) {
            if (!t[k].available) continue;
            const double t0 = dsq_now_s();
            t[k].run(iters);
            const double rate = (double)N_ACC * (double)iters / (dsq_now_s() - t0) / 1e9;
            if (rate > best[k]) best[k] = rate;
        }
    printf("CPU: %s; one thread, %d independent accumulators, best of %d runs of %ld iterations\n\n", model, N_ACC,
           reps, iters);
    printf("| instruction | G instr/s | GFLOP/s (GOP/s) | instr rate vs vfmadd231ps | flop rate vs vfmadd231ps |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (int k = 0; k < n; k++) {
        if (!t[k].available) {
            printf("| %s | not on this CPU | | | |\n", t[k].name);
            continue;
        }
        printf("| %s | %.2f | %.0f | %.2fx | %.2fx |\n", t[k].name, best[k], best[k] * t[k].flops, best[k] / best[0],
               best[k] * t[k].flops / (best[0] * t[0].flops));
    }
    return 0;
}

#else

int main(void)
{
    printf("bench_isa_rates: x86-64 only\n");
    return 0;
}

#endif
