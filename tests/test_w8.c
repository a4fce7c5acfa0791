/* The 8-bit weight schemes (quantizers/w8.c) on hand-computed values: the
 * scale rules (INT8 amax / 127.5, FP8 amax / 448, eps for an all-zero tile),
 * round to nearest even at ties for both kinds, saturation at 127/-128 and
 * +-448, the activation rules (dynamic amax / 127 and / 448, static scales,
 * clamping, scale 1 for zeros), NaN/Inf weights named by tensor, row and
 * column, the block grid with partial edge tiles, validation, and the
 * dequantize round trip. */
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
#include "quantizers/w8.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

static void expect_msg(const char *needle)
{
    if (!strstr(dsq_errmsg(), needle)) fail_msg("message '%s' does not contain '%s'", dsq_errmsg(), needle);
}

static int8_t i8(const dsq_w8q *q, int64_t i) { return (int8_t)q->codes[i]; }

/* amax 127.5 gives scale 1 exactly, amax 255 scale 2: the codes are then plain roundings. */
static void test_int8_scale_and_rounding(void **state)
{
    const float w[2][8] = {
        {127.5f, -127.5f, 0.5f, 1.5f, 2.5f, -0.5f, 3.49f, -2.5f},
        {255.0f, -255.0f, 3.0f, 5.0f, 1.0f, -3.0f, 0.0f, 100.0f},
    };
    dsq_w8_scheme s = dsq_w8_scheme_w8a8(false);
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(&w[0][0], 2, 8, &s, "t", &q));
    assert_int_equal(q.n_scale_rows, 2);
    assert_int_equal(q.n_scale_cols, 1);
    assert_true(q.scales[0] == 1.0f);
    assert_true(q.scales[1] == 2.0f);
    /* 127.5 -> rint 128 -> 127; -127.5 -> -128 (even); 0.5 -> 0; 1.5 -> 2; 2.5 -> 2 */
    const int8_t want0[8] = {127, -128, 0, 2, 2, 0, 3, -2};
    /* /2: 127.5 -> 127; -127.5 -> -128; 1.5 -> 2; 2.5 -> 2; 0.5 -> 0; -1.5 -> -2; 0; 50 */
    const int8_t want1[8] = {127, -128, 2, 2, 0, -2, 0, 50};
    for (int c = 0; c < 8; c++) {
        assert_int_equal(i8(&q, c), want0[c]);
        assert_int_equal(i8(&q, 8 + c), want1[c]);
    }
    dsq_w8q_free(&q);
    /* per tensor: one scale for both rows, 255 / 127.5 */
    s.wgran = DSQ_W8_W_TENSOR;
    expect_ok(dsq_w8q_quantize(&w[0][0], 2, 8, &s, "t", &q));
    assert_int_equal(q.n_scale_rows * q.n_scale_cols, 1);
    assert_true(q.scales[0] == 2.0f);
    assert_int_equal(i8(&q, 0), 64); /* 63.75 */
    dsq_w8q_free(&q);
    /* an all-zero row gets torch.finfo(float32).eps */
    float z[4] = {0, 0, 0, 0};
    s.wgran = DSQ_W8_W_CHANNEL;
    expect_ok(dsq_w8q_quantize(z, 1, 4, &s, "t", &q));
    assert_true(q.scales[0] == FLT_EPSILON);
    assert_int_equal(i8(&q, 0), 0);
    dsq_w8q_free(&q);
}

