/* GPTQ (quantizers/gptq.h).
 *
 * - the Hessian helper equals 2/n X^T X, whichever way the rows are batched.
 * - the upper factor of H^-1 equals the reference's literal route
 *   (Cholesky -> inverse -> upper Cholesky, written here naively) and satisfies
 *   U^T U = H^-1, on a size that is not a multiple of the block width; GPTQ's
 *   float factor (formed in its own output) agrees with it within float's
 *   rounding and leaves H as it was.
 * - a diagonal (and a scaled identity) Hessian leaves nothing to compensate:
 *   codes, scales and zeros equal RTN's exactly, for every bits/group/sym, with
 *   and without act-order + static groups, and for every group grid (the
 *   searched ones with RTN weighted by the Hessian's diagonal).
 * - correlated inputs: ||X W^T - X Wq^T|| of GPTQ never above RTN's, for three
 *   draws of inputs and weights.
 * - act-order: g_idx is a valid grouping (each group exactly group_size
 *   columns, in descending-diagonal order) and dequantizes sensibly.
 * - dead columns (singular H): quantized, reported, dequantize to exactly 0.
 * - an indefinite H is retried with more dampening, and a hopeless one fails
 *   naming the layer and the dampening tried. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu.h"
#include "quantizers/gptq.h"
#include "quantizers/gptq_blocks.h"
#include "quantizers/gptq_internal.h"
#include "quantizers/intq.h"
#include "tests/helpers/testutil.h"

/* x [n x cols] with correlated columns: x = z * A, A upper-triangular-ish mix. */
static float *correlated_inputs(int n, int cols, uint64_t seed)
{
    float *a = malloc(sizeof(float) * cols * cols), *z = malloc(sizeof(float) * cols),
          *x = malloc(sizeof(float) * n * cols);
    for (int i = 0; i < cols * cols; i++) a[i] = 0.0f;
    for (int i = 0; i < cols; i++) {
        a[i * cols + i] = 1.0f + 0.5f * (float)(i % 5);
        for (int j = i + 1; j < cols && j < i + 6; j++) a[i * cols + j] = 0.6f * dsq_test_randn(&seed);
    }
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < cols; i++) z[i] = dsq_test_randn(&seed);
        for (int j = 0; j < cols; j++) {
            float s = 0.0f;
            for (int i = 0; i < cols; i++) s += z[i] * a[i * cols + j];
            x[t * cols + j] = s;
        }
    }
    free(a);
    free(z);
    return x;
}

static double *hessian_of(const float *x, int n, int cols)
{
    dsq_hessian h;
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x, n), DSQ_OK);
    assert_int_equal(dsq_hessian_finalize(&h), DSQ_OK);
    return h.h; /* caller frees */
}

static float *random_weight(int rows, int cols, uint64_t seed)
{
    float *w = malloc(sizeof(float) * rows * cols);
    for (int i = 0; i < rows * cols; i++) w[i] = 0.05f * dsq_test_randn(&seed);
    return w;
}

static void test_hessian_accumulate(void **state)
{
    (void)state;
    const int n = 100, cols = 40;
    float *x = correlated_inputs(n, cols, 1);
    dsq_hessian h;
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x, 37), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x + 37 * cols, 0), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x + 37 * cols, n - 37), DSQ_OK);
    assert_int_equal(dsq_hessian_finalize(&h), DSQ_OK);
    assert_int_equal(h.n, n);
    for (int i = 0; i < cols; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0.0;
            for (int t = 0; t < n; t++) s += (double)x[t * cols + i] * (double)x[t * cols + j];
            s *= 2.0 / n;
            assert_true(fabs(h.h[i * cols + j] - s) <= 1e-5 * (1.0 + fabs(s))); /* F32 products per chunk */
        }
    assert_int_equal(dsq_hessian_add(&h, x, 1), DSQ_ERR_ARG); /* finalized */
    dsq_hessian_free(&h);
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    assert_int_equal(dsq_hessian_finalize(&h), DSQ_ERR_ARG); /* nothing added */
    x[5] = NAN;
    dsq_hessian_free(&h);
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x, 2), DSQ_ERR_NUMERIC);
    dsq_hessian_free(&h);
    free(x);
}

