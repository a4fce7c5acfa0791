/* AWQ pieces (quantizers/awq.h) on synthetic data.
 *
 * - uniform activations and weights give scale 1 at every grid ratio.
 * - the w_mean / x_mean statistics match a direct computation.
 * - with one salient input channel the search finds a loss no worse than at
 *   ratio 0 and strictly better than plain RTN (s = 1), and its scale for the
 *   salient channel is the largest.
 * - folding scales into an RMSNorm weight + following linear, and into a
 *   previous linear's rows + following linear, leaves the float function
 *   unchanged.
 * - the clip search keeps thresholds within [1 - max_shrink, 1] x max|w| and
 *   never raises the output error over no clipping. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "quantizers/awq.h"
#include "quantizers/intq_search.h"
#include "quantizers/qtypes.h"
#include "tests/helpers/testutil.h"

#define ROWS 48
#define COLS 128
#define NTOK 96

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("status %d: %s", (int)s, dsq_errmsg());
}

static float *randv(size_t n, float sc, uint64_t *seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = sc * dsq_test_randn(seed);
    return v;
}

static void test_uniform_gives_one(void **state)
{
    (void)state;
    float xm[COLS], wm[COLS], s[COLS];
    for (int c = 0; c < COLS; c++) xm[c] = 0.7f, wm[c] = 0.3f;
    for (int k = 0; k < 20; k++) {
        dsq_awq_ratio_scales(xm, wm, COLS, k / 20.0, true, s);
        for (int c = 0; c < COLS; c++) assert_true(fabsf(s[c] - 1.0f) < 1e-6f);
    }
}

static void test_stats(void **state)
{
    (void)state;
    uint64_t seed = 3;
    float *x = randv(NTOK * COLS, 1.0f, &seed), *w = randv(ROWS * COLS, 1.0f, &seed);
    float xm[COLS], wm[COLS];
    dsq_awq_x_mean(x, NTOK, COLS, xm);
    const float *wl[1] = {w};
    int64_t rows[1] = {ROWS};
    expect_ok(dsq_awq_w_mean(wl, rows, 1, COLS, 32, wm));
    for (int c = 0; c < COLS; c++) {
        double a = 0, b = 0;
        for (int t = 0; t < NTOK; t++) a += fabs(x[t * COLS + c]);
        for (int r = 0; r < ROWS; r++) {
            float mx = 0;
            for (int k = 0; k < 32; k++) mx = fmaxf(mx, fabsf(w[r * COLS + c / 32 * 32 + k]));
            b += fabsf(w[r * COLS + c]) / (mx + 1e-6f);
        }
        assert_true(fabs(xm[c] - a / NTOK) < 1e-5);
        assert_true(fabs(wm[c] - b / ROWS) < 1e-5);
    }
    /* streamed in uneven batches: the same bits as one call */
    double acc[COLS] = {0};
    float xs[COLS];
    dsq_awq_x_mean_add(acc, x, 7, COLS);
    dsq_awq_x_mean_add(acc, x + 7 * COLS, 0, COLS);
    dsq_awq_x_mean_add(acc, x + 7 * COLS, NTOK - 7, COLS);
    dsq_awq_x_mean_finish(acc, NTOK, COLS, xs);
    assert_memory_equal(xs, xm, sizeof xm);
    free(x);
    free(w);
}

typedef struct lin_loss {
    const float *w, *x;
    float *wq;
    dsq_intq_params p;
} lin_loss;

static double out_mse(const float *w, const float *wq, const float *x)
{
    double e = 0;
    for (int t = 0; t < NTOK; t++)
        for (int r = 0; r < ROWS; r++) {
            double a = 0, b = 0;
            for (int c = 0; c < COLS; c++)
                a += (double)x[t * COLS + c] * w[r * COLS + c], b += (double)x[t * COLS + c] * wq[r * COLS + c];
            e += (a - b) * (a - b);
        }
    return e / (NTOK * ROWS);
}