/* E4M3 codes: sign, 4 exponent bits (bias 7), 3 mantissa bits. */
static void test_fp8_scale_rounding_saturation(void **state)
{
    /* amax 448 -> scale 1. 1.0625 is halfway between 1 (0x38) and 1.125
     * (0x39): even mantissa 1.0. 1.1875 between 1.125 and 1.25 (0x3a): 1.25.
     * 2^-9 is the smallest subnormal (0x01); 2^-10 ties with 0: 0. */
    const float w[8] = {448.0f, -448.0f, 1.0625f, 1.1875f, 0x1p-9f, 0x1p-10f, -1.0f, 0.0f};
    const uint8_t want[8] = {0x7e, 0xfe, 0x38, 0x3a, 0x01, 0x00, 0xb8, 0x00};
    dsq_w8_scheme s = dsq_w8_scheme_fp8_static();
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(w, 1, 8, &s, "t", &q));
    assert_true(q.scales[0] == 1.0f);
    for (int c = 0; c < 8; c++)
        if (q.codes[c] != want[c]) fail_msg("w %g: code 0x%02x, want 0x%02x", (double)w[c], q.codes[c], want[c]);
    dsq_w8q_free(&q);
    /* amax 896 -> scale 2 */
    const float w2[2] = {896.0f, 3.0f};
    expect_ok(dsq_w8q_quantize(w2, 1, 2, &s, "t", &q));
    assert_true(q.scales[0] == 2.0f);
    assert_int_equal(q.codes[0], 0x7e);
    assert_int_equal(q.codes[1], 0x3c); /* 1.5 */
    dsq_w8q_free(&q);
    /* the encoder saturates at +-448 instead of overflowing to NaN */
    assert_int_equal(dsq_w8_encode(DSQ_W8_FP8, 1000.0f, 1.0f), 0x7e);
    assert_int_equal(dsq_w8_encode(DSQ_W8_FP8, -1e30f, 1.0f), 0xfe);
    assert_int_equal(dsq_w8_encode(DSQ_W8_FP8, 464.0f, 1.0f), 0x7e); /* halfway to 480, which E4M3FN lacks */
    assert_int_equal(dsq_w8_encode(DSQ_W8_INT8, 1000.0f, 1.0f), 127);
    assert_int_equal((int8_t)dsq_w8_encode(DSQ_W8_INT8, -1000.0f, 1.0f), -128);
    assert_true(dsq_w8_code_value(DSQ_W8_FP8, 0x7e) == 448.0f);
    assert_true(dsq_w8_code_value(DSQ_W8_FP8, 0x01) == 0x1p-9f);
    assert_true(isnan(dsq_w8_code_value(DSQ_W8_FP8, 0x7f)));
    assert_true(dsq_w8_code_value(DSQ_W8_INT8, 0x80) == -128.0f);
}

static void test_activation_rules(void **state)
{
    uint8_t c[6];
    /* INT8 dynamic: amax 127 -> scale 1; -63.5 -> -64 (even) */
    const float x[4] = {127.0f, -63.5f, 0.5f, 1.5f};
    assert_true(dsq_w8_act_quantize(DSQ_W8_INT8, x, 4, 0, c) == 1.0f);
    assert_int_equal((int8_t)c[0], 127);
    assert_int_equal((int8_t)c[1], -64);
    assert_int_equal((int8_t)c[2], 0);
    assert_int_equal((int8_t)c[3], 2);
    /* static 0.5: 100 / 0.5 = 200 clamps to 127, -200 to -128 */
    const float xs[2] = {100.0f, -100.0f};
    assert_true(dsq_w8_act_quantize(DSQ_W8_INT8, xs, 2, 0.5f, c) == 0.5f);
    assert_int_equal((int8_t)c[0], 127);
    assert_int_equal((int8_t)c[1], -128);
    /* FP8 dynamic: amax 896 -> 2; static 1 saturates at 448 */
    const float xf[3] = {896.0f, -2.0f, 0.25f};
    assert_true(dsq_w8_act_quantize(DSQ_W8_FP8, xf, 3, 0, c) == 2.0f);
    assert_int_equal(c[0], 0x7e);
    assert_int_equal(c[1], 0xb8); /* -1 */
    assert_int_equal(c[2], 0x20); /* 0.125 = 2^-3: exponent field 4 */
    assert_true(dsq_w8_act_quantize(DSQ_W8_FP8, xf, 1, 1.0f, c) == 1.0f);
    assert_int_equal(c[0], 0x7e);
    /* all zero: scale 1, codes 0 */
    const float z[3] = {0, -0.0f, 0};
    assert_true(dsq_w8_act_quantize(DSQ_W8_INT8, z, 3, 0, c) == 1.0f);
    assert_true(dsq_w8_act_quantize(DSQ_W8_FP8, z, 3, 0, c) == 1.0f);
    assert_int_equal(c[0], 0);
    /* calibration scales: max / 127.5 and max / 448, eps for 0 */
    assert_true(dsq_w8_static_scale(DSQ_W8_INT8, 255.0f) == 2.0f);
    assert_true(dsq_w8_static_scale(DSQ_W8_FP8, 896.0f) == 2.0f);
    assert_true(dsq_w8_static_scale(DSQ_W8_FP8, 0.0f) == FLT_EPSILON);
}

