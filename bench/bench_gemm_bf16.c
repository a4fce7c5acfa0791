/* The BF16 GEMM of the calibration passes, path by path, against the F32
 * GEMM in the same run (one thread: the kernels are single-threaded, callers
 * split the work).
 *
 * For each shape MxNxK (A [m x k] BF16 times op(B) = B^T, B [n x k] F32, as a
 * linear's tokens times its weights) it times, best of --reps (each rep at
 * least 0.2 s of calls):
 *   f32        dsq_gemm_f32 (kernels/gemm.h), the baseline
 *   bf16 <p>   dsq_gemm_bf16_on on every path the CPU has: scalar (only with
 *              --scalar: it is slow), avx512_bf16, amx_bf16; B packed per call
 *   amx packed dsq_gemm_bf16_packed on B packed once (what a calibration pass
 *              does since each linear runs once per sample with fixed weights)
 * in GFLOP/s (2 m n k / s) and the ratio to f32 and to avx512_bf16.
 *
 * usage: bench_gemm_bf16 [--reps 3] [--shapes 512x1536x576,512x576x1536,...] [--scalar]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#define MAX_SHAPES 16

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static float uniform(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / (float)(1 << 24) - 0.5f;
}

typedef struct work {
    int64_t m, n, k, lda;
    float *Af, *B, *C;
    uint16_t *A, *P;
    void *scratch;
} work;

enum { OP_F32 = -2, OP_PACKED = -1 }; /* else a dsq_gemm_bf16_path */

static void run_once(work *w, int op)
{
    if (op == OP_F32) dsq_gemm_f32(DSQ_GEMM_BT, w->m, w->n, w->k, w->Af, w->k, w->B, w->k, w->C, w->n, false, w->scratch);
    else if (op == OP_PACKED)
        dsq_gemm_bf16_packed(w->m, w->n, 0, w->n, w->k, w->A, w->lda, w->P, w->C, w->n, false, w->scratch);
    else
        dsq_gemm_bf16_on((dsq_gemm_bf16_path)op, DSQ_GEMM_BT, w->m, w->n, w->k, w->A, w->lda, w->B, w->k, w->C, w->n,
                         false, w->scratch);
}

static double best_gflops(work *w, int op, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        run_once(w, op); /* warm */
        double t0 = dsq_now_s(), t;
        int calls = 0;
        do {
            run_once(w, op);
            calls++;
        } while ((t = dsq_now_s() - t0) < 0.2);
        double g = 2.0 * (double)w->m * (double)w->n * (double)w->k * calls / t / 1e9;
        if (g > best) best = g;
    }
    return best;
}

static int parse_shapes(const char *s, int64_t sh[][3])
{
    int n = 0;
    while (*s && n < MAX_SHAPES) {
        long long a, b, c;
        int used = 0;
        if (sscanf(s, "%lldx%lldx%lld%n", &a, &b, &c, &used) != 3 || a <= 0 || b <= 0 || c <= 0) return -1;
        sh[n][0] = a, sh[n][1] = b, sh[n][2] = c, n++;
        s += used;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    int reps = 3;
    bool scalar = false;
    int64_t shapes[MAX_SHAPES][3];
    int n_shapes = parse_shapes("512x576x576,512x1536x576,512x576x1536,512x192x576,1536x128x1024", shapes);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) n_shapes = parse_shapes(argv[++i], shapes);
        else if (!strcmp(argv[i], "--scalar")) scalar = true;
        else {
            fprintf(stderr, "usage: bench_gemm_bf16 [--reps 3] [--shapes MxNxK,...] [--scalar]\n");
            return 2;
        }
    }
    if (n_shapes <= 0 || reps <= 0) {
        fprintf(stderr, "bench_gemm_bf16: --shapes takes MxNxK[,MxNxK...] (positive), --reps a positive count\n");
        return 2;
    }
    char model[256];
    dsq_cpu_model(model, sizeof model);
    bool amx = dsq_gemm_bf16_path_available(DSQ_GEMM_BF16_AMX);
    bool avx = dsq_gemm_bf16_path_available(DSQ_GEMM_BF16_AVX512);
    printf("cpu: %s; 1 thread; bf16 paths: avx512_bf16 %s, amx_bf16 %s\n", model, avx ? "yes" : "no",
           amx ? "yes" : "no");
    printf("%-16s | %-12s %9s | vs f32  vs avx512\n", "m x n x k", "op", "GFLOP/s");
    for (int s = 0; s < n_shapes; s++) {
        work w = {.m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2]};
        w.lda = dsq_gemm_bf16_lda(w.k);
        w.Af = malloc((size_t)(w.m * w.k) * sizeof *w.Af);
        w.B = malloc((size_t)(w.n * w.k) * sizeof *w.B);
        w.C = malloc((size_t)(w.m * w.n) * sizeof *w.C);
        w.A = malloc((size_t)(w.m * w.lda) * sizeof *w.A);
        w.P = aligned_alloc(64, (dsq_gemm_bf16_packed_bytes(w.n, w.k) + 63) & ~(size_t)63);
        size_t sb = dsq_gemm_bf16_scratch_bytes(w.n, w.k), sf = dsq_gemm_scratch_floats(w.n, w.k) * sizeof(float);
        w.scratch = aligned_alloc(64, ((sb > sf ? sb : sf) + 63) & ~(size_t)63);
        if (!w.Af || !w.B || !w.C || !w.A || !w.P || !w.scratch) {
            fprintf(stderr, "bench_gemm_bf16: out of memory for %lldx%lldx%lld\n", (long long)w.m, (long long)w.n,
                    (long long)w.k);
            return 1;
        }
        for (int64_t i = 0; i < w.m * w.k; i++) w.Af[i] = uniform();
        for (int64_t i = 0; i < w.n * w.k; i++) w.B[i] = uniform();
        dsq_gemm_bf16_round_rows(w.Af, w.k, w.m, w.k, w.A, w.lda);
        dsq_gemm_bf16_pack_all(w.n, w.k, w.B, w.k, 0, w.n, w.P);
        char label[64];
        snprintf(label, sizeof label, "%lldx%lldx%lld", (long long)w.m, (long long)w.n, (long long)w.k);
        double f32 = best_gflops(&w, OP_F32, reps), a512 = avx ? best_gflops(&w, DSQ_GEMM_BF16_AVX512, reps) : 0;
        printf("%-16s | %-12s %9.1f |\n", label, "f32", f32);
        int ops[4], n_ops = 0;
        if (scalar) ops[n_ops++] = DSQ_GEMM_BF16_SCALAR;
        if (avx) ops[n_ops++] = DSQ_GEMM_BF16_AVX512;
        if (amx) ops[n_ops++] = DSQ_GEMM_BF16_AMX;
        if (avx || amx) ops[n_ops++] = OP_PACKED; /* the best path, B packed once */
        for (int o = 0; o < n_ops; o++) {
            double g = ops[o] == DSQ_GEMM_BF16_AVX512 ? a512 : best_gflops(&w, ops[o], reps);
            const char *name = ops[o] == OP_PACKED ? (amx && w.m >= 16 ? "amx packed" : "avx512 packed")
                                                   : dsq_gemm_bf16_path_name((dsq_gemm_bf16_path)ops[o]);
            if (a512 > 0) printf("%-16s | bf16 %-7s %9.1f | %5.2fx  %5.2fx\n", "", name, g, g / f32, g / a512);
            else printf("%-16s | bf16 %-7s %9.1f | %5.2fx\n", "", name, g, g / f32);
        }
        free(w.Af), free(w.B), free(w.C), free(w.A), free(w.P), free(w.scratch);
    }
    return 0;
}