/* Rows gather across calls: the bits of the sums do not depend on how the
 * rows were split into calls, in either mode (AWQ streams its Gram matrices
 * per sample and must match the one-call form). 700 rows: two whole F32
 * chunks and a part, more columns than one band. */
static void test_hessian_split_invariant(void **state)
{
    (void)state;
    const int n = 700, cols = 150;
    float *x = correlated_inputs(n, cols, 5);
    static const int parts[] = {128, 1, 300, 0, 200, 71};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        dsq_hessian one, split;
        assert_int_equal(dsq_hessian_init(&one, cols), DSQ_OK);
        assert_int_equal(dsq_hessian_init(&split, cols), DSQ_OK);
        one.bf16 = split.bf16 = bf16;
        assert_int_equal(dsq_hessian_add(&one, x, n), DSQ_OK);
        for (int p = 0, r = 0; p < 6; r += parts[p++])
            assert_int_equal(dsq_hessian_add(&split, x + (size_t)r * cols, parts[p]), DSQ_OK);
        assert_int_equal(dsq_hessian_finalize(&one), DSQ_OK);
        assert_int_equal(dsq_hessian_finalize(&split), DSQ_OK);
        if (memcmp(one.h, split.h, (size_t)cols * cols * sizeof(double)))
            fail_msg("%s: the Hessian depends on how its rows were split into calls", bf16 ? "bf16" : "f32");
        dsq_hessian_free(&one);
        dsq_hessian_free(&split);
    }
    free(x);
}

/* The BF16 Hessian: the exact x^T x of the BF16-rounded inputs (summed in
 * F32 per chunk), over 1301 rows added in uneven calls so rows gather across
 * calls into 1024-row chunks and the odd tail waits for finalize, with more
 * columns than one 128-column band. */
static void test_hessian_bf16(void **state)
{
    (void)state;
    const int n = 1301, cols = 150;
    float *x = correlated_inputs(n, cols, 3);
    dsq_hessian h;
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    h.bf16 = true;
    static const int parts[] = {300, 0, 700, 1, 300};
    for (int p = 0, r = 0; p < 5; r += parts[p++])
        assert_int_equal(dsq_hessian_add(&h, x + (size_t)r * cols, parts[p]), DSQ_OK);
    assert_int_equal(h.n, n);
    assert_int_equal(dsq_hessian_finalize(&h), DSQ_OK);
    double worst_f32 = 0;
    for (int i = 0; i < cols; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0.0, s32 = 0.0, bound = 0.0;
            for (int t = 0; t < n; t++) {
                double a = dsq_bf16_to_f32(dsq_f32_to_bf16(x[t * cols + i])),
                       b = dsq_bf16_to_f32(dsq_f32_to_bf16(x[t * cols + j]));
                s += a * b;
                bound += fabs(a * b);
                s32 += (double)x[t * cols + i] * (double)x[t * cols + j];
            }
            s *= 2.0 / n, bound *= 2.0 / n, s32 *= 2.0 / n;
            if (!(fabs(h.h[i * cols + j] - s) <= 1e-5 * bound))
                fail_msg("H[%d,%d] = %.9g, want %.9g", i, j, h.h[i * cols + j], s);
            worst_f32 = fmax(worst_f32, fabs(h.h[i * cols + j] - s32) / (bound + 1e-30));
        }
    assert_true(worst_f32 > 1e-5); /* the rounding did happen */
    dsq_hessian_free(&h);
    free(x);
}