static void test_nonfinite_weights_named(void **state)
{
    float w[3 * 5];
    for (int i = 0; i < 15; i++) w[i] = 0.1f * (float)i;
    w[1 * 5 + 2] = NAN;
    dsq_w8_scheme s = dsq_w8_scheme_fp8_dynamic();
    dsq_w8q q;
    assert_int_not_equal(dsq_w8q_quantize(w, 3, 5, &s, "model.layers.0.mlp.up_proj", &q), DSQ_OK);
    expect_msg("model.layers.0.mlp.up_proj: weight [1, 2] is NaN");
    assert_null(q.codes);
    w[1 * 5 + 2] = 0;
    w[2 * 5 + 4] = -INFINITY;
    s = dsq_w8_scheme_w8a8(false);
    assert_int_not_equal(dsq_w8q_quantize(w, 3, 5, &s, "x.weight", &q), DSQ_OK);
    expect_msg("x.weight: weight [2, 4] is Inf");
}

/* 200 x 300 with 128 x 128 blocks: 2 x 3 scales, the edge tiles 72 rows or 44 columns wide. */
static void test_block_grid(void **state)
{
    int64_t R = 200, C = 300;
    float *w = malloc((size_t)(R * C) * sizeof *w);
    for (int64_t i = 0; i < R * C; i++) w[i] = 1.0f;
    w[150 * C + 290] = -896.0f; /* tile (1, 2): the corner tile */
    w[10 * C + 200] = 44.8f;    /* tile (0, 1) */
    dsq_w8_scheme s = dsq_w8_scheme_fp8_block();
    int64_t sr, sc;
    dsq_w8_scale_grid(&s, R, C, &sr, &sc);
    assert_int_equal(sr, 2);
    assert_int_equal(sc, 3);
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(w, R, C, &s, "blk", &q));
    assert_int_equal(q.n_scale_rows, 2);
    assert_int_equal(q.n_scale_cols, 3);
    assert_true(q.scales[0] == 1.0f / 448.0f);  /* tile (0, 0): all ones */
    assert_true(q.scales[1] == 44.8f / 448.0f); /* (0, 1) holds 44.8 */
    assert_true(q.scales[5] == 2.0f);           /* (1, 2): 896 / 448 */
    assert_true(q.scales[4] == 1.0f / 448.0f);  /* (1, 1): rows 128..199 only */
    assert_true(dsq_w8q_scale_at(&q, 199, 299) == 2.0f);
    assert_true(dsq_w8q_scale_at(&q, 127, 299) == q.scales[2]);
    assert_int_equal(q.codes[150 * C + 290], 0xfe); /* -448 */
    assert_int_equal(q.codes[128 * C + 256], 0x30); /* 1 / 2 = 0.5: exponent 6 */
    float *d = malloc((size_t)(R * C) * sizeof *d);
    expect_ok(dsq_w8q_dequantize(&q, d));
    assert_true(d[150 * C + 290] == -896.0f);
    assert_true(d[128 * C + 256] == 1.0f);
    free(d);
    dsq_w8q_free(&q);
    free(w);
}

static void expect_invalid(const dsq_w8q *q, const char *needle)
{
    assert_int_not_equal(dsq_w8q_validate(q, "v.weight"), DSQ_OK);
    expect_msg("v.weight");
    expect_msg(needle);
}

