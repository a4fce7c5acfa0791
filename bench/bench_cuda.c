/* GPU benchmarks of the CUDA products, each against its baseline in the same
 * run: W4A16 (our kernel) vs cuBLAS FP16 at M = 1..256 on Llama-3-8B and -70B
 * layer shapes; FP8 E4M3 (per-row scales) and INT8 (IMMA + our scale
 * epilogue) vs cuBLAS BF16 at large M. GPU time from events, the median of
 * five timed loops; weights rotate over enough copies to exceed the L2, so
 * small-M products read them from memory as a model's layers do.
 * Usage: bench_cuda [--json FILE] [--md FILE] [--quick | --profile]
 * (--profile: only the W4A16 70B down projection at M = 1 and 16, for a
 * profiler such as ncu to attach to.)
 * Without a GPU (or a CUDA build) it says so and exits 77. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "runtime/cuda/cuda_backend.h"

#define L2_ROTATE_BYTES ((size_t)512 << 20)
#define MAX_COPIES 64

static FILE *g_json, *g_md;
static int g_first = 1;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void *dev_random(size_t bytes, uint64_t seed, const char *what)
{
    void *h = malloc(bytes), *d = NULL;
    if (!h) return NULL;
    uint64_t s = seed | 1;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = rng_next(&s);
        memcpy((char *)h + i, &v, 8);
    }
    if (dsq_cuda_malloc(&d, bytes, what) != DSQ_OK || dsq_cuda_upload(d, h, bytes) != DSQ_OK) {
        fprintf(stderr, "bench_cuda: %s\n", dsq_errmsg());
        dsq_cuda_free(d);
        d = NULL;
    }
    free(h);
    return d;
}

/* Device F16/BF16 values from N(0, sd^2), converted on the device. */
static void *dev_halfs(size_t n, dsq_type t, float sd, uint64_t seed)
{
    float *h = malloc(n * sizeof *h);
    void *df = NULL, *d = NULL;
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) h[i] = sd * ((float)(rng_next(&s) % 2001) / 1000.0f - 1.0f);
    if (dsq_cuda_malloc(&df, n * 4, "bench floats") == DSQ_OK && dsq_cuda_upload(df, h, n * 4) == DSQ_OK &&
        dsq_cuda_malloc(&d, n * 2, "bench halfs") == DSQ_OK)
        (void)dsq_cuda_convert_f32_dev(df, t, d, n);
    dsq_cuda_free(df);
    free(h);
    return d;
}

typedef dsq_status (*run_fn)(void *ctx, int copy);

