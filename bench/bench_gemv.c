/* Memory throughput of the decode path's matrix-vector products (a linear
 * layer's forward pass with one token, dsq_linear_forward_gemv) per weight
 * storage type, against this machine's memcpy bandwidth measured in the same
 * run.
 *
 * Each type gets a 4096 x 4096 matrix of N(0,1) weights quantized once, then
 * copied until the copies hold at least --mib MiB (more than the last-level
 * cache), and the timed sweep multiplies the same activation with each copy
 * in turn, as a decoder does layer after layer: the weights stream from DRAM.
 * Rate = weight bytes read / second, best of --reps sweeps.
 * memcpy: --mib MiB copied between two buffers by T threads (each its own
 * slice), bytes copied / second, best of --reps, measured before and after
 * the types (the best of both counts); a read-only sweep (sum of the bytes)
 * is shown too.
 * Target: each type >= 70% of memcpy (marked `!` when missed). The type
 * "Q8_0-int8" is Q8_0 packed once for the int8 kernel (dsq_linear_q8_pack;
 * its rate counts the Q8_0 bytes, the packed copy being 6% larger).
 *
 * --gemm adds the batched path's F32 matrix product (kernels/gemm.h) at
 * the shapes of the default model's linears and a 4096 x 4096 one, 512
 * tokens: dsq_gemm_f32 on one thread (B packing included, as in every call)
 * (the AVX2 kernel forced, then the run-time choice: AVX-512 where present)
 * and dsq_linear_forward_gemm with F32 weights on each thread count, and the
 * BF16 linear with weights packed per call and packed once (a calibration
 * pass), in GFLOP/s (2 m n k / s), best of --reps; bench/bench_runtime.py
 * --gemm runs numpy's OpenBLAS sgemm and torch's F32 and BF16 matmul
 * (oneDNN: AMX where present) on the same shapes next to it. --gemm-only skips
 * the GEMV part.
 *
 * usage: bench_gemv [--threads 1,2] [--types F32,Q8_0,...] [--mib 256] [--reps 5]
 *                   [--rows 4096] [--cols 4096] [--gemm | --gemm-only]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/status.h"
#include "quantizers/qtypes.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "runtime/linear.h"

#define MAX_TYPES 32
#define MAX_THREADS 8

static const char *g_default_types[] = {"F32",  "F16",  "BF16", "Q8_0", "Q4_0", "Q4_1",   "Q5_0",  "Q5_1",
                                        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};

typedef struct opts {
    int threads[MAX_THREADS], n_threads;
    const char *types[MAX_TYPES];
    int n_types;
    size_t mib;
    int reps;
    int64_t rows, cols;
    int gemm; /* 0: none, 1: also, 2: only */
} opts;

static void die(const char *what)
{
    fprintf(stderr, "bench_gemv: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_gemv [--threads 1,2] [--types F32,Q8_0,...] [--mib 256] [--reps 5] "
                    "[--rows 4096] [--cols 4096] [--gemm | --gemm-only]\n");
    exit(2);
}

static long parse_long(const char *v, long lo, long hi)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) usage();
    return x;
}

/* Splits a comma list in place into at most cap pieces. */
static int split(char *s, const char **out, int cap)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

static opts parse(int argc, char **argv)
{
    opts o = {{1, 2}, 2, {0}, 0, 256, 5, 4096, 4096, 0};
    for (size_t i = 0; i < sizeof g_default_types / sizeof *g_default_types; i++)
        o.types[o.n_types++] = g_default_types[i];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--gemm") || !strcmp(a, "--gemm-only")) {
            o.gemm = a[6] ? 2 : 1;
            continue;
        }
        if (!v) usage();
        if (!strcmp(a, "--threads")) {
            const char *t[MAX_THREADS];
            o.n_threads = split(argv[++i], t, MAX_THREADS);
            for (int k = 0; k < o.n_threads; k++) o.threads[k] = (int)parse_long(t[k], 1, 256);
        } else if (!strcmp(a, "--types")) {
            o.n_types = split(argv[++i], o.types, MAX_TYPES);
        } else if (!strcmp(a, "--mib")) {
            o.mib = (size_t)parse_long(argv[++i], 1, 1 << 16);
        } else if (!strcmp(a, "--reps")) {
            o.reps = (int)parse_long(argv[++i], 1, 1000);
        } else if (!strcmp(a, "--rows")) {
            o.rows = parse_long(argv[++i], 1, 1 << 20);
        } else if (!strcmp(a, "--cols")) {
            o.cols = parse_long(argv[++i], 256, 1 << 20);
        } else {
            usage();
        }
    }
    if (!o.n_threads || !o.n_types) usage();
    return o;
}