static void test_validate(void **state)
{
    float w[4 * 6];
    for (int i = 0; i < 24; i++) w[i] = (float)(i % 7) - 3.0f;
    dsq_w8_scheme s = dsq_w8_scheme_fp8_static();
    dsq_w8q q;
    expect_ok(dsq_w8q_quantize(w, 4, 6, &s, "v", &q));
    expect_invalid(&q, "static activation scale"); /* the quantizer leaves it to the caller */
    q.act_scale = 0.25f;
    expect_ok(dsq_w8q_validate(&q, "v.weight"));
    q.codes[7] = 0xff;
    expect_invalid(&q, "weight [1, 1] is an FP8 NaN");
    q.codes[7] = 0x38;
    q.scales[0] = 0;
    expect_invalid(&q, "scale 0 is 0");
    q.scales[0] = INFINITY;
    expect_invalid(&q, "must be finite and positive");
    q.scales[0] = 1;
    q.n_scale_rows = 4;
    expect_invalid(&q, "scale grid 4 x 1, expected 1 x 1");
    q.n_scale_rows = 1;
    q.act_scale = NAN;
    expect_invalid(&q, "static activation scale");
    dsq_w8q_free(&q);
    /* INT8 codes may be any byte: 0x7f is 127 there */
    dsq_w8_scheme si = dsq_w8_scheme_w8a8(false);
    expect_ok(dsq_w8q_quantize(w, 4, 6, &si, "v", &q));
    q.codes[0] = 0x7f;
    expect_ok(dsq_w8q_validate(&q, "v.weight"));
    dsq_w8q_free(&q);
    /* a block scheme with a zero block size, and a bad activation group */
    dsq_w8_scheme b = dsq_w8_scheme_fp8_block();
    b.block_cols = 0;
    assert_int_not_equal(dsq_w8_scheme_check(&b), DSQ_OK);
    b = dsq_w8_scheme_fp8_block();
    b.act_group = -1;
    assert_int_not_equal(dsq_w8_scheme_check(&b), DSQ_OK);
    char d[96];
    dsq_w8_scheme_describe(&(dsq_w8_scheme){DSQ_W8_FP8, DSQ_W8_W_BLOCK, 128, 128, DSQ_W8_ACT_GROUP, 128}, d, sizeof d);
    assert_string_equal(d, "fp8 block 128x128, act per-token-group dynamic 128");
}

/* dequantize(quantize(w)) is within half a step (INT8) or 1/16 relative plus
 * the subnormal step (FP8) of w, for every granularity. */
static void test_round_trip(void **state)
{
    uint64_t seed = 77;
    int64_t R = 37, C = 150;
    float *w = malloc((size_t)(R * C) * sizeof *w), *d = malloc((size_t)(R * C) * sizeof *d);
    for (int64_t i = 0; i < R * C; i++) w[i] = dsq_test_randn(&seed) * (1.0f + (float)(i % C) / 10.0f);
    dsq_w8_scheme schemes[4] = {dsq_w8_scheme_w8a8(false), dsq_w8_scheme_fp8_dynamic(), dsq_w8_scheme_fp8_static(),
                                dsq_w8_scheme_fp8_block()};
    schemes[3].block_rows = 16, schemes[3].block_cols = 64;
    dsq_w8_scheme tensor_int = dsq_w8_scheme_w8a8(false);
    tensor_int.wgran = DSQ_W8_W_TENSOR;
    for (int k = 0; k < 5; k++) {
        const dsq_w8_scheme *s = k < 4 ? &schemes[k] : &tensor_int;
        dsq_w8q q;
        expect_ok(dsq_w8q_quantize(w, R, C, s, "rt", &q));
        expect_ok(dsq_w8q_dequantize(&q, d));
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                float sc = dsq_w8q_scale_at(&q, r, c), e = fabsf(d[r * C + c] - w[r * C + c]);
                float lim = s->kind == DSQ_W8_INT8 ? 0.5f * sc * 1.0001f : fabsf(w[r * C + c]) / 16.0f + sc * 0x1p-10f;
                if (e > lim)
                    fail_msg("scheme %d: [%lld, %lld] %g -> %g", k, (long long)r, (long long)c, (double)w[r * C + c],
                             (double)d[r * C + c]);
            }
        if (s->act == DSQ_W8_ACT_TENSOR) q.act_scale = dsq_w8_static_scale(s->kind, 10.0f);
        expect_ok(dsq_w8q_validate(&q, "rt"));
        dsq_w8q_free(&q);
    }
    free(w), free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int8_scale_and_rounding),
        cmocka_unit_test(test_fp8_scale_rounding_saturation),
        cmocka_unit_test(test_activation_rules),
        cmocka_unit_test(test_nonfinite_weights_named),
        cmocka_unit_test(test_block_grid),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_round_trip),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
