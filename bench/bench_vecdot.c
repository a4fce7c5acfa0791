/* vec_dot throughput of the GGUF block types: our dispatching dot products
 * (AVX2 when the CPU has it) against the scalar references of
 * quantizers/quants_ref.h and kquants_ref.h, and against memcpy bandwidth
 * measured in the same run.
 *
 * A weight matrix of rows of N_COLS elements is dotted, row by row, with one
 * activation row already quantized to the type's vec_dot_type (what a
 * matrix-vector product does per output). Two working sets: a small one that
 * stays in L2 (compute bound) and a large one that must come from memory.
 * The rows are a pool of quantized random rows repeated to fill the working
 * set (the dot's speed does not depend on the values; quantizing 64 MB of
 * Q2_K would dominate the run). Each timing repeats whole passes for at least
 * --min-ms; --reps rounds each time ours, the reference and a memcpy of the
 * same size in turn, and the best of each is kept (the machine is shared: a
 * busy spell then hits all three, and the best round is the least disturbed).
 *
 * Reported per type: weight GB/s (bytes of weight rows read per second),
 * Mdot/s (millions of N_COLS-element row dots per second), the speed-up over
 * the scalar reference, the fraction of memcpy's bandwidth (bytes copied per
 * second, single thread, same size), and the largest relative difference
 * between our dot and the reference's (float sums in another order: a value
 * above 1e-3 is marked `!` and makes the program exit 1).
 *
 * usage: bench_vecdot [--small-kb KB] [--large-mb MB] [--reps N] [--min-ms MS]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "quantizers/kquants_ref.h"
#include "quantizers/qtypes.h"
#include "quantizers/quants_ref.h"

#define N_COLS 4096
#define POOL_ROWS 64
#define REL_TOL 1e-3

typedef struct bench_type {
    dsq_type type;
    dsq_vec_dot_fn ref; /* the scalar reference of the table's vec_dot */
} bench_type;

static const bench_type g_types[] = {
    {DSQ_TYPE_Q4_0, dsq_vec_dot_q4_0_q8_0_ref},   {DSQ_TYPE_Q4_1, dsq_vec_dot_q4_1_q8_1_ref},
    {DSQ_TYPE_Q5_0, dsq_vec_dot_q5_0_q8_0_ref},   {DSQ_TYPE_Q5_1, dsq_vec_dot_q5_1_q8_1_ref},
    {DSQ_TYPE_Q8_0, dsq_vec_dot_q8_0_q8_0_ref},   {DSQ_TYPE_IQ4_NL, dsq_vec_dot_iq4_nl_q8_0_ref},
    {DSQ_TYPE_IQ4_XS, dsq_vec_dot_iq4_xs_q8_K_ref}, {DSQ_TYPE_Q2_K, dsq_vec_dot_q2_K_q8_K_ref},
    {DSQ_TYPE_Q3_K, dsq_vec_dot_q3_K_q8_K_ref},   {DSQ_TYPE_Q4_K, dsq_vec_dot_q4_K_q8_K_ref},
    {DSQ_TYPE_Q5_K, dsq_vec_dot_q5_K_q8_K_ref},   {DSQ_TYPE_Q6_K, dsq_vec_dot_q6_K_q8_K_ref},
};

typedef struct options {
    double small_kb, large_mb, min_ms;
    int reps;
} options;

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_vecdot: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Deterministic weights with a heavy-ish tail, like trained weights. */
static void fill_random(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++) { /* sum of 4 uniforms: close to a normal */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u += (float)(s >> 40) / (float)(1u << 24) - 0.5f;
        }
        x[i] = u * (i % 97 == 0 ? 0.2f : 0.02f);
    }
}

static size_t row_bytes(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    return (size_t)(N_COLS / ti->block_elems) * ti->block_bytes;
}

/* ------------------------------------------------------------ measurement */

typedef struct matrix {
    uint8_t *w;      /* rows * rb bytes */
    size_t rows, rb; /* row count, bytes per row */
    const void *act; /* activation row in the vec_dot type */
    float *out;      /* one result per row */
} matrix;

static void dot_pass(const matrix *m, dsq_vec_dot_fn dot)
{
    for (size_t r = 0; r < m->rows; r++) dot(N_COLS, &m->out[r], m->w + r * m->rb, m->act);
}