/* The reference route, naively: L = chol(H); Hi = L^-T L^-1; U = chol(Hi) upper. */
static void reference_hinv_upper(const double *H, int n, double damp, double *U)
{
    double *L = calloc((size_t)n * n, sizeof(double)), *Li = calloc((size_t)n * n, sizeof(double));
    double *Hi = calloc((size_t)n * n, sizeof(double));
    for (int j = 0; j < n; j++) {
        double d = H[j * n + j] + damp;
        for (int k = 0; k < j; k++) d -= L[j * n + k] * L[j * n + k];
        L[j * n + j] = sqrt(d);
        for (int i = j + 1; i < n; i++) {
            double s = H[i * n + j];
            for (int k = 0; k < j; k++) s -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = s / L[j * n + j];
        }
    }
    for (int j = 0; j < n; j++) /* column j of L^-1 */
        for (int i = j; i < n; i++) {
            double s = i == j ? 1.0 : 0.0;
            for (int k = j; k < i; k++) s -= L[i * n + k] * Li[k * n + j];
            Li[i * n + j] = s / L[i * n + i];
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s += Li[k * n + i] * Li[k * n + j];
            Hi[i * n + j] = s;
        }
    /* Upper Cholesky: Hi = U^T U. */
    memset(U, 0, sizeof(double) * n * n);
    for (int i = 0; i < n; i++) {
        double d = Hi[i * n + i];
        for (int k = 0; k < i; k++) d -= U[k * n + i] * U[k * n + i];
        U[i * n + i] = sqrt(d);
        for (int j = i + 1; j < n; j++) {
            double s = Hi[i * n + j];
            for (int k = 0; k < i; k++) s -= U[k * n + i] * U[k * n + j];
            U[i * n + j] = s / U[i * n + i];
        }
    }
    free(L);
    free(Li);
    free(Hi);
}

/* Path p of three other than the default: the scalar loops, AVX2, one thread.
 * Returns the thread count default_path restores. */
static int other_path(int p)
{
    const int threads = omp_get_max_threads();
    if (p < 2)
        dsq_cpu_set_isa(p == 0 ? DSQ_CPU_ISA_SCALAR : DSQ_CPU_ISA_AVX2);
    else
        omp_set_num_threads(1);
    return threads;
}

static void default_path(int threads)
{
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    omp_set_num_threads(threads);
}

/* GPTQ's own factor (float, formed in its output buffer, processing order
 * reversed by act-order) against the double reference U64 of the same H in
 * the original order: entry for entry within float's rounding grown by the
 * conditioning (measured 1.5e-6 of the largest entry at n = 150, 6.8e-6 at
 * 601; bound 1e-4), (H + damp I) U^T U within 1e-4 of I (measured 2e-6 to
 * 7e-6) in both orders, its lower triangle zero, H untouched, and its bits
 * the same on every ISA and thread count. */
static void factor_f32_case(const double *H, int n, const double *U64)
{
    int64_t *perm = malloc(sizeof(int64_t) * n);
    uint8_t *dead = calloc((size_t)n, 1);
    float *U = malloc(sizeof(float) * n * n), *R = malloc(sizeof(float) * n * n);
    double *H0 = malloc(sizeof(double) * n * n);
    memcpy(H0, H, sizeof(double) * n * n);
    dsq_gptq_opts o = dsq_gptq_default_opts();
    dsq_gptq_report rep = {0};
    for (int pass = 0; pass < 2; pass++) {
        /* pass 1: the columns reversed, as an act-order permutation would */
        for (int i = 0; i < n; i++) perm[i] = pass ? n - 1 - i : i;
        assert_int_equal(dsq_gptq_factor(H, perm, dead, n, &o, "t", U, &rep), DSQ_OK);
        assert_memory_equal(H, H0, sizeof(double) * n * n);
        assert_int_equal(rep.damp_tries, 1);
        double maxabs = 0.0, maxdiff = 0.0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                /* U's (i, j) in processing order is U64's at the permuted place, when
                 * the order is the original; reversed, the factor is another matrix:
                 * check U^T U = (P (H + damp I) P^T)^-1 through the product below */
                if (pass == 0) {
                    maxabs = fmax(maxabs, fabs(U64[i * n + j]));
                    maxdiff = fmax(maxdiff, fabs((double)U[i * n + j] - U64[i * n + j]));
                }
                if (j < i) assert_true(U[i * n + j] == 0.0f);
            }
        if (pass == 0)
            print_message("n %d: float factor off the double one by %.3g of the largest entry\n", n, maxdiff / maxabs);
        if (pass == 0 && !(maxdiff <= 1e-4 * maxabs))
            fail_msg("float factor off the double one by %g of %g", maxdiff, maxabs);
        /* (Hp + damp I) U^T U = I on a sample of entries, Hp = P H P^T */
        double worst = 0.0;
        for (int i = 0; i < n; i += 11)
            for (int j = 0; j < n; j += 13) {
                double s = 0.0;
                for (int k = 0; k < n; k++) {
                    double hu = 0.0;
                    for (int m = 0; m <= (k < j ? k : j); m++) hu += (double)U[m * n + k] * U[m * n + j];
                    s += (H[perm[i] * n + perm[k]] + (i == k ? rep.damp : 0.0)) * hu;
                }
                worst = fmax(worst, fabs(s - (i == j ? 1.0 : 0.0)));
                if (!(fabs(s - (i == j ? 1.0 : 0.0)) < 1e-4))
                    fail_msg("pass %d: (H + damp I) U^T U [%d][%d] = %g", pass, i, j, s);
            }
        print_message("n %d pass %d: (H + damp I) U^T U off I by at most %.3g\n", n, pass, worst);
    }
    for (int p = 0; p < 3; p++) {
        const int threads = other_path(p);
        assert_int_equal(dsq_gptq_factor(H, perm, dead, n, &o, "t", R, &rep), DSQ_OK);
        default_path(threads);
        assert_memory_equal(U, R, sizeof(float) * n * n);
    }
    free(perm);
    free(dead);
    free(U);
    free(R);
    free(H0);
}

