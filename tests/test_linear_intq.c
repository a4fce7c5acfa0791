/* The INT group linear storage (runtime/linear_intq.c) against the dense
 * weights dsq_intq_dequantize gives for the same codes: every bits x group x
 * sym x act-order combination, both compute paths, the scalar and the AVX2
 * decode kernels, 1 and 2 threads; also uneven act-order groups (odd group
 * starts in the nibble rows), an odd row length, and refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"
#include "quantizers/intq.h"
#include "kernels/cpu.h"
#include "runtime/linear.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x1a7e9b3c5d7f1234ull;

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

static float *randm(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = scale * dsq_test_randn(&g_seed);
    return x;
}

typedef enum { ORDER_PLAIN, ORDER_ACT, ORDER_UNEVEN } col_order;

/* GPTQ act-order: a random column permutation, groups cut along it
 * (g_idx[perm[i]] = i / group). UNEVEN: any group for any column, so group
 * runs have odd lengths and odd starts. */
static void set_g_idx(dsq_intq *q, col_order order)
{
    if (order == ORDER_PLAIN) return;
    q->g_idx = malloc((size_t)q->cols * sizeof *q->g_idx);
    assert_non_null(q->g_idx);
    if (order == ORDER_UNEVEN) {
        for (int64_t c = 0; c < q->cols; c++) q->g_idx[c] = (int32_t)(dsq_test_rand(&g_seed) % (uint64_t)q->n_groups);
        return;
    }
    int32_t *perm = malloc((size_t)q->cols * sizeof *perm);
    for (int64_t c = 0; c < q->cols; c++) perm[c] = (int32_t)c;
    for (int64_t c = q->cols - 1; c > 0; c--) {
        int64_t j = (int64_t)(dsq_test_rand(&g_seed) % (uint64_t)(c + 1));
        int32_t t = perm[c];
        perm[c] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < q->cols; i++) q->g_idx[perm[i]] = (int32_t)(i / q->group_size);
    free(perm);
}

/* Codes from RTN of random weights; act-order only changes which scale a
 * column uses, which is all the storage has to get right. */
static void make_intq(int bits, int group, bool sym, col_order order, int64_t rows, int64_t cols, dsq_intq *q)
{
    dsq_intq_params p = {.bits = bits, .group_size = group, .sym = sym, .rule = DSQ_INTQ_RULE_GPTQ, .clip = 0};
    float *w = randm((size_t)(rows * cols), 0.05f);
    expect_ok(dsq_intq_quantize(w, rows, cols, &p, NULL, q));
    free(w);
    set_g_idx(q, order);
}

/* y_ref (double) from the dense dequantized weights; bound: sum s (q + z) |x|,
 * the magnitude the per-group decode sums work at (float rounding scale). */
static void reference(const dsq_intq *q, const float *wd, const float *x, int ntok, double *ref, double *bound)
{
    for (int t = 0; t < ntok; t++)
        for (int64_t r = 0; r < q->rows; r++) {
            double s = 0, b = 0;
            for (int64_t c = 0; c < q->cols; c++) {
                int64_t g = r * q->n_groups + dsq_intq_group_of(q, c);
                double xv = x[(size_t)t * (size_t)q->cols + (size_t)c];
                s += (double)wd[r * q->cols + c] * xv;
                b += fabs((double)q->scales[g]) * (q->codes[r * q->cols + c] + q->zeros[g] + 1) * fabs(xv);
            }
            ref[t * q->rows + r] = s;
            bound[t * q->rows + r] = b;
        }
}

static void check(const float *y, const double *ref, const double *bound, size_t n, double rel, const char *what,
                  const char *combo)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(y[i] - ref[i]) <= rel * bound[i] + 1e-6))
            fail_msg("%s %s: y[%zu] = %.9g, want %.9g (bound %g)", combo, what, i, y[i], ref[i], bound[i]);
}