static dsq_status loss_fn(void *user, const float *s, int p0, int p1, double bound, double *acc)
{
    (void)p0, (void)p1, (void)bound; /* one part */
    lin_loss *l = user;
    DSQ_TRY(dsq_awq_fake_quant(l->w, ROWS, COLS, s, &l->p, l->wq));
    *acc += out_mse(l->w, l->wq, l->x);
    return DSQ_OK;
}

/* Three draws of inputs and weights: the ordering is the method's, not one draw's. */
static void test_search_salient(void **state)
{
    (void)state;
    for (uint64_t k = 0; k < 3; k++) {
        uint64_t seed = 11 + k;
        float *x = randv(NTOK * COLS, 1.0f, &seed), *w = randv(ROWS * COLS, 0.05f, &seed);
        for (int t = 0; t < NTOK; t++) x[t * COLS + 5] *= 40.0f; /* one salient channel */
        dsq_awq_opts o = dsq_awq_default_opts();
        o.q.group_size = 64;
        lin_loss l = {w, x, malloc(ROWS * COLS * sizeof(float)), o.q};
        float xm[COLS], wm[COLS], s[COLS];
        dsq_awq_x_mean(x, NTOK, COLS, xm);
        const float *wl[1] = {w};
        int64_t rows[1] = {ROWS};
        expect_ok(dsq_awq_w_mean(wl, rows, 1, COLS, 64, wm));
        dsq_awq_search info;
        expect_ok(dsq_awq_search_scale(xm, wm, COLS, &o, 1, loss_fn, &l, s, &info));
        assert_true(info.best_loss <= info.loss_r0);
        double rtn = 0.0;
        expect_ok(loss_fn(&l, NULL, 0, 1, INFINITY, &rtn));
        if (!(info.best_loss < rtn)) fail_msg("draw %d: AWQ loss %g not below RTN's %g", (int)k, info.best_loss, rtn);
        assert_true(info.best_ratio > 0);
        for (int c = 0; c < COLS; c++) assert_true(s[5] >= s[c]);
        free(l.wq);
        free(x);
        free(w);
    }
}

/* A loss given as a table L[k][p] of grid point k's part p, the point told
 * by its scales: with x_mean {1, 4} and w_mean {1, 1} the scales at ratio r
 * are {2^-r, 2^r}. Counts the parts it adds. */
#define GRID 20
#define PARTS 16

typedef struct table_loss {
    double L[GRID][PARTS];
    int runs[GRID]; /* parts added per point */
} table_loss;

static dsq_status table_fn(void *user, const float *s, int p0, int p1, double bound, double *acc)
{
    table_loss *t = user;
    int k = (int)lround(log2((double)s[1]) * GRID);
    assert_true(k >= 0 && k < GRID);
    assert_true(fabs(s[1] - exp2((double)k / GRID)) < 1e-5);
    for (int p = p0; p < p1 && !(*acc > bound); p++) *acc += t->L[k][p], t->runs[k]++;
    return DSQ_OK;
}

static double full_loss(const table_loss *t, int k)
{
    double a = 0.0;
    for (int p = 0; p < PARTS; p++) a += t->L[k][p];
    return a;
}

/* Exhaustive search with the bound: on random tables the first point of the
 * smallest whole loss, that loss to the bit, ratio 0's whole loss, and fewer
 * parts than the whole grid; screened: the smallest whole loss among the
 * finalists (of the eight lowest on the first part, the four lowest on the first two), ties to the lower ratio,
 * ratio 0's loss NaN when it was screened out. */
