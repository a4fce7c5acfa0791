/* Decode GEMV speed of the INT group storage (runtime/linear_intq.c): one
 * token through a 4096 x 4096 INT4 g128 linear (AutoAWQ / GPTQ shape), with 1
 * and 2 threads, against memcpy bandwidth measured in the same run (bytes
 * copied per second, a buffer far larger than the caches, split over the same
 * number of threads) and against the dense F16 GEMV of the same matrix.
 *
 * Reported per thread count: ms per GEMV, GB/s of weight storage read (INT4:
 * nibbles + F32 scales + zero bytes; F16: 2 bytes a weight), that figure as a
 * fraction of memcpy's, the INT4 speed-up over F16, and the AVX2 kernel's
 * speed-up over the scalar reference. Each figure is the best pass of --reps
 * repetitions of at least --min-ms each.
 *
 * usage: bench_gemv_intq [--rows N] [--cols N] [--reps N] [--min-ms MS] */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "quantizers/intq.h"
#include "kernels/cpu.h"
#include "runtime/linear.h"

#define COPY_BYTES (256u << 20)

static int g_reps = 5;
static double g_min_ms = 300;

static double now_ms(void) { return dsq_now_s() * 1e3; }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float rndf(void) { return (float)rnd() / 4294967296.0f - 0.5f; }

/* Best ms per GEMV over the repetitions. */
static double time_gemv(const dsq_linear *W, const float *x, float *y)
{
    double best = 1e30;
    for (int r = 0; r < g_reps; r++) {
        int n = 0;
        double t0 = now_ms(), t;
        do {
            if (dsq_linear_forward_gemv(W, x, y, 1) != DSQ_OK) {
                fprintf(stderr, "gemv failed: %s\n", dsq_errmsg());
                exit(1);
            }
            n++;
        } while ((t = now_ms() - t0) < g_min_ms);
        if (t / n < best) best = t / n;
    }
    return best;
}

/* Bytes copied per second by `threads` threads, each copying its share. */
static double memcpy_gbs(int threads, uint8_t *src, uint8_t *dst)
{
    double best = 1e30;
    size_t share = COPY_BYTES / (size_t)threads;
    for (int r = 0; r < g_reps; r++) {
        double t0 = now_ms();
#pragma omp parallel for num_threads(threads)
        for (int i = 0; i < threads; i++) memcpy(dst + (size_t)i * share, src + (size_t)i * share, share);
        double t = now_ms() - t0;
        if (t < best) best = t;
    }
    return (double)COPY_BYTES / (best * 1e6);
}

static int make_int4(int64_t rows, int64_t cols, dsq_linear *W, uint64_t *bytes)
{
    dsq_intq_params p = {.bits = 4, .group_size = 128, .sym = false, .rule = DSQ_INTQ_RULE_GPTQ};
    dsq_intq q;
    if (dsq_intq_alloc(&p, rows, cols, &q) != DSQ_OK) return -1;
    for (int64_t i = 0; i < rows * cols; i++) q.codes[i] = (uint8_t)(rnd() & 15);
    for (int64_t i = 0; i < rows * q.n_groups; i++) {
        q.scales[i] = 0.01f + 0.001f * rndf();
        q.zeros[i] = (uint8_t)(rnd() & 15);
    }
    dsq_status s = dsq_linear_init_intq(W, &q);
    *bytes = (uint64_t)rows * (uint64_t)W->row_bytes + (uint64_t)(rows * q.n_groups) * (sizeof(float) + 1);
    dsq_intq_free(&q);
    return s == DSQ_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    int64_t rows = 4096, cols = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) cols = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) g_reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-ms")) g_min_ms = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--rows N] [--cols N] [--reps N] [--min-ms MS]\n", argv[0]);
            return 2;
        }
    }
    if (rows <= 0 || cols <= 0 || cols % 128 || g_reps <= 0) {
        fprintf(stderr, "rows > 0, cols a multiple of 128, reps > 0\n");
        return 2;
    }
    dsq_linear wq, wh;
    uint64_t qbytes = 0, hbytes = (uint64_t)rows * (uint64_t)cols * 2;
    uint16_t *h = malloc((size_t)hbytes);
    float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
    uint8_t *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
    if (!h || !x || !y || !src || !dst || make_int4(rows, cols, &wq, &qbytes)) {
        fprintf(stderr, "setup failed: %s\n", dsq_errmsg());
        return 1;
    }
    for (int64_t i = 0; i < rows * cols; i++) h[i] = dsq_f32_to_f16(0.02f * rndf());
    for (int64_t i = 0; i < cols; i++) x[i] = rndf();
    memset(src, 1, COPY_BYTES);
    memset(dst, 2, COPY_BYTES);
    if (dsq_linear_init(&wh, DSQ_TYPE_F16, h, rows, cols) != DSQ_OK) {
        fprintf(stderr, "setup failed: %s\n", dsq_errmsg());
        return 1;
    }
    printf("GEMV 1 token, %lld x %lld; INT4 g128 asym: %.2f MB, F16: %.2f MB; AVX2 %s\n", (long long)rows,
           (long long)cols, qbytes / 1e6, hbytes / 1e6, dsq_cpu_has_avx2() ? "yes" : "no");
    printf("%-7s %9s %9s %9s %9s %9s %10s %10s %9s %9s\n", "threads", "memcpy", "int4 ms", "int4 GB/s", "int4/mcpy",
           "f16 ms", "f16 GB/s", "f16/mcpy", "int4 x", "simd x");
    for (int threads = 1; threads <= 2; threads++) {
        dsq_cpu_set_threads(threads);
        double mc = memcpy_gbs(threads, src, dst);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        double tq = time_gemv(&wq, x, y), th = time_gemv(&wh, x, y);
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
        double ts = time_gemv(&wq, x, y);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        double gq = qbytes / (tq * 1e6), gh = hbytes / (th * 1e6);
        printf("%-7d %9.2f %9.3f %9.2f %9.2f %9.3f %10.2f %10.2f %9.2f %9.2f\n", threads, mc, tq, gq, gq / mc, th, gh,
               gh / mc, th / tq, ts / tq);
    }
    dsq_linear_release(&wq);
    dsq_linear_release(&wh);
    free(h), free(x), free(y), free(src), free(dst);
    return 0;
}