/* ---------------------------------------------------------------- memcpy */

typedef struct bw {
    double copy, read; /* bytes / second */
} bw;

static volatile uint64_t g_sink; /* keeps the read sweep from being optimised away */

static bw measure_memory(uint8_t *src, uint8_t *dst, size_t n, int threads, int reps)
{
    bw b = {0, 0};
    size_t per = (n / (size_t)threads) & ~(size_t)63;
    for (int r = 0; r < reps; r++) {
        double t0 = dsq_now_s();
#pragma omp parallel num_threads(threads)
        {
            size_t off = per * (size_t)omp_get_thread_num();
            memcpy(dst + off, src + off, per);
        }
        double t = dsq_now_s() - t0;
        if ((double)per * threads / t > b.copy) b.copy = (double)per * threads / t;
        uint64_t total = 0;
        t0 = dsq_now_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const uint64_t *p = (const uint64_t *)(src + per * (size_t)omp_get_thread_num());
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t i = 0; i + 4 <= per / 8; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
            total += s0 + s1 + s2 + s3;
        }
        t = dsq_now_s() - t0;
        g_sink += total;
        if ((double)per * threads / t > b.read) b.read = (double)per * threads / t;
    }
    return b;
}

/* ---------------------------------------------------------------- GEMV */

typedef struct mats {
    dsq_linear *W;
    uint8_t *data;
    int n;
    size_t bytes; /* of one matrix */
} mats;

static uint64_t g_seed = 0x243f6a8885a308d3ull;

static float randn(void)
{
    /* Irwin-Hall sum of 4 uniforms, rescaled: close enough to N(0,1) for a speed test. */
    float s = 0;
    for (int k = 0; k < 4; k++) {
        g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)(g_seed >> 40) / (float)(1u << 24);
    }
    return (s - 2.0f) * 1.7320508f;
}

static mats make_mats(dsq_type t, const float *w, int64_t rows, int64_t cols, size_t min_bytes)
{
    mats m = {0};
    uint64_t rb = 0;
    if (dsq_type_nbytes(t, (uint64_t)cols, &rb) != DSQ_OK) die("row size");
    m.bytes = (size_t)rb * (size_t)rows;
    m.n = (int)((min_bytes + m.bytes - 1) / m.bytes);
    if (m.n < 2) m.n = 2;
    m.data = malloc(m.bytes * (size_t)m.n);
    m.W = calloc((size_t)m.n, sizeof *m.W);
    if (!m.data || !m.W) {
        fprintf(stderr, "bench_gemv: out of memory for %d x %zu bytes\n", m.n, m.bytes);
        exit(1);
    }
    if (dsq_quantize(t, w, m.data, rows, cols, NULL) != DSQ_OK) die(dsq_type_name(t));
    for (int i = 0; i < m.n; i++) {
        if (i) memcpy(m.data + m.bytes * (size_t)i, m.data, m.bytes);
        if (dsq_linear_init(&m.W[i], t, m.data + m.bytes * (size_t)i, rows, cols) != DSQ_OK) die("linear");
    }
    return m;
}

static void free_mats(mats *m)
{
    for (int i = 0; i < m->n; i++) dsq_linear_release(&m->W[i]);
    free(m->W);
    free(m->data);
}

/* Best bytes/second of reps sweeps over all copies. */
static double measure_gemv(const mats *m, const float *x, float *y, int threads, int reps)
{
    dsq_cpu_set_threads(threads);
    double best = 0;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0 = dsq_now_s();
        for (int i = 0; i < m->n; i++)
            if (dsq_linear_forward_gemv(&m->W[i], x, y, 1) != DSQ_OK) die("gemv");
        double rate = (double)m->bytes * m->n / (dsq_now_s() - t0);
        if (r >= 0 && rate > best) best = rate;
    }
    return best;
}

/* ---------------------------------------------------------------- GEMM */

typedef struct gshape {
    int64_t m, n, k; /* tokens, output rows, input columns */
} gshape;