static void test_search_parts(void **state)
{
    (void)state;
    const float xm[2] = {1.0f, 4.0f}, wm[2] = {1.0f, 1.0f};
    uint64_t seed = 5;
    table_loss *t = malloc(sizeof *t);
    for (int draw = 0; draw < 40; draw++) {
        for (int k = 0; k < GRID; k++)
            for (int p = 0; p < PARTS; p++) {
                /* a U-shaped curve over the grid with noisy parts */
                double u = (double)(k - 7) / GRID;
                t->L[k][p] = (1.0 + 4.0 * u * u) * (0.5 + (double)(dsq_test_rand(&seed) >> 11) * 0x1p-53);
            }
        if (draw % 4 == 3) memcpy(t->L[11], t->L[9], sizeof t->L[9]); /* a tie */
        int best = 0;
        for (int k = 1; k < GRID; k++)
            if (full_loss(t, k) < full_loss(t, best)) best = k;
        dsq_awq_opts o = dsq_awq_default_opts();
        float sc[2];
        dsq_awq_search info;
        o.finalists = 0;
        memset(t->runs, 0, sizeof t->runs);
        expect_ok(dsq_awq_search_scale(xm, wm, 2, &o, PARTS, table_fn, t, sc, &info));
        assert_int_equal((int)lround(info.best_ratio * GRID), best);
        assert_true(info.best_loss == full_loss(t, best));
        assert_true(info.loss_r0 == full_loss(t, 0));
        assert_true(fabs(sc[1] - exp2((double)best / GRID)) < 1e-5);
        int runs = 0;
        for (int k = 0; k < GRID; k++) runs += t->runs[k];
        assert_true(runs < GRID * PARTS);

        /* screened: the 8 best on part 0, of them the 4 best on parts 0-1 */
        const int m = dsq_awq_screen_parts(PARTS);
        assert_int_equal(m, 2);
        int fin[4], nf = 0;
        bool taken[GRID] = {false}, first[GRID] = {false};
        for (int i = 0; i < 8; i++) {
            int b = -1;
            for (int k = 0; k < GRID; k++)
                if (!first[k] && (b < 0 || t->L[k][0] < t->L[b][0])) b = k;
            first[b] = true;
        }
        for (; nf < 4; nf++) {
            int b = -1;
            for (int k = 0; k < GRID; k++)
                if (first[k] && !taken[k] && (b < 0 || t->L[k][0] + t->L[k][1] < t->L[b][0] + t->L[b][1])) b = k;
            taken[b] = true;
            fin[nf] = b;
        }
        int want = fin[0];
        for (int i = 1; i < 4; i++)
            if (full_loss(t, fin[i]) < full_loss(t, want) ||
                (full_loss(t, fin[i]) == full_loss(t, want) && fin[i] < want))
                want = fin[i];
        o.finalists = 4;
        memset(t->runs, 0, sizeof t->runs);
        expect_ok(dsq_awq_search_scale(xm, wm, 2, &o, PARTS, table_fn, t, sc, &info));
        assert_int_equal((int)lround(info.best_ratio * GRID), want);
        if (!taken[0]) assert_true(isnan(info.loss_r0));
        for (int k = 0; k < GRID; k++) assert_true(taken[k] ? t->runs[k] <= PARTS : t->runs[k] == (first[k] ? 2 : 1));
        if (draw % 4 == 3 && (want == 9 || want == 11) && taken[9] && taken[11]) assert_int_equal(want, 9);
    }
    /* too few parts to screen: exhaustive */
    dsq_awq_opts o = dsq_awq_default_opts();
    memset(t->runs, 0, sizeof t->runs);
    float sc[2];
    dsq_awq_search info;
    expect_ok(dsq_awq_search_scale(xm, wm, 2, &o, 2, table_fn, t, sc, &info));
    for (int k = 0; k < GRID; k++) assert_true(t->runs[k] >= 1);
    free(t);
}

static void rmsnorm(const float *x, const float *g, float *y)
{
    double ss = 0;
    for (int c = 0; c < COLS; c++) ss += (double)x[c] * x[c];
    float inv = 1.0f / sqrtf((float)(ss / COLS) + 1e-5f);
    for (int c = 0; c < COLS; c++) y[c] = x[c] * inv * g[c];
}