/* Seconds per pass of one timing: whole passes for at least --min-ms. */
static double time_dot(const matrix *m, dsq_vec_dot_fn dot, const options *o)
{
    int passes = 0;
    double t0 = dsq_now_s(), t;
    do {
        dot_pass(m, dot);
        passes++;
        t = dsq_now_s() - t0;
    } while (t * 1e3 < o->min_ms);
    return t / passes;
}

/* Seconds per memcpy of n bytes (a to b, then back), one timing. */
static double time_memcpy(uint8_t *a, uint8_t *b, size_t n, const options *o)
{
    int passes = 0;
    double t0 = dsq_now_s(), t;
    do {
        memcpy(passes & 1 ? a : b, passes & 1 ? b : a, n);
        passes++;
        t = dsq_now_s() - t0;
    } while (t * 1e3 < o->min_ms);
    return t / passes;
}

/* Largest |ours - ref| / max(|ref|, 1e-3 * scale) over the rows of the pool. */
static double max_rel_diff(const matrix *m, dsq_vec_dot_fn dot, dsq_vec_dot_fn ref)
{
    double worst = 0, scale = 0;
    float *ours = xalloc(POOL_ROWS * sizeof(float)), *refs = xalloc(POOL_ROWS * sizeof(float));
    for (size_t r = 0; r < POOL_ROWS; r++) {
        dot(N_COLS, &ours[r], m->w + r * m->rb, m->act);
        ref(N_COLS, &refs[r], m->w + r * m->rb, m->act);
        if (fabs(refs[r]) > scale) scale = fabs(refs[r]);
    }
    for (size_t r = 0; r < POOL_ROWS; r++) {
        double d = fabs((double)ours[r] - refs[r]) / fmax(fabs(refs[r]), 1e-3 * scale);
        if (!(d <= worst)) worst = d; /* NaN counts as the worst */
    }
    free(ours);
    free(refs);
    return worst;
}

/* --------------------------------------------------------------- per type */

typedef struct type_data {
    uint8_t *pool; /* POOL_ROWS quantized rows */
    void *act;
} type_data;

static type_data prepare(const dsq_qtype *q)
{
    type_data d;
    size_t rb = row_bytes(q->type);
    float *x = xalloc((size_t)POOL_ROWS * N_COLS * sizeof(float));
    fill_random(x, (size_t)POOL_ROWS * N_COLS, (uint64_t)q->type);
    d.pool = xalloc(POOL_ROWS * rb);
    for (size_t r = 0; r < POOL_ROWS; r++) q->quantize_row(x + r * N_COLS, d.pool + r * rb, N_COLS, NULL);
    fill_random(x, N_COLS, 1000 + (uint64_t)q->type);
    const dsq_qtype *a = dsq_qtype_get(q->vec_dot_type);
    d.act = xalloc(row_bytes(q->vec_dot_type));
    a->quantize_row(x, d.act, N_COLS, NULL);
    free(x);
    return d;
}

static matrix make_matrix(const type_data *d, dsq_type t, double bytes)
{
    matrix m;
    m.rb = row_bytes(t);
    m.rows = (size_t)(bytes / (double)m.rb);
    if (m.rows < POOL_ROWS) m.rows = POOL_ROWS;
    m.w = xalloc(m.rows * m.rb);
    for (size_t r = 0; r < m.rows; r++) memcpy(m.w + r * m.rb, d->pool + (r % POOL_ROWS) * m.rb, m.rb);
    m.act = d->act;
    m.out = xalloc(m.rows * sizeof(float));
    return m;
}

typedef struct row_result {
    double ours_s, ref_s; /* best seconds per pass */
    double bytes, rows;   /* per pass */
} row_result;

/* --reps rounds, each timing ours, the reference and memcpy of the same size
 * one after the other, so a busy spell of the machine hits all three; the best
 * of each is kept (*memcpy_s too, across all types). */
static row_result measure(const matrix *m, const dsq_qtype *q, dsq_vec_dot_fn ref, uint8_t *ca, uint8_t *cb,
                          double *memcpy_s, const options *o)
{
    row_result r = {INFINITY, INFINITY, (double)(m->rows * m->rb), (double)m->rows};
    dot_pass(m, q->vec_dot); /* warm the caches and the branch predictors */
    dot_pass(m, ref);
    for (int rep = 0; rep < o->reps; rep++) {
        r.ours_s = fmin(r.ours_s, time_dot(m, q->vec_dot, o));
        r.ref_s = fmin(r.ref_s, time_dot(m, ref, o));
        *memcpy_s = fmin(*memcpy_s, time_memcpy(ca, cb, m->rows * m->rb, o));
    }
    return r;
}

