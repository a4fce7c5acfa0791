/* GPTQ's factor (quantizers/gptq_factor.c), the upper Cholesky factor of the
 * damped inverse Hessian, in float (what GPTQ runs since stop 40, as the
 * references compute it on GPUs) against double (what it ran before, kept as
 * the tests' reference), in the same run at real layer widths: seconds,
 * GFLOP/s (a Cholesky and a triangular inverse, n^3/3 fused multiply-adds
 * each) and the ratio, and how far the float factor lies from the double one
 * (max |U32 - U64| over max |U64|). H is the Kac-Murdock-Szego matrix
 * 0.9^|i-j| (positive definite, condition about 19) plus GPTQ's dampening of
 * 0.01 of its mean diagonal: the timing does not depend on the values.
 *
 * usage: bench_gptq_factor [--sizes 1024,4096] [--threads T] [--reps N]
 * Results and the command are kept in docs/benchmarks.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/status.h"
#include "kernels/cpu.h"
#include "quantizers/gptq.h"

static int parse_sizes(const char *s, int64_t *out, int max)
{
    int k = 0;
    while (*s && k < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 2 || v > 65536) return -1;
        out[k++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return k;
}

int main(int argc, char **argv)
{
    int64_t sizes[8] = {1024, 4096};
    int n_sizes = 2, reps = 2, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            n_sizes = parse_sizes(argv[++i], sizes, 8);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            n_sizes = -1;
            break;
        }
    }
    if (n_sizes < 1 || reps < 1 || threads < 0) {
        fprintf(stderr, "usage: bench_gptq_factor [--sizes 1024,4096] [--threads T] [--reps N]\n");
        return 2;
    }
    if (threads) dsq_cpu_set_threads(threads);
    char model[128];
    dsq_cpu_model(model, sizeof model);
    printf("CPU: %s; %d threads; best of %d\n\n", model, dsq_cpu_threads(), reps);
    printf("| n | f64 s | f64 GFLOP/s | f32 s | f32 GFLOP/s | f32 speed-up | max |U32 - U64| / max |U64| |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < n_sizes; k++) {
        const int64_t n = sizes[k];
        double *H = malloc((size_t)(n * n) * sizeof *H), *U64 = malloc((size_t)(n * n) * sizeof *U64);
        float *U32 = malloc((size_t)(n * n) * sizeof *U32);
        if (!H || !U64 || !U32) {
            fprintf(stderr, "bench_gptq_factor: out of memory at n = %lld\n", (long long)n);
            return 1;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) H[i * n + j] = pow(0.9, (double)llabs(i - j));
        const double damp = 0.01, flops = 2.0 * 2.0 * (double)n * (double)n * (double)n / 3.0;
        double best64 = 1e30, best32 = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = dsq_now_s();
            if (dsq_gptq_hinv_upper(H, n, damp, U64) != DSQ_OK) {
                fprintf(stderr, "bench_gptq_factor: %s\n", dsq_errmsg());
                return 1;
            }
            double t1 = dsq_now_s();
            if (dsq_gptq_hinv_upper_f32(H, n, damp, U32) != DSQ_OK) {
                fprintf(stderr, "bench_gptq_factor: %s\n", dsq_errmsg());
                return 1;
            }
            double t2 = dsq_now_s();
            best64 = t1 - t0 < best64 ? t1 - t0 : best64;
            best32 = t2 - t1 < best32 ? t2 - t1 : best32;
        }
        double maxabs = 0.0, maxdiff = 0.0;
        for (int64_t i = 0; i < n * n; i++) {
            maxabs = fmax(maxabs, fabs(U64[i]));
            maxdiff = fmax(maxdiff, fabs((double)U32[i] - U64[i]));
        }
        printf("| %lld | %.2f | %.1f | %.2f | %.1f | %.2fx | %.2g |\n", (long long)n, best64, flops / best64 / 1e9,
               best32, flops / best32 / 1e9, best64 / best32, maxdiff / maxabs);
        fflush(stdout);
        free(H);
        free(U64);
        free(U32);
    }
    return 0;
}