static void matvec(const float *w, int rows, int cols, const float *x, float *y)
{
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int c = 0; c < cols; c++) a += (double)w[r * cols + c] * x[c];
        y[r] = (float)a;
    }
}

static void test_folding_identity(void **state)
{
    (void)state;
    uint64_t seed = 5;
    float *x = randv(COLS, 1.0f, &seed), *g = randv(COLS, 0.1f, &seed), *w = randv(ROWS * COLS, 0.1f, &seed);
    float *s = malloc(COLS * sizeof *s), n[COLS], y0[ROWS], y1[ROWS];
    for (int c = 0; c < COLS; c++) g[c] += 1.0f, s[c] = 0.2f + (float)(c % 7);
    rmsnorm(x, g, n);
    matvec(w, ROWS, COLS, n, y0);
    dsq_awq_div_vec(g, s, COLS);
    dsq_awq_scale_cols(w, ROWS, COLS, s);
    rmsnorm(x, g, n);
    matvec(w, ROWS, COLS, n, y1);
    for (int r = 0; r < ROWS; r++) assert_true(fabsf(y0[r] - y1[r]) <= 1e-4f * (1 + fabsf(y0[r])));
    /* previous linear (v: ROWS x COLS -> o: COLS x ROWS) */
    float *v = randv(ROWS * COLS, 0.1f, &seed), *o = randv(COLS * ROWS, 0.1f, &seed), *bias = randv(ROWS, 0.1f, &seed);
    float sv[ROWS], h[ROWS], z0[COLS], z1[COLS];
    for (int r = 0; r < ROWS; r++) sv[r] = 0.3f + (float)(r % 5);
    matvec(v, ROWS, COLS, x, h);
    for (int r = 0; r < ROWS; r++) h[r] += bias[r];
    matvec(o, COLS, ROWS, h, z0);
    dsq_awq_div_rows(v, ROWS, COLS, bias, sv, ROWS);
    dsq_awq_scale_cols(o, COLS, ROWS, sv);
    matvec(v, ROWS, COLS, x, h);
    for (int r = 0; r < ROWS; r++) h[r] += bias[r];
    matvec(o, COLS, ROWS, h, z1);
    for (int c = 0; c < COLS; c++) assert_true(fabsf(z0[c] - z1[c]) <= 1e-4f * (1 + fabsf(z0[c])));
    free(x), free(g), free(w), free(s), free(v), free(o), free(bias);
}