static void hinv_case(int n, int tokens)
{
    float *x = correlated_inputs(tokens, n, 2);
    double *H = hessian_of(x, tokens, n);
    double mean = 0.0;
    for (int i = 0; i < n; i++) mean += H[i * n + i] / n;
    double *U = malloc(sizeof(double) * n * n), *R = malloc(sizeof(double) * n * n);
    assert_int_equal(dsq_gptq_hinv_upper(H, n, 0.01 * mean, U), DSQ_OK);
    reference_hinv_upper(H, n, 0.01 * mean, R);
    double maxabs = 0.0, maxdiff = 0.0;
    for (int i = 0; i < n * n; i++) {
        maxabs = fmax(maxabs, fabs(R[i]));
        maxdiff = fmax(maxdiff, fabs(U[i] - R[i]));
    }
    assert_true(maxdiff <= 1e-9 * maxabs);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) assert_true(U[i * n + j] == 0.0);
    /* the blocked factorization's bits do not depend on the ISA or the threads */
    for (int p = 0; p < 3; p++) {
        const int threads = other_path(p);
        assert_int_equal(dsq_gptq_hinv_upper(H, n, 0.01 * mean, R), DSQ_OK);
        default_path(threads);
        assert_memory_equal(U, R, sizeof(double) * n * n);
    }
    /* (H + damp I) U^T U = I */
    for (int i = 0; i < n; i += 7)
        for (int j = 0; j < n; j += 5) {
            double s = 0.0;
            for (int k = 0; k < n; k++) {
                double hu = 0.0; /* (U^T U)[k][j] */
                for (int m = 0; m <= (k < j ? k : j); m++) hu += U[m * n + k] * U[m * n + j];
                s += (H[i * n + k] + (i == k ? 0.01 * mean : 0.0)) * hu;
            }
            assert_true(fabs(s - (i == j ? 1.0 : 0.0)) < 1e-8);
        }
    factor_f32_case(H, n, U);
    /* Not positive definite without dampening: a zero row. */
    for (int j = 0; j < n; j++) H[3 * n + j] = H[j * n + 3] = 0.0;
    assert_int_equal(dsq_gptq_hinv_upper(H, n, 0.0, U), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "pivot 3"));
    free(x);
    free(H);
    free(U);
    free(R);
}

/* 150: one column chunk of the trailing update; 600: several panels and
 * chunks, and rows in groups of four with rests. */
static void test_hinv_factor(void **state)
{
    (void)state;
    hinv_case(150, 400);
    hinv_case(601, 1400);
}