/* Median milliseconds per call over 5 loops of `reps` calls, rotating copies. */
static double time_ms(run_fn f, void *ctx, int copies, int reps)
{
    double t[5];
    for (int w = 0; w < 3; w++)
        if (f(ctx, w % copies) != DSQ_OK) return -1;
    if (dsq_cuda_sync("bench warm-up") != DSQ_OK) return -1;
    for (int l = 0; l < 5; l++) {
        dsq_cuda_timer *tm;
        if (dsq_cuda_timer_start(&tm) != DSQ_OK) return -1;
        for (int r = 0; r < reps; r++)
            if (f(ctx, r % copies) != DSQ_OK) return -1;
        double ms;
        if (dsq_cuda_timer_stop(tm, &ms) != DSQ_OK) return -1;
        t[l] = ms / reps;
    }
    for (int i = 1; i < 5; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[2];
}

typedef struct w4_ctx {
    dsq_cuda_w4 *w[MAX_COPIES];
    void *wh[MAX_COPIES];
    void *x, *y;
    int m, n, k;
} w4_ctx;

static dsq_status run_w4(void *c, int i)
{
    w4_ctx *x = c;
    return dsq_cuda_w4a16(x->w[i], x->x, x->y, x->m);
}

static dsq_status run_fp16(void *c, int i)
{
    w4_ctx *x = c;
    return dsq_cuda_gemm_dense(DSQ_TYPE_F16, DSQ_TYPE_F16, x->m, x->n, x->k, x->x, x->wh[i], x->y);
}

static void emit(const char *kind, const char *shape, int m, int n, int k, const char *ours, double ms_ours,
                 const char *base, double ms_base, double bytes_ours)
{
    double ratio = ms_ours > 0 && ms_base > 0 ? ms_base / ms_ours : 0;
    double gbs = ms_ours > 0 ? bytes_ours / (ms_ours * 1e6) : 0;
    double tflops = ms_ours > 0 ? 2.0 * m * n * (double)k / (ms_ours * 1e9) : 0;
    printf("%-6s %-22s M=%-5d %-12s %9.4f ms  %-10s %9.4f ms  x%.2f  %7.0f GB/s  %6.1f TFLOP/s\n", kind, shape, m, ours,
           ms_ours, base, ms_base, ratio, gbs, tflops);
    if (g_json)
        fprintf(g_json,
                "%s\n  {\"kind\": \"%s\", \"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"ours\": \"%s\", "
                "\"ms\": %.6f, \"baseline\": \"%s\", \"baseline_ms\": %.6f, \"speedup\": %.4f, \"gb_s\": %.1f, "
                "\"tflop_s\": %.2f}",
                g_first ? "" : ",", kind, shape, m, n, k, ours, ms_ours, base, ms_base, ratio, gbs, tflops);
    g_first = 0;
    if (g_md)
        fprintf(g_md, "| %s | %s | %d | %s %.4f ms | %s %.4f ms | **%.2fx** | %.0f GB/s | %.1f |\n", kind, shape, m,
                ours, ms_ours, base, ms_base, ratio, gbs, tflops);
}

static int bench_w4(const char *name, int n, int k, const int *ms, int n_ms)
{
    w4_ctx c = {0};
    c.n = n, c.k = k;
    size_t qbytes = (size_t)n * k / 2 + (size_t)(k / 128) * n * 4, hbytes = (size_t)n * k * 2;
    int copies = (int)((L2_ROTATE_BYTES + qbytes - 1) / qbytes),
        hcopies = (int)((L2_ROTATE_BYTES + hbytes - 1) / hbytes);
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    if (hcopies > MAX_COPIES) hcopies = MAX_COPIES;
    dsq_w4_packed p = {n, k, 128, NULL, NULL};
    size_t nw = (size_t)n / 16 * (k / 64) * DSQ_W4_TILE_WORDS, ns = (size_t)(k / 128) * n;
    p.qw = malloc(nw * 4), p.sz = malloc(ns * 4);
    uint64_t s = 12345;
    for (size_t i = 0; i < nw; i++) p.qw[i] = (uint32_t)rng_next(&s);
    for (size_t i = 0; i < ns; i++) {
        uint16_t sc = dsq_f32_to_f16(0.002f + 0.01f * (float)(rng_next(&s) % 100) / 100.0f);
        p.sz[i] = (uint32_t)sc | (uint32_t)dsq_f32_to_f16(-8.0f * dsq_f16_to_f32(sc)) << 16;
    }
    int ok = 1;
    for (int i = 0; i < copies && ok; i++) ok = dsq_cuda_w4_upload(&p, &c.w[i]) == DSQ_OK;
    for (int i = 0; i < hcopies && ok; i++)
        ok = (c.wh[i] = dev_halfs((size_t)n * k, DSQ_TYPE_F16, 0.02f, 7 + i)) != NULL;
    int mmax = ms[n_ms - 1];
    if (ok) ok = (c.x = dev_halfs((size_t)mmax * k, DSQ_TYPE_F16, 1.0f, 99)) != NULL;
    if (ok) ok = dsq_cuda_malloc(&c.y, (size_t)mmax * n * 4, "bench y") == DSQ_OK;
    char shape[64];
    snprintf(shape, sizeof shape, "%s %dx%d", name, n, k);
    for (int i = 0; ok && i < n_ms; i++) {
        c.m = ms[i];
        int reps = 20;
        double a = time_ms(run_w4, &c, copies, reps), b = time_ms(run_fp16, &c, hcopies, reps);
        if (a < 0 || b < 0) {
            fprintf(stderr, "bench_cuda: %s M=%d: %s\n", shape, c.m, dsq_errmsg());
            ok = 0;
            break;
        }
        emit("w4a16", shape, c.m, n, k, "w4a16-g128", a, "cublas-f16", b,
             (double)qbytes + 2.0 * c.m * k + 4.0 * c.m * n);
    }
    for (int i = 0; i < copies; i++) dsq_cuda_w4_free(c.w[i]);
    for (int i = 0; i < hcopies; i++) dsq_cuda_free(c.wh[i]);
    dsq_cuda_free(c.x);
    dsq_cuda_free(c.y);
    free(p.qw);
    free(p.sz);
    return ok;
}

typedef struct big_ctx {
    int m, n, k;
    void *xh, *wh, *x8, *w8, *sx, *sw, *acc, *y;
    void *bsx, *bsw; /* block scales: [k/128][m], [n/128][ld] */
} big_ctx;

static dsq_status run_bf16(void *c, int i)
{
    big_ctx *b = c;
    (void)i;
    return dsq_cuda_gemm_dense(DSQ_TYPE_BF16, DSQ_TYPE_BF16, b->m, b->n, b->k, b->xh, b->wh, b->y);
}

static dsq_status run_fp8(void *c, int i)
{
    big_ctx *b = c;
    (void)i;
    return dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_ROWCOL, DSQ_TYPE_BF16, b->m, b->n, b->k, b->x8, b->sx, b->w8, b->sw, b->y);
}

