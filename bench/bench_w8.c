/* The 8-bit kernels and storage against the float products, in one run.
 *
 * For each weight shape (out x in) and token count m it times, best of --reps
 * (each rep at least 0.1 s of calls):
 *   i8 gemm    dsq_gemm_i8_parallel on prepared INT8 weights (the kernel alone)
 *   i8 vnni512 / avxvnni / avx2  the same product forced onto the AVX512-VNNI,
 *              AVX-VNNI and AVX2 paths, where the CPU has them (the dispatcher
 *              takes AMX-INT8 from 16 tokens where present, else the best of these)
 *   w8a8 fwd   dsq_linear_forward of the INT8 storage (W8A8 dynamic: per-token
 *              quantization of x, the kernel, the scale epilogue)
 *   fp8 fwd    dsq_linear_forward of the FP8 storage (FP8 dynamic: x rounded
 *              to FP8 per token, weights decoded through the table, F32 product)
 *   f32 gemm   dsq_linear_forward_gemm of F32 weights (kernels/gemm.h, tiled)
 *   bf16 gemm  dsq_linear_forward_bf16 of F32 weights (kernels/gemm_bf16.h)
 *   f32 gemv   dsq_linear_forward_gemv of F32 weights (m <= 7 only: the decode path)
 *   memcpy     the INT8 weight bytes copied once by the same threads
 * in GOP/s (2 m out in / s) and GB/s of weight bytes read (INT8: out x in;
 * F32 rows: 4 out x in), and the INT8 kernel's speed-up over F32 GEMM, BF16
 * GEMM and (for m <= 7) the F32 decode path. The CPU model, the thread count
 * and the INT8 path that ran are printed first. Weights up to the last-level
 * cache's size stay cached between calls: the GB/s of the small shapes are
 * cache rates, not DRAM ones.
 *
 * usage: bench_w8 [--threads T] [--reps 3] [--shapes 576x1536,1536x576,4096x4096] [--m 1,4,64,512]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i8.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"

#define MAX_LIST 16

typedef struct opts {
    int threads, reps;
    int64_t shapes[MAX_LIST][2];
    int n_shapes;
    int ms[MAX_LIST], n_ms;
} opts;

static void die(const char *what)
{
    fprintf(stderr, "bench_w8: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float randn(void)
{
    /* sum of four uniforms: close enough to N(0,1) for timing data */
    float s = 0;
    for (int i = 0; i < 4; i++) {
        g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
        s += (float)(g_rng >> 40) / (float)(1 << 24) - 0.5f;
    }
    return s * 1.7320508f;
}

typedef enum op {
    OP_I8,
    OP_I8_VNNI512,
    OP_I8_VNNI256,
    OP_I8_AVX2,
    OP_W8A8,
    OP_FP8,
    OP_F32,
    OP_BF16,
    OP_F32_GEMV,
    OP_MEMCPY,
    N_OPS
} op;

typedef struct bench_case {
    int64_t out, in;
    int m;
    dsq_gemm_i8_w iw;
    dsq_linear w8a8, fp8, f32;
    int8_t *xa;
    int32_t *acc;
    float *x, *y;
    uint8_t *src, *dst;
} bench_case;

/* The INT8 kernel on a path the dispatcher would not pick, split as dsq_gemm_i8_parallel splits. */
static void i8_on_path(bench_case *c, dsq_gemm_i8_path p)
{
    int64_t items = (c->out + 31) / 32;
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads())
    for (int64_t it = 0; it < items; it++) {
        int64_t r0 = it * 32, r1 = r0 + 32 < c->out ? r0 + 32 : c->out;
        dsq_gemm_i8_rows(p, &c->iw, r0, r1, c->m, c->xa, c->in, c->acc + r0, c->out);
    }
}