/* SmolLM2's MLP shapes at one 512-token sample and at a calibration batch, and a 7B-class square */
static const gshape g_shapes[] = {{512, 1536, 576}, {512, 576, 1536}, {8192, 1536, 576}, {8192, 576, 1536},
                                  {512, 4096, 4096}};

static double gflops(const gshape *s, double secs)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / secs / 1e9;
}

static void run_gemm(const opts *o)
{
    printf("\nF32 and BF16 GEMM, %d reps, best; GFLOP/s (2 m n k / s); F32 kernel: %s; BF16 kernel: %s\n\n"
           "| m x n x k | dsq_gemm_f32 1 thr AVX2 | dsq_gemm_f32 1 thr | ratio |",
           o->reps, dsq_cpu_use_avx512_gemm() ? "AVX-512 12x32" : "AVX2 6x16",
           dsq_cpu_use_bf16_gemm() ? "AVX512-BF16" : "scalar reference");
    for (int t = 0; t < o->n_threads; t++)
        printf(" linear F32 %d thr | linear BF16 %d thr | BF16/F32 | linear BF16 packed %d thr |", o->threads[t],
               o->threads[t], o->threads[t]);
    printf("\n|---|---:|---:|---:|");
    for (int t = 0; t < o->n_threads; t++) printf("---:|---:|---:|---:|");
    printf("\n");
    for (size_t si = 0; si < sizeof g_shapes / sizeof *g_shapes; si++) {
        const gshape *s = &g_shapes[si];
        float *A = malloc((size_t)(s->m * s->k) * sizeof *A), *B = malloc((size_t)(s->n * s->k) * sizeof *B);
        /* 64-byte aligned like the runtime's buffers (runtime/cpu/backend_cpu.c) */
        float *C = aligned_alloc(64, ((size_t)(s->m * s->n) * sizeof *C + 63) & ~(size_t)63);
        float *scratch = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(s->n, s->k));
        if (!A || !B || !C || !scratch) {
            fprintf(stderr, "bench_gemv: out of memory for GEMM %lld x %lld x %lld\n", (long long)s->m, (long long)s->n,
                    (long long)s->k);
            exit(1);
        }
        for (int64_t i = 0; i < s->m * s->k; i++) A[i] = randn();
        for (int64_t i = 0; i < s->n * s->k; i++) B[i] = randn();
        /* the AVX2 kernel forced against the run-time choice, interleaved */
        double best[2] = {1e30, 1e30};
        for (int r = -1; r < o->reps; r++)
            for (int v = 0; v < 2; v++) {
                dsq_cpu_set_isa(v ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_AVX2);
                double t0 = dsq_now_s();
                dsq_gemm_f32(DSQ_GEMM_BT, s->m, s->n, s->k, A, s->k, B, s->k, C, s->n, false, scratch);
                double t = dsq_now_s() - t0;
                if (r >= 0 && t < best[v]) best[v] = t;
            }
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        printf("| %lld x %lld x %lld | %.1f | %.1f | %.2fx |", (long long)s->m, (long long)s->n, (long long)s->k,
               gflops(s, best[0]), gflops(s, best[1]), best[0] / best[1]);
        dsq_linear W;
        if (dsq_linear_init(&W, DSQ_TYPE_F32, B, s->n, s->k) != DSQ_OK) die("linear");
        for (int t = 0; t < o->n_threads; t++) {
            dsq_cpu_set_threads(o->threads[t]);
            double b32 = 1e30, b16 = 1e30;
            for (int r = -1; r < o->reps; r++) {
                double t0 = dsq_now_s();
                if (dsq_linear_forward_gemm(&W, A, C, (int)s->m) != DSQ_OK) die("gemm");
                double t1 = dsq_now_s();
                if (dsq_linear_forward_bf16(&W, A, C, (int)s->m) != DSQ_OK) die("gemm bf16");
                double t2 = dsq_now_s();
                if (r >= 0 && t1 - t0 < b32) b32 = t1 - t0;
                if (r >= 0 && t2 - t1 < b16) b16 = t2 - t1;
            }
            printf(" %.1f | %.1f | %.2fx |", gflops(s, b32), gflops(s, b16), b32 / b16);
            /* what a calibration pass runs: the weights packed to BF16 once */
            if (dsq_linear_bf16_pack(&W) != DSQ_OK) die("bf16 pack");
            double bp = 1e30;
            for (int r = -1; r < o->reps; r++) {
                double t0 = dsq_now_s();
                if (dsq_linear_forward_bf16(&W, A, C, (int)s->m) != DSQ_OK) die("gemm bf16 packed");
                double t1 = dsq_now_s();
                if (r >= 0 && t1 - t0 < bp) bp = t1 - t0;
            }
            dsq_linear_bf16_unpack(&W);
            printf(" %.1f |", gflops(s, bp));
        }
        printf("\n");
        dsq_linear_release(&W);
        free(A), free(B), free(C), free(scratch);
    }
}