static void run_case(int bits, int group, bool sym, col_order order, int64_t rows, int64_t cols)
{
    enum { NTOK = 9 };
    char combo[96];
    snprintf(combo, sizeof combo, "%d-bit g%d %s order %d [%lld x %lld]", bits, group, sym ? "sym" : "asym",
             (int)order, (long long)rows, (long long)cols);
    dsq_intq q;
    make_intq(bits, group, sym, order, rows, cols, &q);
    float *wd = malloc((size_t)(rows * cols) * sizeof *wd), *x = randm((size_t)NTOK * (size_t)cols, 1);
    expect_ok(dsq_intq_dequantize(&q, wd));
    double *ref = malloc((size_t)NTOK * (size_t)rows * sizeof *ref), *bound = malloc((size_t)NTOK * (size_t)rows * sizeof *bound);
    reference(&q, wd, x, NTOK, ref, bound);

    dsq_linear W;
    expect_ok(dsq_linear_init_intq(&W, &q));
    assert_true(dsq_linear_is_intq(&W));
    assert_int_equal(dsq_linear_intq_bits(&W), bits);
    /* The batched path's tiles are the dequantized weights, bit for bit. */
    float *rowsf = malloc((size_t)(rows * cols) * sizeof *rowsf);
    expect_ok(dsq_linear_rows_f32(&W, 0, rows, rowsf));
    if (memcmp(rowsf, wd, (size_t)(rows * cols) * sizeof *wd)) fail_msg("%s: rows_f32 differs from dequantize", combo);

    float *y = malloc((size_t)NTOK * (size_t)rows * sizeof *y), *ys = malloc((size_t)rows * 3 * sizeof *ys);
    int nisa = dsq_cpu_has_avx2() ? 2 : 1;
    for (int threads = 1; threads <= 2; threads++) {
        dsq_cpu_set_threads(threads);
        for (int isa = 0; isa < nisa; isa++) {
            dsq_cpu_set_isa(isa ? DSQ_CPU_ISA_AVX2 : DSQ_CPU_ISA_SCALAR);
            /* The scalar reference sums in double: it must be tight; AVX2 sums in float. */
            double rel = isa ? 2e-6 : 2e-7;
            expect_ok(dsq_linear_forward_gemv(&W, x, y, 3));
            check(y, ref, bound, (size_t)rows * 3, rel, isa ? "gemv avx2" : "gemv scalar", combo);
            if (isa == 0) memcpy(ys, y, (size_t)rows * 3 * sizeof *ys);
            else
                for (int64_t i = 0; i < rows * 3; i++) /* SIMD vs scalar on the same inputs */
                    assert_true(fabs(y[i] - ys[i]) <= 2e-6 * bound[i] + 1e-6);
            expect_ok(dsq_linear_forward(&W, x, y, NTOK)); /* > GEMV_MAX_TOKENS: the GEMM path */
            check(y, ref, bound, (size_t)NTOK * (size_t)rows, 2e-6, "gemm", combo);
        }
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    dsq_cpu_set_threads(0);
    dsq_linear_release(&W);
    assert_null(W.priv);
    dsq_intq_free(&q);
    free(wd), free(x), free(ref), free(bound), free(rowsf), free(y), free(ys);
}

static void test_every_combination(void **state)
{
    (void)state;
    static const int bits[] = {2, 3, 4, 8}, groups[] = {32, 64, 128, -1};
    for (size_t b = 0; b < 4; b++)
        for (size_t g = 0; g < 4; g++)
            for (int sym = 0; sym < 2; sym++)
                for (int act = 0; act < 2; act++) {
                    if (act && groups[g] == -1) continue; /* one group: act-order changes nothing */
                    run_case(bits[b], groups[g], sym, act ? ORDER_ACT : ORDER_PLAIN, 37, 256);
                }
}

/* Group runs of odd length starting at odd positions (hostile or unusual
 * g_idx), and a row length that is odd and not a multiple of any SIMD step. */
static void test_uneven_groups_and_odd_rows(void **state)
{
    (void)state;
    static const int bits[] = {2, 3, 4, 8};
    for (size_t b = 0; b < 4; b++)
        for (int sym = 0; sym < 2; sym++) {
            run_case(bits[b], 32, sym, ORDER_UNEVEN, 19, 160);
            run_case(bits[b], -1, sym, ORDER_PLAIN, 21, 77);
        }
}

/* A bias is added on both paths; a broken intq is refused by name. */
static void test_bias_and_refusals(void **state)
{
    (void)state;
    dsq_intq q;
    make_intq(4, 32, false, ORDER_PLAIN, 16, 64, &q);
    float *x = randm(64 * 8, 1), y0[16 * 8], y1[16 * 8], bias[16];
    for (int i = 0; i < 16; i++) bias[i] = (float)i;
    dsq_linear W;
    expect_ok(dsq_linear_init_intq(&W, &q));
    expect_ok(dsq_linear_forward_gemv(&W, x, y0, 8));
    expect_ok(dsq_linear_set_bias(&W, DSQ_TYPE_F32, bias, 16));
    expect_ok(dsq_linear_forward_gemv(&W, x, y1, 8));
    for (int i = 0; i < 16 * 8; i++) assert_true(fabsf(y1[i] - y0[i] - (float)(i % 16)) < 1e-4f);
    expect_ok(dsq_linear_forward_gemm(&W, x, y1, 8));
    for (int i = 0; i < 16 * 8; i++) assert_true(fabsf(y1[i] - y0[i] - (float)(i % 16)) < 1e-4f);
    dsq_linear_release(&W);
    assert_false(dsq_linear_is_intq(&W));

    q.codes[5] = 16; /* beyond 4 bits */
    assert_int_equal(dsq_linear_init_intq(&W, &q), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "code 16"));
    q.codes[5] = 3;
    q.scales[2] = NAN;
    assert_int_not_equal(dsq_linear_init_intq(&W, &q), DSQ_OK);
    assert_null(W.priv);
    dsq_intq_free(&q);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_combination),
        cmocka_unit_test(test_uneven_groups_and_odd_rows),
        cmocka_unit_test(test_bias_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