/* ------------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: bench_vecdot [--small-kb KB] [--large-mb MB] [--reps N] [--min-ms MS]\n");
    exit(2);
}

static options parse(int argc, char **argv)
{
    options o = {256, 64, 50, 10};
    for (int i = 1; i < argc; i += 2) { /* option, value */
        if (i + 1 >= argc) usage();
        double v = atof(argv[i + 1]);
        if (v <= 0) usage();
        if (!strcmp(argv[i], "--small-kb")) o.small_kb = v;
        else if (!strcmp(argv[i], "--large-mb")) o.large_mb = v;
        else if (!strcmp(argv[i], "--reps")) o.reps = (int)v;
        else if (!strcmp(argv[i], "--min-ms")) o.min_ms = v;
        else usage();
    }
    return o;
}

#define N_TYPES (sizeof g_types / sizeof g_types[0])

/* Measures every type on one working set, then prints the table (memcpy's
 * best is only known at the end). Returns 1 when a dot disagrees with its reference. */
static int bench_size(const char *label, double bytes, const options *o)
{
    row_result res[N_TYPES];
    double diff[N_TYPES], bpw[N_TYPES], memcpy_s = INFINITY, copied = 0;
    /* make_matrix gives at least POOL_ROWS rows, and no type has 32 bits per weight */
    size_t cap = (size_t)bytes + POOL_ROWS * row_bytes(DSQ_TYPE_F32);
    uint8_t *ca = xalloc(cap), *cb = xalloc(cap);
    memset(ca, 1, cap);
    memset(cb, 2, cap);
    for (size_t i = 0; i < N_TYPES; i++) {
        const dsq_qtype *q = dsq_qtype_get(g_types[i].type);
        type_data d = prepare(q);
        matrix m = make_matrix(&d, q->type, bytes);
        double before = memcpy_s;
        res[i] = measure(&m, q, g_types[i].ref, ca, cb, &memcpy_s, o);
        if (memcpy_s < before) copied = res[i].bytes;
        diff[i] = max_rel_diff(&m, q->vec_dot, g_types[i].ref);
        bpw[i] = 8.0 * (double)m.rb / N_COLS;
        free(m.w);
        free(m.out);
        free(d.pool);
        free(d.act);
    }
    free(ca);
    free(cb);
    double mc = copied / memcpy_s / 1e9;
    int bad = 0;
    printf("\n%s working set: %.0f KiB of weights; memcpy %.2f GB/s\n\n", label, bytes / 1024, mc);
    printf("| type   |  bpw | ours GB/s | ours Mdot/s | ref GB/s | ref Mdot/s | ours/ref | ours/memcpy | max rel diff |\n");
    printf("|--------|-----:|----------:|------------:|---------:|-----------:|---------:|------------:|-------------:|\n");
    for (size_t i = 0; i < N_TYPES; i++) {
        const row_result *r = &res[i];
        double ours = r->bytes / r->ours_s / 1e9, ref = r->bytes / r->ref_s / 1e9;
        int off = !(diff[i] <= REL_TOL);
        bad |= off;
        printf("| %-6s | %4.2f | %9.2f | %11.3f | %8.2f | %10.3f | %7.2fx | %10.2fx | %11.1e%s |\n",
               dsq_type_name(g_types[i].type), bpw[i], ours, r->rows / r->ours_s / 1e6, ref,
               r->rows / r->ref_s / 1e6, ours / ref, ours / mc, diff[i], off ? "!" : " ");
    }
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    printf("vec_dot, one thread, rows of %d elements; SIMD paths: k-quants %s, legacy/iq4 %s\n", N_COLS,
           dsq_kquants_simd_active() ? "AVX2" : "scalar", dsq_legacy_simd_active() ? "AVX2" : "scalar");
    int bad = bench_size("small (in L2)", o.small_kb * 1024, &o);
    bad |= bench_size("large (memory)", o.large_mb * 1024 * 1024, &o);
    return bad;
}