int main(int argc, char **argv)
{
    opts o = parse(argc, argv);
    if (o.gemm == 2) {
        run_gemm(&o);
        return 0;
    }
    size_t n = o.mib << 20;
    uint8_t *src = malloc(n), *dst = malloc(n);
    size_t nw = (size_t)o.rows * (size_t)o.cols;
    float *w = malloc(nw * sizeof *w), *x = malloc((size_t)o.cols * sizeof *x), *y = malloc((size_t)o.rows * sizeof *y);
    if (!src || !dst || !w || !x || !y) {
        fprintf(stderr, "bench_gemv: out of memory\n");
        return 1;
    }
    memset(src, 1, n);
    memset(dst, 2, n);
    for (size_t i = 0; i < nw; i++) w[i] = randn();
    for (int64_t i = 0; i < o.cols; i++) x[i] = randn();
    bw mem[MAX_THREADS];
    for (int k = 0; k < o.n_threads; k++) mem[k] = measure_memory(src, dst, n, o.threads[k], o.reps);
    double rate[MAX_TYPES][MAX_THREADS];
    dsq_type types[MAX_TYPES];
    bool packed[MAX_TYPES] = {false};
    for (int ti = 0; ti < o.n_types; ti++) {
        packed[ti] = !strcmp(o.types[ti], "Q8_0-int8");
        if (dsq_type_from_name(packed[ti] ? "Q8_0" : o.types[ti], &types[ti]) != DSQ_OK) die(o.types[ti]);
        mats m = make_mats(types[ti], w, o.rows, o.cols, n);
        for (int i = 0; packed[ti] && i < m.n; i++)
            if (dsq_linear_q8_pack(&m.W[i]) != DSQ_OK) die("q8 pack");
        for (int k = 0; k < o.n_threads; k++) rate[ti][k] = measure_gemv(&m, x, y, o.threads[k], o.reps);
        free_mats(&m);
        fprintf(stderr, "%s done\n", o.types[ti]);
    }
    for (int k = 0; k < o.n_threads; k++) {
        bw again = measure_memory(src, dst, n, o.threads[k], o.reps);
        mem[k].copy = again.copy > mem[k].copy ? again.copy : mem[k].copy;
        mem[k].read = again.read > mem[k].read ? again.read : mem[k].read;
    }
    printf("%lld x %lld matrices, >= %zu MiB of copies per type, best of %d; GB/s (1e9 bytes/s)\n\n", (long long)o.rows,
           (long long)o.cols, o.mib, o.reps);
    printf("| threads | memcpy | read-only |\n|---:|---:|---:|\n");
    for (int k = 0; k < o.n_threads; k++)
        printf("| %d | %.2f | %.2f |\n", o.threads[k], mem[k].copy / 1e9, mem[k].read / 1e9);
    printf("\n| type |");
    for (int k = 0; k < o.n_threads; k++) printf(" %d thr GB/s | vs memcpy |", o.threads[k]);
    printf("\n|---|");
    for (int k = 0; k < o.n_threads; k++) printf("---:|---:|");
    printf("\n");
    int missed = 0;
    for (int ti = 0; ti < o.n_types; ti++) {
        printf("| %s |", packed[ti] ? "q8_0 packed for int8" : dsq_type_name(types[ti]));
        for (int k = 0; k < o.n_threads; k++) {
            double r = rate[ti][k] / mem[k].copy;
            missed |= r < 0.7;
            printf(" %.2f | %.0f%%%s |", rate[ti][k] / 1e9, 100 * r, r < 0.7 ? " !" : "");
        }
        printf("\n");
    }
    if (o.gemm) run_gemm(&o);
    free(src);
    free(dst);
    free(w);
    free(x);
    free(y);
    return missed;
}