static void run_op(bench_case *c, op o)
{
    dsq_status s = DSQ_OK;
    switch (o) {
    case OP_I8: dsq_gemm_i8_parallel(&c->iw, c->m, c->xa, c->in, c->acc, c->out); break;
    case OP_I8_VNNI512: i8_on_path(c, DSQ_GEMM_I8_AVX512_VNNI); break;
    case OP_I8_VNNI256: i8_on_path(c, DSQ_GEMM_I8_AVX_VNNI); break;
    case OP_I8_AVX2: i8_on_path(c, DSQ_GEMM_I8_AVX2); break;
    case OP_W8A8: s = dsq_linear_forward(&c->w8a8, c->x, c->y, c->m); break;
    case OP_FP8: s = dsq_linear_forward(&c->fp8, c->x, c->y, c->m); break;
    case OP_F32: s = dsq_linear_forward_gemm(&c->f32, c->x, c->y, c->m); break;
    case OP_BF16: s = dsq_linear_forward_bf16(&c->f32, c->x, c->y, c->m); break;
    case OP_F32_GEMV: s = dsq_linear_forward_gemv(&c->f32, c->x, c->y, c->m); break;
    case OP_MEMCPY: {
        size_t n = (size_t)(c->out * c->in), per = (n + (size_t)dsq_cpu_threads() - 1) / (size_t)dsq_cpu_threads();
#pragma omp parallel for num_threads(dsq_cpu_threads())
        for (int t = 0; t < dsq_cpu_threads(); t++) {
            size_t a = (size_t)t * per, b = a + per < n ? a + per : n;
            if (a < b) memcpy(c->dst + a, c->src + a, b - a);
        }
        break;
    }
    default: break;
    }
    if (s != DSQ_OK) die("forward");
}

/* Best seconds per call over reps, each rep >= 0.1 s of calls. */
static double time_op(bench_case *c, op o, int reps)
{
    run_op(c, o); /* warm-up: page faults, first-touch */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int calls = 0;
        double t0 = dsq_now_s(), t;
        do {
            run_op(c, o);
            calls++;
            t = dsq_now_s() - t0;
        } while (t < 0.1);
        if (t / calls < best) best = t / calls;
    }
    return best;
}

