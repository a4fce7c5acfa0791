/* The 8-bit linear storage (runtime/linear_w8.c) against a reference computed
 * here from the codes and scales: every scheme (INT8 W8A8 dynamic and static,
 * INT8 weight-only, INT8 block + token, FP8 dynamic, static, block and
 * weight-only), both compute paths and the BF16 one, token counts on both
 * sides of the decode threshold, bias, the scalar and SIMD INT8 kernels and 1
 * and 2 threads; rows_f32 against dsq_w8q_dequantize; refusals.
 *
 * The reference quantizes the activations with its own code (the rule of
 * quantizers/w8.h: INT8 rint + clamp, FP8 through core's e4m3 encoder after
 * clamping to +-448), so a mistake in the storage's activation handling shows.
 * For the INT8 product the storage must match the exact int64 sum followed by
 * the epilogue s_x * (s_w * acc) bit for bit; for the float schemes it must
 * match the double-precision sum of dequantized terms to F32 accuracy. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x5eed0008c0deull;

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

/* The activation rule, written out again: codes' values (no scale) into v, scale returned. */
static float ref_act(dsq_w8_kind k, const float *x, int64_t n, float static_scale, float *v)
{
    float s = static_scale;
    if (!(s > 0)) {
        float amax = 0;
        for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
        s = amax / (k == DSQ_W8_INT8 ? 127.0f : 448.0f);
        if (s == 0) s = 1;
    }
    for (int64_t i = 0; i < n; i++) {
        float r = x[i] / s;
        if (k == DSQ_W8_INT8) {
            r = rintf(r);
            v[i] = r < -128 ? -128 : r > 127 ? 127 : r;
        } else {
            r = r < -448 ? -448 : r > 448 ? 448 : r;
            v[i] = dsq_e4m3_to_f32(dsq_f32_to_e4m3(r));
        }
    }
    return s;
}

static float code_val(dsq_w8_kind k, uint8_t c) { return k == DSQ_W8_INT8 ? (float)(int8_t)c : dsq_e4m3_to_f32(c); }

typedef struct ref_out {
    double *y;   /* [n_tok x out] */
    double *mag; /* sum of |terms|, for the tolerance */
    bool exact;  /* y holds the INT8 epilogue's float results */
} ref_out;

/* Reference y for tokens x under q (bias added when given). */
static ref_out reference(const dsq_w8q *q, const float *x, int n_tok, const float *bias)
{
    const dsq_w8_scheme *sc = &q->sch;
    int64_t in = q->cols, out = q->rows;
    ref_out R = {calloc((size_t)n_tok * out, sizeof(double)), calloc((size_t)n_tok * out, sizeof(double)), false};
    float *xv = malloc((size_t)in * sizeof *xv), *xs = malloc((size_t)in * sizeof *xs);
    assert_true(R.y && R.mag && xv && xs);
    R.exact = sc->kind == DSQ_W8_INT8 && sc->wgran != DSQ_W8_W_BLOCK &&
              (sc->act == DSQ_W8_ACT_TOKEN || sc->act == DSQ_W8_ACT_TENSOR);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * in;
        int64_t span = sc->act == DSQ_W8_ACT_GROUP ? sc->act_group : in;
        for (int64_t c = 0; c < in; c += span) {
            int64_t n = in - c < span ? in - c : span;
            if (sc->act == DSQ_W8_ACT_NONE) {
                memcpy(xv + c, xt + c, (size_t)n * sizeof *xv);
                for (int64_t i = 0; i < n; i++) xs[c + i] = 1;
                continue;
            }
            float s = ref_act(sc->kind, xt + c, n, sc->act == DSQ_W8_ACT_TENSOR ? q->act_scale : 0, xv + c);
            for (int64_t i = 0; i < n; i++) xs[c + i] = s;
        }
        for (int64_t r = 0; r < out; r++) {
            double y = 0, mag = 0;
            int64_t acc = 0;
            for (int64_t c = 0; c < in; c++) {
                uint8_t code = q->codes[r * in + c];
                if (R.exact) acc += (int64_t)xv[c] * (int8_t)code;
                double term = (double)xv[c] * xs[c] * (double)code_val(sc->kind, code) * dsq_w8q_scale_at(q, r, c);
                y += term;
                mag += fabs(term);
            }
            if (R.exact) y = xs[0] * (dsq_w8q_scale_at(q, r, 0) * (float)acc);
            R.y[(size_t)t * out + r] = bias ? (R.exact ? (double)((float)y + bias[r]) : y + bias[r]) : y;
            R.mag[(size_t)t * out + r] = mag + (bias ? fabs(bias[r]) : 0);
        }
    }
    free(xv), free(xs);
    return R;
}