static void test_diagonal_equals_rtn(void **state)
{
    (void)state;
    const int rows = 24, cols = 256;
    float *w = random_weight(rows, cols, 3);
    double *H = calloc((size_t)cols * cols, sizeof(double)), *I = calloc((size_t)cols * cols, sizeof(double));
    uint64_t seed = 9;
    for (int i = 0; i < cols; i++) {
        H[i * cols + i] = 0.5 + fabs((double)dsq_test_randn(&seed));
        I[i * cols + i] = 3.0;
    }
    /* the group search's importance: GPTQ's is diag(H), which RTN is given here */
    float *hd = malloc(sizeof(float) * cols), *id = malloc(sizeof(float) * cols);
    for (int i = 0; i < cols; i++) hd[i] = (float)H[i * cols + i], id[i] = 3.0f;
    const int bits[] = {2, 3, 4, 8}, gss[] = {32, 128, -1};
    for (int b = 0; b < 4; b++)
        for (int g = 0; g < 3; g++)
            for (int sym = 0; sym < 2; sym++)
                for (int mode = 0; mode < 3 * DSQ_INTQ_GRID_N; mode++) {
                    dsq_gptq_opts o = dsq_gptq_default_opts();
                    o.q.bits = bits[b];
                    o.q.group_size = gss[g];
                    o.q.sym = sym;
                    o.q.grid = (dsq_intq_grid)(mode / 3);
                    const float *imp = mode % 3 == 2 ? id : hd;
                    o.name = "diag";
                    /* mode % 3 == 0: plain; 1: act-order + static groups; 2: identity H, act-order;
                     * mode / 3: the group grid (min/max, mse, imatrix-mse) */
                    o.act_order = mode % 3 >= 1;
                    o.static_groups = mode % 3 == 1;
                    dsq_intq gq, rq;
                    dsq_gptq_report rep;
                    assert_int_equal(dsq_gptq_quantize(w, rows, cols, mode % 3 == 2 ? I : H, &o, &gq, &rep), DSQ_OK);
                    assert_int_equal(dsq_intq_quantize_weighted(w, rows, cols, &o.q, NULL, imp, &rq), DSQ_OK);
                    assert_null(gq.g_idx); /* static groups or identity order: trivial g_idx */
                    assert_memory_equal(gq.codes, rq.codes, (size_t)rows * cols);
                    assert_memory_equal(gq.scales, rq.scales, sizeof(float) * rows * rq.n_groups);
                    assert_memory_equal(gq.zeros, rq.zeros, (size_t)rows * rq.n_groups);
                    assert_int_equal(rep.damp_tries, 1);
                    assert_int_equal(rep.n_dead, 0);
                    assert_true(rep.loss > 0.0 && isfinite(rep.loss));
                    dsq_intq_free(&gq);
                    dsq_intq_free(&rq);
                }
    free(w);
    free(H);
    free(I);
    free(hd);
    free(id);
}

static double output_error(const float *x, int n, const float *w, const float *wq, int rows, int cols)
{
    double e = 0.0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0.0;
            for (int c = 0; c < cols; c++) s += (double)x[t * cols + c] * ((double)w[r * cols + c] - wq[r * cols + c]);
            e += s * s;
        }
    return sqrt(e);
}