static void setup(bench_case *c, int64_t out, int64_t in, int m)
{
    memset(c, 0, sizeof *c);
    c->out = out, c->in = in, c->m = m;
    float *w = malloc((size_t)(out * in) * sizeof *w);
    c->x = malloc((size_t)m * (size_t)in * sizeof *c->x);
    c->y = malloc((size_t)m * (size_t)out * sizeof *c->y);
    c->xa = malloc((size_t)m * (size_t)in);
    c->acc = malloc((size_t)m * (size_t)out * sizeof *c->acc);
    c->src = malloc((size_t)(out * in));
    c->dst = malloc((size_t)(out * in));
    if (!w || !c->x || !c->y || !c->xa || !c->acc || !c->src || !c->dst) {
        fprintf(stderr, "bench_w8: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < out * in; i++) w[i] = 0.02f * randn();
    for (int64_t i = 0; i < (int64_t)m * in; i++) c->x[i] = randn();
    dsq_w8_scheme si = dsq_w8_scheme_w8a8(false), sf = dsq_w8_scheme_fp8_dynamic();
    dsq_w8q qi, qf;
    if (dsq_w8q_quantize(w, out, in, &si, "bench", &qi) != DSQ_OK) die("quantize int8");
    if (dsq_w8q_quantize(w, out, in, &sf, "bench", &qf) != DSQ_OK) die("quantize fp8");
    if (dsq_linear_init_w8(&c->w8a8, &qi) != DSQ_OK || dsq_linear_init_w8(&c->fp8, &qf) != DSQ_OK) die("w8 storage");
    memcpy(c->src, qi.codes, (size_t)(out * in));
    memset(c->dst, 0, (size_t)(out * in));
    if (dsq_gemm_i8_prepare(&c->iw, (const int8_t *)c->src, out, in, in) != DSQ_OK) die("prepare");
    for (int t = 0; t < m; t++)
        (void)dsq_w8_act_quantize(DSQ_W8_INT8, c->x + (size_t)t * in, in, 0, (uint8_t *)c->xa + (size_t)t * in);
    dsq_w8q_free(&qi);
    dsq_w8q_free(&qf);
    if (dsq_linear_init(&c->f32, DSQ_TYPE_F32, w, out, in) != DSQ_OK) die("f32 linear");
    /* w stays alive as the F32 linear's view; freed in teardown through the case */
    c->f32.owned = w;
}

static void teardown(bench_case *c)
{
    dsq_gemm_i8_w_free(&c->iw);
    dsq_linear_release(&c->w8a8);
    dsq_linear_release(&c->fp8);
    dsq_linear_release(&c->f32);
    free(c->x), free(c->y), free(c->xa), free(c->acc), free(c->src), free(c->dst);
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        out[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

static int parse_shapes(const char *s, int64_t (*out)[2], int cap)
{
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        long long a, b;
        if (sscanf(p, "%lldx%lld", &a, &b) != 2 || a <= 0 || b <= 0) return -1;
        out[n][0] = a, out[n][1] = b, n++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

static void parse(int argc, char **argv, opts *o)
{
    o->threads = 0, o->reps = 3;
    o->n_shapes = parse_shapes("576x1536,1536x576,4096x4096", o->shapes, MAX_LIST);
    o->n_ms = parse_list("1,4,64,512", o->ms, MAX_LIST);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--threads") && v)
            o->threads = atoi(v), i++;
        else if (!strcmp(argv[i], "--reps") && v)
            o->reps = atoi(v), i++;
        else if (!strcmp(argv[i], "--shapes") && v)
            o->n_shapes = parse_shapes(v, o->shapes, MAX_LIST), i++;
        else if (!strcmp(argv[i], "--m") && v)
            o->n_ms = parse_list(v, o->ms, MAX_LIST), i++;
        else {
            fprintf(stderr, "usage: bench_w8 [--threads T] [--reps N] [--shapes OUTxIN,...] [--m M,...]\n");
            exit(2);
        }
    }
    if (o->n_shapes <= 0 || o->n_ms <= 0 || o->reps <= 0) {
        fprintf(stderr, "bench_w8: bad --shapes, --m or --reps\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    if (o.threads > 0) dsq_cpu_set_threads(o.threads);
    char model[256];
    dsq_cpu_model(model, sizeof model);
    printf("cpu: %s; threads %d; int8 path %s; bf16 gemm %s\n", model, dsq_cpu_threads(),
           dsq_gemm_i8_path_name(dsq_gemm_i8_best_path()),
           dsq_cpu_use_bf16_gemm() ? dsq_gemm_bf16_path_name(dsq_gemm_bf16_path_for(512)) : "scalar/f32");
    static const char *names[N_OPS] = {"i8 gemm", "i8 vnni512", "i8 avxvnni", "i8 avx2",  "w8a8 fwd",
                                       "fp8 fwd", "f32 gemm",   "bf16 gemm",  "f32 gemv", "memcpy"};
    printf("%-10s %4s | %-9s %9s %8s | i8 vs: f32  bf16  gemv  memcpy\n", "shape", "m", "op", "GOP/s", "GB/s");
    for (int si = 0; si < o.n_shapes; si++)
        for (int mi = 0; mi < o.n_ms; mi++) {
            bench_case c;
            int m = o.ms[mi];
            setup(&c, o.shapes[si][0], o.shapes[si][1], m);
            double t[N_OPS] = {0};
            for (int k = 0; k < N_OPS; k++) {
                if (k == OP_F32_GEMV && m > DSQ_LINEAR_GEMV_MAX_TOKENS) continue;
                if (k == OP_I8_VNNI512 && !dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX512_VNNI)) continue;
                if (k == OP_I8_VNNI256 && !dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX_VNNI)) continue;
                if (k == OP_I8_AVX2 && !dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX2)) continue;
                t[k] = time_op(&c, (op)k, o.reps);
            }
            double ops = 2.0 * m * (double)c.out * (double)c.in, wb = (double)c.out * (double)c.in;
            char shape[32];
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)c.out, (long long)c.in);
            for (int k = 0; k < N_OPS; k++) {
                if (t[k] == 0) continue;
                double bytes = k == OP_F32 || k == OP_BF16 || k == OP_F32_GEMV ? 4 * wb : wb;
                printf("%-10s %4d | %-9s %9.1f %8.1f |", shape, m, names[k], k == OP_MEMCPY ? 0.0 : ops / t[k] / 1e9,
                       bytes / t[k] / 1e9);
                if (k == OP_I8)
                    printf(" %5.2fx %5.2fx %5.2fx %5.2f", t[OP_F32] / t[OP_I8], t[OP_BF16] / t[OP_I8],
                           t[OP_F32_GEMV] > 0 ? t[OP_F32_GEMV] / t[OP_I8] : 0.0, t[OP_MEMCPY] / t[OP_I8]);
                printf("\n");
            }
            teardown(&c);
        }
    return 0;
}