static void test_clip(void **state)
{
    (void)state;
    uint64_t seed = 9;
    float *x = randv(NTOK * COLS, 1.0f, &seed), *w = randv(ROWS * COLS, 0.1f, &seed);
    for (int r = 0; r < ROWS; r++) w[r * COLS + (r % COLS)] = 1.5f; /* an outlier per row */
    dsq_awq_opts o = dsq_awq_default_opts();
    o.q.group_size = 32;
    int ng = COLS / 32;
    float *mv = malloc(ROWS * ng * sizeof *mv), *wc = malloc(ROWS * COLS * sizeof *wc),
          *q0 = malloc(ROWS * COLS * sizeof *q0), *q1 = malloc(ROWS * COLS * sizeof *q1);
    expect_ok(dsq_awq_search_clip(w, ROWS, COLS, x, NTOK, &o, mv));
    int shrunk = 0;
    for (int r = 0; r < ROWS; r++)
        for (int g = 0; g < ng; g++) {
            float amax = 0;
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(w[r * COLS + g * 32 + k]));
            assert_true(mv[r * ng + g] <= amax && mv[r * ng + g] >= 0.55f * amax - 1e-6f);
            shrunk += mv[r * ng + g] < amax;
        }
    assert_true(shrunk > 0);
    /* each choice is the best of the 10 thresholds by AutoAWQ's per-token error, computed directly here */
    for (int r = 0; r < ROWS; r++)
        for (int g = 0; g < ng; g++) {
            const float *wg = w + r * COLS + g * 32;
            float amax = 0, cw[32], qg[32];
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(wg[k]));
            double best = INFINITY, chosen = NAN;
            for (int i = 0; i < 10; i++) {
                float t = amax * (1.0f - (float)i / 20.0f);
                for (int k = 0; k < 32; k++) cw[k] = fminf(fmaxf(wg[k], -t), t);
                expect_ok(dsq_awq_fake_quant(cw, 1, 32, NULL, &o.q, qg));
                double e = 0;
                for (int tk = 0; tk < NTOK; tk++) {
                    double dq = 0;
                    for (int k = 0; k < 32; k++) dq += (double)x[tk * COLS + g * 32 + k] * ((double)qg[k] - wg[k]);
                    e += dq * dq;
                }
                if (e < best) best = e;
                if (t == mv[r * ng + g]) chosen = e;
            }
            if (!(chosen <= best * (1 + 1e-5)))
                fail_msg("row %d group %d: chosen error %.9g, best %.9g", r, g, chosen, best);
        }
    memcpy(wc, w, ROWS * COLS * sizeof *wc);
    dsq_awq_apply_clip(wc, ROWS, COLS, 32, mv);
    expect_ok(dsq_awq_fake_quant(w, ROWS, COLS, NULL, &o.q, q0));
    expect_ok(dsq_awq_fake_quant(wc, ROWS, COLS, NULL, &o.q, q1));
    assert_true(out_mse(w, q1, x) <= out_mse(w, q0, x));
    /* rows in tiles: 150 rows (two whole tiles and a part) choose what each
     * row alone chooses; a non-finite weight is an error */
    float *w2 = randv(150 * COLS, 0.1f, &seed), *mv2 = malloc(150 * ng * sizeof *mv2), one[4];
    for (int r = 0; r < 150; r++) w2[r * COLS + (r * 7 % COLS)] = 1.2f;
    expect_ok(dsq_awq_search_clip(w2, 150, COLS, x, NTOK, &o, mv2));
    for (int r = 0; r < 150; r++) {
        expect_ok(dsq_awq_search_clip(w2 + r * COLS, 1, COLS, x, NTOK, &o, one));
        for (int g = 0; g < ng; g++)
            if (one[g] != mv2[r * ng + g])
                fail_msg("row %d group %d: %g in tiles, %g alone", r, g, mv2[r * ng + g], one[g]);
    }
    /* the per-group search with the Gram objective (the reference the
     * batch replaces) picks the same thresholds: G from all 96 tokens here */
    float G[32 * 32], dbuf[32];
    int same = 0, total = 0;
    for (int g = 0; g < ng; g++) {
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 32; j++) {
                float acc = 0.0f;
                for (int t = 0; t < NTOK; t++) acc += x[t * COLS + g * 32 + i] * x[t * COLS + g * 32 + j];
                G[i * 32 + j] = acc / (float)NTOK;
            }
        const dsq_intq_objective obj = {NULL, 2.0f, G};
        for (int r = 0; r < 150; r++) {
            const float *wg = w2 + r * COLS + g * 32;
            float amax = 0;
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(wg[k]));
            const float ratio = dsq_intq_search_grid(wg, 32, &o.q, 1.0f, 10, 20, &obj, dbuf, NULL);
            same += amax * ratio == mv2[r * ng + g];
            total++;
        }
    }
    print_message("clip: %d of %d thresholds as the per-group Gram search's\n", same, total);
    if (same < total - total / 100)
        fail_msg("clip: only %d of %d thresholds agree with the per-group search", same, total);
    /* on rows sampled beforehand by its stride (what a streamed capture
     * keeps): the same thresholds; 96 tokens with 40 samples: stride 2 */
    o.n_sample_token = 40;
    const int64_t step = dsq_awq_clip_step(NTOK, &o), ns = (NTOK + step - 1) / step;
    assert_int_equal(step, 2);
    float *xs = malloc((size_t)(ns * COLS) * sizeof *xs), *mv3 = malloc(150 * ng * sizeof *mv3);
    for (int64_t t = 0; t < ns; t++) memcpy(xs + t * COLS, x + t * step * COLS, COLS * sizeof *xs);
    expect_ok(dsq_awq_search_clip(w2, 150, COLS, x, NTOK, &o, mv2));
    expect_ok(dsq_awq_search_clip_sampled(w2, 150, COLS, xs, ns, &o, mv3));
    assert_memory_equal(mv2, mv3, 150 * ng * sizeof *mv3);
    expect_ok(dsq_awq_search_clip(w2, 150, COLS, x, ns, &o, mv3)); /* the first rows are not the sample */
    assert_true(memcmp(mv2, mv3, 150 * ng * sizeof *mv3) != 0);
    free(xs), free(mv3);
    o.n_sample_token = 512;
    w2[149 * COLS + 3] = NAN;
    assert_int_equal(dsq_awq_search_clip(w2, 150, COLS, x, NTOK, &o, mv2), DSQ_ERR_NUMERIC);
    free(w2), free(mv2);
    free(x), free(w), free(mv), free(wc), free(q0), free(q1);
}