static dsq_status run_fp8_tensor(void *c, int i)
{
    big_ctx *b = c;
    (void)i;
    return dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_TENSOR, DSQ_TYPE_BF16, b->m, b->n, b->k, b->x8, b->sx, b->w8, b->sw, b->y);
}

static dsq_status run_fp8_block(void *c, int i)
{
    big_ctx *b = c;
    (void)i;
    return dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_BLOCK128, DSQ_TYPE_BF16, b->m, b->n, b->k, b->x8, b->bsx, b->w8, b->bsw,
                             b->y);
}

static dsq_status run_i8(void *c, int i)
{
    big_ctx *b = c;
    (void)i;
    return dsq_cuda_gemm_i8(DSQ_TYPE_BF16, b->m, b->n, b->k, b->x8, b->sx, b->w8, b->sw, b->acc, b->y);
}

static int bench_big(int m, int n, int k)
{
    big_ctx b = {m, n, k, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nbx = (size_t)((k + 127) / 128) * m, nbw = (size_t)((n + 127) / 128) * dsq_cuda_fp8_block_ld(k);
    int ok = (b.xh = dev_halfs((size_t)m * k, DSQ_TYPE_BF16, 1.0f, 1)) &&
             (b.wh = dev_halfs((size_t)n * k, DSQ_TYPE_BF16, 0.02f, 2));
    /* random bytes: E4M3 NaN codes are 2 in 256, harmless to the timing; INT8 any */
    if (ok) ok = (b.x8 = dev_random((size_t)m * k, 3, "x8")) && (b.w8 = dev_random((size_t)n * k, 4, "w8"));
    size_t most = (size_t)(m > n ? m : n);
    if (nbx > most) most = nbx;
    if (nbw > most) most = nbw;
    float *ones = malloc(most * 4);
    for (size_t i = 0; i < most; i++) ones[i] = 1e-3f;
    if (ok)
        ok = dsq_cuda_malloc(&b.sx, (size_t)m * 4, "sx") == DSQ_OK &&
             dsq_cuda_upload(b.sx, ones, (size_t)m * 4) == DSQ_OK;
    if (ok)
        ok = dsq_cuda_malloc(&b.sw, (size_t)n * 4, "sw") == DSQ_OK &&
             dsq_cuda_upload(b.sw, ones, (size_t)n * 4) == DSQ_OK;
    if (ok)
        ok = dsq_cuda_malloc(&b.acc, (size_t)m * n * 4, "acc") == DSQ_OK &&
             dsq_cuda_malloc(&b.y, (size_t)m * n * 2, "y") == DSQ_OK;
    if (ok)
        ok = dsq_cuda_malloc(&b.bsx, nbx * 4, "block sx") == DSQ_OK && dsq_cuda_upload(b.bsx, ones, nbx * 4) == DSQ_OK;
    if (ok)
        ok = dsq_cuda_malloc(&b.bsw, nbw * 4, "block sw") == DSQ_OK && dsq_cuda_upload(b.bsw, ones, nbw * 4) == DSQ_OK;
    free(ones);
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%d", m, n, k);
    double base = ok ? time_ms(run_bf16, &b, 1, 10) : -1;
    if (base < 0) fprintf(stderr, "bench_cuda: BF16 %s: %s\n", shape, dsq_errmsg());
    struct {
        const char *kind, *name;
        run_fn f;
    } rows[] = {{"fp8", "fp8-rowcol", run_fp8},
                {"fp8", "fp8-tensor", run_fp8_tensor},
                {"fp8", "fp8-block128", run_fp8_block},
                {"int8", "int8-rowcol", run_i8}};
    for (size_t i = 0; ok && base > 0 && i < sizeof rows / sizeof rows[0]; i++) {
        double t = time_ms(rows[i].f, &b, 1, 10);
        if (t < 0) {
            fprintf(stderr, "bench_cuda: %s %s: %s\n", rows[i].name, shape, dsq_errmsg());
            continue;
        }
        emit(rows[i].kind, shape, m, n, k, rows[i].name, t, "cublas-bf16", base,
             (double)m * k + (double)n * k + 2.0 * m * n);
    }
    dsq_cuda_free(b.xh), dsq_cuda_free(b.wh), dsq_cuda_free(b.x8), dsq_cuda_free(b.w8);
    dsq_cuda_free(b.sx), dsq_cuda_free(b.sw), dsq_cuda_free(b.acc), dsq_cuda_free(b.y);
    dsq_cuda_free(b.bsx), dsq_cuda_free(b.bsw);
    return ok && base > 0;
}

int main(int argc, char **argv)
{
    int quick = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            g_json = fopen(argv[++i], "w");
        else if (!strcmp(argv[i], "--md") && i + 1 < argc)
            g_md = fopen(argv[++i], "w");
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--profile"))
            profile = 1;
        else {
            fprintf(stderr, "usage: bench_cuda [--json FILE] [--md FILE] [--quick | --profile]\n");
            return 2;
        }
    }
    if (!dsq_cuda_available()) {
        fprintf(stderr, "bench_cuda: no usable CUDA device (or a build without CUDA); nothing measured\n");
        return 77;
    }
    dsq_cuda_info info;
    if (dsq_cuda_get_info(&info) != DSQ_OK) return 1;
    printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", info.name, info.cc_major, info.cc_minor,
           info.n_sm, (double)info.mem_total / (1 << 30), info.driver_version, info.runtime_version);
    if (g_json)
        fprintf(g_json, "{\"device\": \"%s\", \"sm\": %d, \"n_sm\": %d, \"results\": [", info.name,
                info.cc_major * 10 + info.cc_minor, info.n_sm);
    if (g_md)
        fprintf(g_md,
                "GPU: %s (sm_%d%d, %d SMs). Times: GPU events, median of 5 loops.\n\n"
                "| kind | shape (n x k, or m x n x k) | M | ours | baseline | speedup | ours GB/s | ours TFLOP/s |\n"
                "|---|---|---:|---|---|---:|---:|---:|\n",
                info.name, info.cc_major, info.cc_minor, info.n_sm);
    const int ms[] = {1, 4, 16, 64, 256};
    const int n_ms = sizeof ms / sizeof ms[0];
    const struct {
        const char *name;
        int n, k;
    } shapes[] = {{"8B q/o", 4096, 4096},  {"8B gate/up", 14336, 4096},  {"8B down", 4096, 14336},
                  {"70B q/o", 8192, 8192}, {"70B gate/up", 28672, 8192}, {"70B down", 8192, 28672}};
    int fails = 0;
    if (profile) {
        const int pm[] = {1, 16};
        return bench_w4("70B down", 8192, 28672, pm, 2) ? 0 : 1;
    }
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (quick && i % 3) continue;
        fails += !bench_w4(shapes[i].name, shapes[i].n, shapes[i].k, ms, n_ms);
    }
    const int big[][3] = {{4096, 8192, 8192}, {8192, 8192, 8192}, {8192, 28672, 8192}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        if (quick && i) continue;
        fails += !bench_big(big[i][0], big[i][1], big[i][2]);
    }
    if (g_json) {
        fprintf(g_json, "\n]}\n");
        fclose(g_json);
    }
    if (g_md) fclose(g_md);
    return fails ? 1 : 0;
}