static void check_against(const ref_out *R, const float *y, int n_tok, int64_t out, const char *what, double tol)
{
    for (int64_t i = 0; i < (int64_t)n_tok * out; i++) {
        double err = fabs((double)y[i] - R->y[i]);
        bool ok = R->exact ? (float)R->y[i] == y[i] : err <= tol * R->mag[i] + 1e-30;
        if (!ok)
            fail_msg("%s: y[%lld] = %.9g, reference %.9g (|terms| %.3g)", what, (long long)i, (double)y[i], R->y[i],
                     R->mag[i]);
    }
}

typedef struct scheme_case {
    const char *name;
    dsq_w8_scheme sch;
} scheme_case;

static scheme_case cases[9];

static void make_cases(void)
{
    dsq_w8_scheme int_wonly = dsq_w8_scheme_w8a8(false), int_block = dsq_w8_scheme_w8a8(false),
                  fp8_tensor_token = dsq_w8_scheme_fp8_dynamic();
    int_wonly.act = DSQ_W8_ACT_NONE;
    int_block.wgran = DSQ_W8_W_BLOCK, int_block.block_rows = 16, int_block.block_cols = 32;
    fp8_tensor_token.wgran = DSQ_W8_W_TENSOR;
    dsq_w8_scheme fp8_block_small = dsq_w8_scheme_fp8_block();
    fp8_block_small.block_rows = fp8_block_small.block_cols = fp8_block_small.act_group = 32;
    scheme_case c[9] = {
        {"w8a8 dynamic", dsq_w8_scheme_w8a8(false)},
        {"w8a8 static", dsq_w8_scheme_w8a8(true)},
        {"int8 weight-only", int_wonly},
        {"int8 block 16x32 + token", int_block},
        {"fp8 dynamic", dsq_w8_scheme_fp8_dynamic()},
        {"fp8 static", dsq_w8_scheme_fp8_static()},
        {"fp8 block 32", fp8_block_small},
        {"fp8 weight-only", dsq_w8_scheme_fp8_weight_only()},
        {"fp8 tensor + token", fp8_tensor_token},
    };
    memcpy(cases, c, sizeof c);
}

/* A quantized [out x in] weight under sch; the static scale from 0.7 of the
 * inputs' max |x|, so that some activations clamp. */
static dsq_w8q make_weight(const dsq_w8_scheme *sch, int64_t out, int64_t in, const float *x, int n_tok)
{
    float *w = randm((size_t)(out * in), 0.05f);
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(w, out, in, sch, "test.weight", &q));
    free(w);
    if (sch->act == DSQ_W8_ACT_TENSOR) {
        float amax = 0;
        for (int64_t i = 0; i < (int64_t)n_tok * in; i++) amax = fmaxf(amax, fabsf(x[i]));
        q.act_scale = dsq_w8_static_scale(sch->kind, 0.7f * amax);
    }
    return q;
}

static void run_scheme(const scheme_case *sc, int64_t out, int64_t in)
{
    static const int toks[] = {1, 3, 7, 8, 19};
    int max_tok = 19;
    float *x = randm((size_t)max_tok * in, 1.0f);
    for (int64_t c = 0; c < in; c += 37) x[c] *= 20.0f; /* outlier channels, as SmoothQuant sees */
    float *bias = randm((size_t)out, 0.1f);
    dsq_w8q q = make_weight(&sc->sch, out, in, x, max_tok);
    dsq_linear W;
    expect_ok(dsq_linear_init_w8(&W, &q));
    assert_true(dsq_linear_is_w8(&W));
    assert_int_equal(W.kind, DSQ_LINEAR_W8);
    assert_int_equal(dsq_linear_w8_scheme(&W)->act, sc->sch.act);
    float *y = malloc((size_t)max_tok * out * sizeof *y);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        if (with_bias) expect_ok(dsq_linear_set_bias(&W, DSQ_TYPE_F32, bias, out));
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            int nt = toks[ti];
            ref_out R = reference(&q, x, nt, with_bias ? bias : NULL);
            char what[160];
            for (int pth = 0; pth < 4; pth++) {
                memset(y, 0xff, (size_t)nt * out * sizeof *y);
                if (pth == 0) expect_ok(dsq_linear_forward_gemm(&W, x, y, nt));
                if (pth == 1) expect_ok(dsq_linear_forward_gemv(&W, x, y, nt));
                if (pth == 2) expect_ok(dsq_linear_forward(&W, x, y, nt));
                if (pth == 3) expect_ok(dsq_linear_forward_bf16(&W, x, y, nt));
                snprintf(what, sizeof what, "%s %lldx%lld, %d tokens, %s%s", sc->name, (long long)out, (long long)in,
                         nt, (const char *[]){"gemm", "gemv", "forward", "bf16"}[pth], with_bias ? ", bias" : "");
                /* BF16 rounds x and W: only the INT8 product, which ignores it, is held exact there */
                double tol = pth == 3 ? 2e-2 : 2e-6;
                if (pth == 3 && !R.exact) {
                    for (int64_t i = 0; i < (int64_t)nt * out; i++)
                        if (fabs(y[i] - R.y[i]) > tol * R.mag[i] + 1e-6) fail_msg("%s: y[%lld]", what, (long long)i);
                } else {
                    check_against(&R, y, nt, out, what, tol);
                }
            }
            free(R.y), free(R.mag);
        }
    }
    /* rows_f32 is exactly dsq_w8q_dequantize */
    float *wd = malloc((size_t)(out * in) * sizeof *wd), *wr = malloc((size_t)(out * in) * sizeof *wr);
    expect_ok(dsq_w8q_dequantize(&q, wd));
    expect_ok(dsq_linear_rows_f32(&W, 0, out, wr));
    assert_memory_equal(wd, wr, (size_t)(out * in) * sizeof *wd);
    expect_ok(dsq_linear_rows_f32(&W, 3, 2, wr));
    assert_memory_equal(wd + 3 * in, wr, (size_t)(2 * in) * sizeof *wd);
    free(wd), free(wr);
    dsq_linear_release(&W);
    dsq_w8q_free(&q);
    free(x), free(y), free(bias);
}