/* The quadratic-form loss equals the direct output MSE (x^T x from the
 * tokens, in double here), for a fake-quantized linear and for a change that
 * touches one column only (a wrong G layout or a missing row would differ);
 * so does the loss from the tokens themselves (dsq_awq_direct_loss), on all
 * of them and on fewer tokens than columns. */
static void test_quad_loss(void **state)
{
    (void)state;
    uint64_t seed = 77;
    const int64_t nt = 300, rows = 37, cols = 96;
    float *x = randv((size_t)(nt * cols), 1.0f, &seed), *w = randv((size_t)(rows * cols), 0.3f, &seed);
    for (int64_t t = 0; t < nt; t++) x[t * cols + 5] *= 20.0f; /* an outlier channel, as real activations have */
    float *wq = malloc((size_t)(rows * cols) * sizeof *wq), *G = malloc((size_t)(cols * cols) * sizeof *G);
    assert_non_null(wq);
    assert_non_null(G);
    for (int64_t i = 0; i < cols; i++)
        for (int64_t j = 0; j < cols; j++) {
            double a = 0;
            for (int64_t t = 0; t < nt; t++) a += (double)x[t * cols + i] * x[t * cols + j];
            G[i * cols + j] = (float)(a / (double)nt);
        }
    dsq_awq_opts o = dsq_awq_default_opts();
    o.q.bits = 3;
    o.q.group_size = 32;
    for (int variant = 0; variant < 2; variant++) {
        if (variant == 0)
            assert_int_equal(dsq_awq_fake_quant(w, rows, cols, NULL, &o.q, wq), DSQ_OK);
        else {
            memcpy(wq, w, (size_t)(rows * cols) * sizeof *wq);
            for (int64_t r = 0; r < rows; r++) wq[r * cols + 5] += 0.01f * (float)(r + 1);
        }
        double direct = 0;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < rows; r++) {
                double d = 0;
                for (int64_t c = 0; c < cols; c++)
                    d += (double)x[t * cols + c] * ((double)wq[r * cols + c] - w[r * cols + c]);
                direct += d * d;
            }
        direct /= (double)(nt * rows);
        double quad = -1, quad16 = -1;
        assert_int_equal(dsq_awq_quad_loss(w, wq, rows, cols, G, NULL, &quad), DSQ_OK);
        if (!(fabs(quad - direct) <= 1e-5 * direct))
            fail_msg("variant %d: quad %.9g vs direct %.9g", variant, quad, direct);
        uint16_t *Gp = dsq_awq_pack_gram(G, cols);
        assert_non_null(Gp);
        assert_int_equal(dsq_awq_quad_loss(w, wq, rows, cols, G, Gp, &quad16), DSQ_OK);
        free(Gp);
        if (!(fabs(quad16 - direct) <= 1e-2 * direct && quad16 != quad))
            fail_msg("variant %d: bf16 quad %.9g vs direct %.9g", variant, quad16, direct);
        double tok = -1;
        assert_int_equal(dsq_awq_direct_loss(w, wq, rows, cols, x, nt, &tok), DSQ_OK);
        if (!(fabs(tok - direct) <= 1e-5 * direct))
            fail_msg("variant %d: token loss %.9g vs direct %.9g", variant, tok, direct);
        /* fewer tokens than columns, the case it is for: the first 40 rows alone */
        double few = 0, ref = 0;
        assert_int_equal(dsq_awq_direct_loss(w, wq, rows, cols, x, 40, &few), DSQ_OK);
        for (int64_t t = 0; t < 40; t++)
            for (int64_t r = 0; r < rows; r++) {
                double d = 0;
                for (int64_t c = 0; c < cols; c++)
                    d += (double)x[t * cols + c] * ((double)wq[r * cols + c] - w[r * cols + c]);
                ref += d * d;
            }
        ref /= (double)(40 * rows);
        if (!(fabs(few - ref) <= 1e-5 * ref)) fail_msg("variant %d: 40-token loss %.9g vs %.9g", variant, few, ref);
        assert_true(direct > 0);
    }
    free(x), free(w), free(wq), free(G);
}