/* Three draws of inputs and weights: the ordering is the method's, not one draw's. */
static void test_beats_rtn(void **state)
{
    (void)state;
    const int rows = 32, cols = 128, n = 512;
    const int bits[] = {2, 3, 4, 8}, gss[] = {32, 128};
    float *wq = malloc(sizeof(float) * rows * cols);
    for (uint64_t seed = 0; seed < 3; seed++) {
        float *x = correlated_inputs(n, cols, 4 + 2 * seed);
        double *H = hessian_of(x, n, cols);
        float *w = random_weight(rows, cols, 5 + 2 * seed);
        for (int b = 0; b < 4; b++)
            for (int g = 0; g < 2; g++)
                for (int sym = 0; sym < 2; sym++)
                    for (int act = 0; act < 2; act++) {
                        dsq_gptq_opts o = dsq_gptq_default_opts();
                        o.q.bits = bits[b];
                        o.q.group_size = gss[g];
                        o.q.sym = sym;
                        o.act_order = act;
                        o.block_size = 64; /* exercise the lazy batch update across blocks */
                        dsq_intq gq, rq;
                        dsq_gptq_report rep;
                        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &gq, &rep), DSQ_OK);
                        assert_int_equal(dsq_intq_validate(&gq), DSQ_OK);
                        assert_int_equal(dsq_intq_dequantize(&gq, wq), DSQ_OK);
                        double eg = output_error(x, n, w, wq, rows, cols);
                        assert_int_equal(dsq_intq_quantize(w, rows, cols, &o.q, NULL, &rq), DSQ_OK);
                        assert_int_equal(dsq_intq_dequantize(&rq, wq), DSQ_OK);
                        double er = output_error(x, n, w, wq, rows, cols);
                        if (!(eg <= er))
                            fail_msg("seed %d bits %d group %d sym %d act %d: GPTQ %g > RTN %g", (int)seed, bits[b],
                                     gss[g], sym, act, eg, er);
                        dsq_intq_free(&gq);
                        dsq_intq_free(&rq);
                    }
        free(x);
        free(H);
        free(w);
    }
    free(wq);
}

/* The refit keeps GPTQ's codes, zeros and g_idx and never raises the layer
 * loss it solves for, tr((W - Q) H (W - Q)^T) (checked on the inputs' own
 * output error, H without damping, so a tolerance of the ridge's size), with
 * static groups, g_idx groups and per channel; at 3 bits it lowers it. */
static void test_refit_scales(void **state)
{
    (void)state;
    const int rows = 24, cols = 128, n = 512;
    float *x = correlated_inputs(n, cols, 21);
    double *H = hessian_of(x, n, cols);
    float *w = random_weight(rows, cols, 22);
    float *wq = malloc(sizeof(float) * rows * cols);
    const struct {
        int bits, group;
        bool sym, act, stat;
    } cases[] = {{3, 32, true, true, true},
                 {3, 32, false, true, false},
                 {4, 64, true, false, false},
                 {2, -1, true, true, false},
                 {4, 128, false, true, true}};
    double gain3 = 0.0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dsq_gptq_opts o = dsq_gptq_default_opts();
        o.q.bits = cases[k].bits;
        o.q.group_size = cases[k].group;
        o.q.sym = cases[k].sym;
        o.act_order = cases[k].act;
        o.static_groups = cases[k].stat;
        dsq_intq a, b;
        dsq_gptq_report ra, rb;
        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &a, &ra), DSQ_OK);
        o.refit = true;
        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &b, &rb), DSQ_OK);
        assert_int_equal(ra.n_refit, 0);
        assert_true(rb.n_refit > 0);
        assert_memory_equal(a.codes, b.codes, (size_t)rows * cols);
        assert_memory_equal(a.zeros, b.zeros, (size_t)(rows * a.n_groups));
        assert_true((a.g_idx == NULL) == (b.g_idx == NULL));
        if (a.g_idx) assert_memory_equal(a.g_idx, b.g_idx, sizeof(int32_t) * cols);
        for (int64_t i = 0; i < rows * a.n_groups; i++) assert_true(isfinite(b.scales[i]) && b.scales[i] > 0.0f);
        assert_int_equal(dsq_intq_dequantize(&a, wq), DSQ_OK);
        double ea = output_error(x, n, w, wq, rows, cols);
        assert_int_equal(dsq_intq_dequantize(&b, wq), DSQ_OK);
        double eb = output_error(x, n, w, wq, rows, cols);
        if (!(eb <= ea * (1.0 + 1e-4))) fail_msg("case %d: refit output error %g > GPTQ's %g", (int)k, eb, ea);
        if (k == 0) gain3 = eb / ea;
        dsq_intq_free(&a);
        dsq_intq_free(&b);
    }
    if (!(gain3 < 0.99)) fail_msg("3-bit static groups: refit kept %g of the output error", gain3);
    free(x);
    free(H);
    free(w);
    free(wq);
}

