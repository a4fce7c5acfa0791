/* Forward-pass speed of the CPU runtime, timed like llama-bench does:
 *
 *  pp N: one dsq_forward of N tokens from an empty cache, logits for the last
 *        row only (llama-bench's prompt test: one batch, one output);
 *  tg N: N single-token passes at positions 0..N-1, each with its logits
 *        (llama-bench's generation test).
 *
 * Token ids are fixed pseudo-random values (the speed does not depend on
 * them). One untimed pp + tg pass first pages the mmap in and grows the
 * buffers; then each test runs --reps times and the best run counts.
 * Prints one JSON object: tokens per second of each test and its runs.
 *
 * Products as `dsquant generate` and `serve` run them (DSQ_MATMUL_INT8ACT:
 * the Q8_0-paired block types in int8 at every batch size); --f32-act keeps
 * F32 activations in batches (the default of ppl and kld).
 *
 * usage: bench_forward MODEL [--threads T] [--pp N] [--tg N] [--reps R] [--f32-act]
 * bench/bench_runtime.py drives it next to llama.cpp (docs/benchmarks.md). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/status.h"
#include "runtime/forward.h"
#include "runtime/model.h"

#define MAX_REPS 32

typedef struct opts {
    const char *model;
    int threads, pp, tg, reps;
    bool f32_act;
} opts;

static void die(const char *what)
{
    fprintf(stderr, "bench_forward: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

static int parse_int(const char *opt, const char *v, int lo, int hi)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench_forward: %s takes an integer in [%d, %d]\n", opt, lo, hi);
        exit(2);
    }
    return (int)x;
}

static opts parse(int argc, char **argv)
{
    opts o = {NULL, 1, 512, 64, 3, false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads"))
            o.threads = parse_int(a, v, 1, 1024), i++;
        else if (!strcmp(a, "--pp"))
            o.pp = parse_int(a, v, 0, 1 << 16), i++;
        else if (!strcmp(a, "--tg"))
            o.tg = parse_int(a, v, 0, 1 << 16), i++;
        else if (!strcmp(a, "--reps"))
            o.reps = parse_int(a, v, 1, MAX_REPS), i++;
        else if (!strcmp(a, "--f32-act"))
            o.f32_act = true;
        else if (a[0] != '-' && !o.model)
            o.model = a;
        else {
            fprintf(stderr, "usage: bench_forward MODEL [--threads T] [--pp N] [--tg N] [--reps R] [--f32-act]\n");
            exit(2);
        }
    }
    if (!o.model) {
        fprintf(stderr, "usage: bench_forward MODEL [--threads T] [--pp N] [--tg N] [--reps R] [--f32-act]\n");
        exit(2);
    }
    return o;
}

static double run_pp(dsq_ctx *c, const int32_t *toks, int n, float *logits)
{
    double t0 = dsq_now_s();
    if (dsq_forward_range(c, toks, n, 0, n - 1, logits) != DSQ_OK) die("pp");
    return dsq_now_s() - t0;
}

static double run_tg(dsq_ctx *c, const int32_t *toks, int n, float *logits)
{
    double t0 = dsq_now_s();
    for (int i = 0; i < n; i++)
        if (dsq_forward_range(c, toks + i, 1, i, 0, logits) != DSQ_OK) die("tg");
    return dsq_now_s() - t0;
}

static void print_test(const char *name, int n, const double *secs, int reps, int last)
{
    double best = secs[0];
    for (int r = 1; r < reps; r++) best = secs[r] < best ? secs[r] : best;
    printf("  \"%s\": {\"tokens\": %d, \"tokens_per_second\": %.3f, \"runs_s\": [", name, n, n / best);
    for (int r = 0; r < reps; r++) printf("%s%.6f", r ? ", " : "", secs[r]);
    printf("]}%s\n", last ? "" : ",");
}

int main(int argc, char **argv)
{
    opts o = parse(argc, argv);
    int n_ctx = o.pp > o.tg ? o.pp : o.tg;
    if (n_ctx < 1) n_ctx = 1;
    dsq_model *m = NULL;
    dsq_ctx *c = NULL;
    if (dsq_model_open(o.model, &m) != DSQ_OK) die(o.model);
    if (dsq_ctx_new(m, n_ctx, o.threads, &c) != DSQ_OK) die("context");
    dsq_ctx_set_matmul(c, o.f32_act ? DSQ_MATMUL_DEFAULT : DSQ_MATMUL_INT8ACT);
    if (!o.f32_act && dsq_model_pack_int8(m) != DSQ_OK) die("pack");
    int32_t *toks = malloc((size_t)n_ctx * sizeof *toks);
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    if (!toks || !logits) {
        fprintf(stderr, "bench_forward: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n_ctx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((s >> 33) % (uint64_t)m->vocab);
    }
    if (o.pp) run_pp(c, toks, o.pp, logits);
    if (o.tg) run_tg(c, toks, o.tg < 4 ? o.tg : 4, logits);
    double pp_s[MAX_REPS], tg_s[MAX_REPS];
    for (int r = 0; r < o.reps; r++) {
        if (o.pp) pp_s[r] = run_pp(c, toks, o.pp, logits);
        if (o.tg) tg_s[r] = run_tg(c, toks, o.tg, logits);
    }
    printf("{\n  \"model\": \"");
    for (const char *p = o.model; *p; p++) printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    printf("\",\n  \"threads\": %d,\n", o.threads);
    if (o.pp) print_test("pp", o.pp, pp_s, o.reps, !o.tg);
    if (o.tg) print_test("tg", o.tg, tg_s, o.reps, 1);
    printf("}\n");
    free(toks);
    free(logits);
    dsq_ctx_free(c);
    dsq_model_close(m);
    return 0;
}
