/* Rank-k row updates (kernels/rowupd.h), GPTQ's inner loops, on every path
 * the CPU has, against the scalar reference and the AVX2 path in the same
 * run: GFLOP/s (2 flops per fused multiply-add) and ratios, one thread.
 *
 * The shapes are the calls GPTQ makes (quantizers/gptq.c): the sweep's lazy
 * batch update of a 32-row tile by 128 columns, one 64-column chunk per call
 * (and, for comparison, one call 576 wide); the error feedback of one row
 * inside a batch; the factorization's double updates (the Cholesky trailing
 * update, 4 rows by a panel of 64 over 256 columns, and the triangular
 * inverse's 64-row blocks). Each
 * path must give the scalar loop's bits (the header's contract): a mismatch
 * is printed and the program exits 1. Every timing repeats the update for at
 * least --min-ms; --reps rounds time each path in turn and keep the best (a
 * shared machine disturbs all paths of a round alike).
 *
 * usage: bench_rowupd [--reps N] [--min-ms MS]
 * Results and the command are kept in docs/benchmarks.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cpu.h"
#include "kernels/rowupd.h"

typedef struct shape {
    int64_t nr, nk, w;
    int f64;
    const char *what;
} shape;

static const shape g_shapes[] = {
    {32, 128, 64, 0, "sweep chunk (gptq.c)"},  {32, 128, 576, 0, "sweep, one call 576 wide"},
    {1, 16, 112, 0, "feedback, rank 16"},      {1, 7, 7, 0, "feedback, inside a panel"},
    {4, 64, 256, 1, "factor trailing update"}, {64, 64, 64, 1, "triangular inverse rows"},
};

typedef struct path {
    dsq_cpu_isa isa;
    const char *name;
    int available;
} path;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0 - 0.5;
}

typedef struct bufs {
    void *y, *y0, *c, *x, *ref;
    size_t ybytes;
} bufs;

static int alloc_bufs(const shape *s, bufs *b)
{
    const size_t e = s->f64 ? sizeof(double) : sizeof(float);
    const size_t ny = (size_t)(s->nr * s->w), nc = (size_t)(s->nr * s->nk), nx = (size_t)(s->nk * s->w);
    b->ybytes = ny * e;
    b->y = malloc(ny * e), b->y0 = malloc(ny * e), b->ref = malloc(ny * e);
    b->c = malloc(nc * e), b->x = malloc(nx * e);
    if (!b->y || !b->y0 || !b->ref || !b->c || !b->x) return -1;
    for (size_t i = 0; i < ny; i++)
        s->f64 ? (void)(((double *)b->y0)[i] = rnd()) : (void)(((float *)b->y0)[i] = (float)rnd());
    for (size_t i = 0; i < nc; i++)
        s->f64 ? (void)(((double *)b->c)[i] = rnd() * 0.01) : (void)(((float *)b->c)[i] = (float)(rnd() * 0.01));
    for (size_t i = 0; i < nx; i++)
        s->f64 ? (void)(((double *)b->x)[i] = rnd()) : (void)(((float *)b->x)[i] = (float)rnd());
    return 0;
}

static void free_bufs(bufs *b) { free(b->y), free(b->y0), free(b->ref), free(b->c), free(b->x); }

static void update(const shape *s, const bufs *b)
{
    if (s->f64)
        dsq_rowupd_f64(s->nr, s->nk, s->w, b->y, s->w, b->c, s->nk, 1, b->x, s->w, -1);
    else
        dsq_rowupd_f32(s->nr, s->nk, s->w, b->y, s->w, b->c, s->nk, 1, b->x, s->w, -1);
}

/* Seconds per update on path p: repeated from the same y for >= min_ms. */
static double time_path(const shape *s, const bufs *b, dsq_cpu_isa isa, double min_ms)
{
    dsq_cpu_set_isa(isa);
    long n = 0;
    const double t0 = dsq_now_s();
    double t;
    do {
        memcpy(b->y, b->y0, b->ybytes);
        update(s, b);
        n++;
        t = dsq_now_s() - t0;
    } while (t * 1e3 < min_ms);
    /* the copy is timed alike on every path; at these sizes it is a few % of
     * an update, so the ratios understate the kernels' gap slightly */
    return t / (double)n;
}

static int same_bits(const shape *s, const bufs *b, dsq_cpu_isa isa)
{
    dsq_cpu_set_isa(isa);
    memcpy(b->y, b->y0, b->ybytes);
    update(s, b);
    return memcmp(b->y, b->ref, b->ybytes) == 0;
}

int main(int argc, char **argv)
{
    int reps = 3;
    double min_ms = 200.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            min_ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_rowupd [--reps N] [--min-ms MS]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    dsq_cpu_set_threads(1);
    path paths[] = {{DSQ_CPU_ISA_SCALAR, "scalar", 1},
                    {DSQ_CPU_ISA_AVX2, "avx2", dsq_cpu_has_avx2()},
                    {DSQ_CPU_ISA_AVX512, "avx512", dsq_cpu_has_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F)}};
    const int np = 3;
    char model[128];
    dsq_cpu_model(model, sizeof model);
    printf("CPU: %s; one thread; GFLOP/s (best of %d rounds of >= %.0f ms)\n\n", model, reps, min_ms);
    printf("| rows x k x width | dtype | what | scalar | avx2 | avx512 | avx2/scalar | avx512/avx2 |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|\n");
    int bad = 0;
    for (size_t si = 0; si < sizeof g_shapes / sizeof g_shapes[0]; si++) {
        const shape *s = &g_shapes[si];
        bufs b = {0};
        if (alloc_bufs(s, &b)) {
            fprintf(stderr, "bench_rowupd: out of memory\n");
            return 1;
        }
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
        memcpy(b.ref, b.y0, b.ybytes);
        memcpy(b.y, b.y0, b.ybytes);
        update(s, &b);
        memcpy(b.ref, b.y, b.ybytes);
        double best[3] = {0, 0, 0};
        for (int p = 1; p < np; p++)
            if (paths[p].available && !same_bits(s, &b, paths[p].isa)) {
                fprintf(stderr, "bench_rowupd: %s path differs from the scalar loop at %lld x %lld x %lld\n",
                        paths[p].name, (long long)s->nr, (long long)s->nk, (long long)s->w);
                bad = 1;
            }
        for (int r = 0; r < reps; r++)
            for (int p = 0; p < np; p++) {
                if (!paths[p].available) continue;
                const double sec = time_path(s, &b, paths[p].isa, min_ms);
                const double gf = 2.0 * (double)(s->nr * s->nk * s->w) / sec / 1e9;
                if (gf > best[p]) best[p] = gf;
            }
        printf("| %lld x %lld x %lld | %s | %s | %.1f |", (long long)s->nr, (long long)s->nk, (long long)s->w,
               s->f64 ? "f64" : "f32", s->what, best[0]);
        for (int p = 1; p < np; p++) paths[p].available ? printf(" %.1f |", best[p]) : printf(" - |");
        printf(" %.2fx |", best[1] > 0 ? best[1] / best[0] : 0.0);
        best[2] > 0 ? printf(" %.2fx |\n", best[2] / best[1]) : printf(" - |\n");
        free_bufs(&b);
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    return bad;
}