static void test_act_order_g_idx(void **state)
{
    (void)state;
    const int rows = 16, cols = 128, n = 300, gs = 32;
    float *x = correlated_inputs(n, cols, 6);
    double *H = hessian_of(x, n, cols);
    float *w = random_weight(rows, cols, 7), *wq = malloc(sizeof(float) * rows * cols);
    dsq_gptq_opts o = dsq_gptq_default_opts();
    o.q.group_size = gs;
    o.act_order = true;
    dsq_intq q;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, NULL), DSQ_OK);
    assert_non_null(q.g_idx);
    int count[4] = {0};
    bool trivial = true;
    for (int c = 0; c < cols; c++) {
        assert_true(q.g_idx[c] >= 0 && q.g_idx[c] < 4);
        count[q.g_idx[c]]++;
        if (q.g_idx[c] != c / gs) trivial = false;
    }
    for (int g = 0; g < 4; g++) assert_int_equal(count[g], gs);
    assert_false(trivial); /* the inputs' diagonal is not sorted */
    /* A column in an earlier group never has a smaller diagonal than one in a later group. */
    for (int a = 0; a < cols; a++)
        for (int b = 0; b < cols; b++)
            if (q.g_idx[a] < q.g_idx[b]) assert_true(H[a * cols + a] >= H[b * cols + b]);
    assert_int_equal(dsq_intq_validate(&q), DSQ_OK);
    assert_int_equal(dsq_intq_dequantize(&q, wq), DSQ_OK);
    for (int i = 0; i < rows * cols; i++) assert_true(fabsf(wq[i] - w[i]) < 0.25f);
    dsq_intq_free(&q);

    /* static groups: groups stay the original ones (g_idx trivial, left NULL). */
    o.static_groups = true;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, NULL), DSQ_OK);
    assert_null(q.g_idx);
    dsq_intq_free(&q);
    free(x);
    free(H);
    free(w);
    free(wq);
}

static void test_dead_columns(void **state)
{
    (void)state;
    const int rows = 8, cols = 64, n = 200;
    float *x = correlated_inputs(n, cols, 8);
    for (int t = 0; t < n; t++) x[t * cols + 5] = x[t * cols + 40] = 0.0f; /* never-active inputs */
    double *H = hessian_of(x, n, cols);
    float *w = random_weight(rows, cols, 9), *wq = malloc(sizeof(float) * rows * cols);
    for (int act = 0; act < 2; act++) {
        dsq_gptq_opts o = dsq_gptq_default_opts();
        o.q.group_size = 32;
        o.q.sym = false;
        o.act_order = act;
        o.percdamp = 0.0; /* the dead diagonal alone must make H factor */
        dsq_intq q;
        dsq_gptq_report rep;
        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, &rep), DSQ_OK);
        assert_int_equal(rep.n_dead, 2);
        assert_int_equal(dsq_intq_dequantize(&q, wq), DSQ_OK);
        for (int r = 0; r < rows; r++) {
            assert_true(wq[r * cols + 5] == 0.0f);
            assert_true(wq[r * cols + 40] == 0.0f);
        }
        dsq_intq_free(&q);
    }
    free(x);
    free(H);
    free(w);
    free(wq);
}

static void test_damping_retry_and_failure(void **state)
{
    (void)state;
    const int cols = 32, rows = 4;
    double *H = calloc((size_t)cols * cols, sizeof(double));
    for (int i = 0; i < cols; i++) H[i * cols + i] = 1.0;
    H[1] = H[cols] = 1.05; /* eigenvalue -0.05: needs dampening above 5% */
    float *w = random_weight(rows, cols, 10);
    dsq_gptq_opts o = dsq_gptq_default_opts();
    o.q.group_size = 32;
    o.name = "model.layers.3.mlp.down_proj";
    dsq_intq q;
    dsq_gptq_report rep;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, &rep), DSQ_OK);
    assert_int_equal(rep.damp_tries, 4); /* 0.01, 0.02, 0.04 fail; 0.08 works */
    assert_true(rep.percdamp == 0.08);
    dsq_intq_free(&q);
    /* eigenvalue -2: even dampening 1 x mean diagonal cannot fix it. */
    H[1] = H[cols] = 3.0;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, &rep), DSQ_ERR_NUMERIC);
    const char *m = dsq_errmsg();
    assert_non_null(strstr(m, "model.layers.3.mlp.down_proj"));
    assert_non_null(strstr(m, "0.01 to 1"));
    assert_non_null(strstr(m, "tries"));
    assert_null(q.codes);
    /* Bad input is named too. */
    H[1] = H[cols] = 0.0;
    w[7] = NAN;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, &rep), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "column 7"));
    w[7] = 0.0f;
    o.q.group_size = 128;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &q, &rep), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "down_proj"));
    free(H);
    free(w);
}