/* The GGUF-block fake quantization: with no scales it is the type's own
 * quantize-dequantize with the given importance; with scales s it is that of
 * w diag(s) under importance imp / s^2, divided back by s, row by row. */
static void test_fake_quant_blocks(void **state)
{
    (void)state;
    enum { R = 7, C = 512 };
    uint64_t seed = 31;
    float *w = randv(R * C, 0.05f, &seed), *imp = randv(C, 1.0f, &seed), *s = randv(C, 0.3f, &seed);
    float *out = malloc(R * C * sizeof *out), *want = malloc(R * C * sizeof *want), *row = malloc(C * sizeof *row);
    float *ws = malloc(C * sizeof *ws);
    uint8_t q[C * 2];
    for (int c = 0; c < C; c++) imp[c] = imp[c] * imp[c] + 0.01f, s[c] = expf(s[c]);
    const dsq_type types[] = {DSQ_TYPE_Q4_K, DSQ_TYPE_Q5_0, DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int scaled = 0; scaled < 2; scaled++) {
            assert_int_equal(dsq_awq_fake_quant_blocks(w, R, C, scaled ? s : NULL, types[t], imp, out), DSQ_OK);
            for (int c = 0; c < C; c++) ws[c] = scaled ? imp[c] / (s[c] * s[c]) : imp[c];
            for (int r = 0; r < R; r++) {
                for (int c = 0; c < C; c++) row[c] = scaled ? w[r * C + c] * s[c] : w[r * C + c];
                assert_int_equal(dsq_quantize(types[t], row, q, 1, C, ws), DSQ_OK);
                assert_int_equal(dsq_dequantize(types[t], q, row, 1, C), DSQ_OK);
                for (int c = 0; c < C; c++) want[r * C + c] = scaled ? row[c] / s[c] : row[c];
            }
            assert_memory_equal(out, want, R * C * sizeof *out);
        }
    /* a NaN weight: one line naming the type and row */
    w[3 * C + 9] = NAN;
    assert_int_equal(dsq_awq_fake_quant_blocks(w, R, C, s, DSQ_TYPE_Q4_K, imp, out), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "q4_K"));
    assert_non_null(strstr(dsq_errmsg(), "row 3"));
    free(w), free(imp), free(s), free(out), free(want), free(row), free(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_gives_one), cmocka_unit_test(test_stats),
        cmocka_unit_test(test_search_salient),    cmocka_unit_test(test_search_parts),
        cmocka_unit_test(test_folding_identity),  cmocka_unit_test(test_clip),
        cmocka_unit_test(test_quad_loss),         cmocka_unit_test(test_fake_quant_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