static void test_every_scheme(void **state)
{
    make_cases();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_scheme(&cases[i], 45, 100); /* odd sizes: partial blocks, SIMD tails */
        run_scheme(&cases[i], 70, 160);
    }
}

/* The INT8 product: every ISA setting and thread count gives the same bits. */
static void test_int_path_isa_threads(void **state)
{
    dsq_w8_scheme sch = dsq_w8_scheme_w8a8(false);
    int64_t out = 67, in = 301;
    int nt = 11;
    float *x = randm((size_t)nt * in, 1.0f);
    dsq_w8q q = make_weight(&sch, out, in, x, nt);
    dsq_linear W;
    expect_ok(dsq_linear_init_w8(&W, &q));
    float *y0 = malloc((size_t)nt * out * sizeof *y0), *y1 = malloc((size_t)nt * out * sizeof *y1);
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    dsq_cpu_set_threads(1);
    expect_ok(dsq_linear_forward(&W, x, y0, nt));
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (int th = 1; th <= 2; th++) {
        dsq_cpu_set_threads(th);
        expect_ok(dsq_linear_forward(&W, x, y1, nt));
        assert_memory_equal(y0, y1, (size_t)nt * out * sizeof *y0);
        expect_ok(dsq_linear_forward_gemv(&W, x, y1, nt));
        assert_memory_equal(y0, y1, (size_t)nt * out * sizeof *y0);
    }
    dsq_cpu_set_threads(0);
    dsq_linear_release(&W);
    dsq_w8q_free(&q);
    free(x), free(y0), free(y1);
}

static void expect_refused(const dsq_w8q *q, const char *needle)
{
    dsq_linear W;
    dsq_status s = dsq_linear_init_w8(&W, q);
    assert_int_not_equal(s, DSQ_OK);
    if (!strstr(dsq_errmsg(), needle)) fail_msg("message '%s' does not name '%s'", dsq_errmsg(), needle);
    assert_false(dsq_linear_is_w8(&W));
}

static void test_refusals(void **state)
{
    dsq_w8_scheme sch = dsq_w8_scheme_fp8_static();
    float *w = randm(8 * 12, 1.0f);
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(w, 8, 12, &sch, "t", &q));
    expect_refused(&q, "static activation scale"); /* act_scale left 0 */
    q.act_scale = 0.5f;
    q.codes[13] = 0x7f;
    expect_refused(&q, "FP8 NaN");
    q.codes[13] = 0;
    q.scales[0] = NAN;
    expect_refused(&q, "scale 0");
    q.scales[0] = 1;
    q.n_scale_rows = 2;
    expect_refused(&q, "scale grid");
    q.n_scale_rows = 1;
    dsq_linear W;
    expect_ok(dsq_linear_init_w8(&W, &q));
    assert_int_not_equal(dsq_linear_set_bias(&W, DSQ_TYPE_F32, w, 7), DSQ_OK); /* 8 outputs */
    float dst[12];
    assert_int_not_equal(dsq_linear_rows_f32(&W, 7, 2, dst), DSQ_OK);
    dsq_linear_release(&W);
    dsq_linear D;
    expect_ok(dsq_linear_init(&D, DSQ_TYPE_F32, w, 8, 12));
    assert_false(dsq_linear_is_w8(&D));
    assert_null(dsq_linear_w8_scheme(&D));
    dsq_linear_release(&D);
    dsq_w8q_free(&q);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_scheme),
        cmocka_unit_test(test_int_path_isa_threads),
        cmocka_unit_test(test_refusals),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