/* H is only read (the factor is formed in its own buffer): bit for bit the
 * same after every path, with and without act-order, after a Hessian that
 * does not factor even at full dampening, and into GGUF blocks; a second run
 * on it gives the first's result. An asymmetric H is refused by name,
 * untouched. */
static void test_hessian_unchanged(void **state)
{
    (void)state;
    const int rows = 8, cols = 96, n = 256;
    float *x = correlated_inputs(n, cols, 31);
    double *H = hessian_of(x, n, cols);
    double *keep = malloc(sizeof(double) * cols * cols);
    memcpy(keep, H, sizeof(double) * cols * cols);
    float *w = random_weight(rows, cols, 32);
    for (int act = 0; act < 2; act++) {
        dsq_gptq_opts o = dsq_gptq_default_opts();
        o.q.group_size = 32;
        o.act_order = act;
        dsq_intq a, b;
        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &a, NULL), DSQ_OK);
        assert_memory_equal(H, keep, sizeof(double) * cols * cols);
        assert_int_equal(dsq_gptq_quantize(w, rows, cols, H, &o, &b, NULL), DSQ_OK);
        assert_memory_equal(a.codes, b.codes, (size_t)rows * cols);
        assert_memory_equal(a.scales, b.scales, sizeof(float) * rows * a.n_groups);
        dsq_intq_free(&a);
        dsq_intq_free(&b);
    }
    dsq_gptq_blocks_opts bo = {.type = DSQ_TYPE_Q4_0, .percdamp = 0.01, .act_order = true, .name = "blk.0.ffn_up"};
    uint8_t *out = malloc((size_t)rows * (cols / 32) * 18);
    assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &bo, out, NULL), DSQ_OK);
    assert_memory_equal(H, keep, sizeof(double) * cols * cols);
    free(out);
    /* not positive definite at any dampening: an error, H as it was */
    double *bad = calloc((size_t)cols * cols, sizeof(double));
    for (int i = 0; i < cols; i++) bad[i * cols + i] = 1.0;
    bad[1] = bad[cols] = 3.0;
    memcpy(keep, bad, sizeof(double) * cols * cols);
    dsq_gptq_opts o = dsq_gptq_default_opts();
    o.q.group_size = 32;
    dsq_intq q;
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, bad, &o, &q, NULL), DSQ_ERR_NUMERIC);
    assert_memory_equal(bad, keep, sizeof(double) * cols * cols);
    /* asymmetric: refused, naming the entry */
    bad[1] = 2.0;
    o.name = "model.layers.0.mlp.up_proj";
    assert_int_equal(dsq_gptq_quantize(w, rows, cols, bad, &o, &q, NULL), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "not symmetric"));
    assert_non_null(strstr(dsq_errmsg(), "up_proj"));
    assert_non_null(strstr(dsq_errmsg(), "(0, 1)"));
    free(bad);
    free(keep);
    free(H);
    free(w);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hessian_accumulate),        cmocka_unit_test(test_hessian_bf16),
        cmocka_unit_test(test_hessian_split_invariant),   cmocka_unit_test(test_hinv_factor),
        cmocka_unit_test(test_diagonal_equals_rtn),       cmocka_unit_test(test_beats_rtn),
        cmocka_unit_test(test_act_order_g_idx),           cmocka_unit_test(test_dead_columns),
        cmocka_unit_test(test_damping_retry_and_failure), cmocka_unit_test(test_refit_scales),
        cmocka_unit_test(test_hessian_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
