/* INTn group quantization core (quantizers/intq.h).
 *
 * - hand-worked groups: scale, zero and codes of both rules (AWQ's
 *   pseudo_quantize_tensor, GPTQ's find_params), half-to-even rounding, the
 *   clamped AWQ zero, GPTQ's symmetric all-positive quirk, 2/3/8 bits.
 * - errors: a group size that does not divide the width names the width and
 *   the sizes that do; unsupported bits/group sizes; NaN names the row.
 * - round trip over every bits x group x sym x rule: codes and zeros in range,
 *   |w - deq| within one step.
 * - clipping (AWQ clamp and GPTQ shrink), per-group clip ratios, g_idx in
 *   dequantization, and validation of foreign codes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"
#include "quantizers/intq.h"
#include "tests/helpers/testutil.h"

static dsq_intq_params P(int bits, int gs, bool sym, dsq_intq_rule rule)
{
    dsq_intq_params p = {bits, gs, sym, rule, 1.0f, DSQ_INTQ_GRID_MINMAX};
    return p;
}

/* A 32-wide group holding the listed values, the rest filled with `fill`. */
static void group_of(float *g, const float *vals, int n, float fill)
{
    for (int i = 0; i < 32; i++) g[i] = i < n ? vals[i] : fill;
}

static void test_awq_asym_hand(void **state)
{
    (void)state;
    /* min -1.5, max 6: s = 7.5/15 = 0.5, z = -round(-3) = 3. 0.25/s = 0.5 -> 0
     * and 1.25/s = 2.5 -> 2 (half to even), 0.75/s = 1.5 -> 2. */
    const float v[] = {-1.5f, 6.0f, 0.25f, 0.75f, 1.25f, 0.0f, -0.2f};
    float g[32];
    group_of(g, v, 7, 0.0f);
    dsq_intq_params p = P(4, 32, false, DSQ_INTQ_RULE_AWQ);
    dsq_intq q;
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 0.5f);
    assert_int_equal(q.zeros[0], 3);
    const int want[] = {0, 15, 3, 5, 5, 3, 3};
    for (int i = 0; i < 7; i++) assert_int_equal(q.codes[i], want[i]);
    float deq[32];
    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
    assert_true(deq[0] == -1.5f && deq[1] == 6.0f && deq[3] == 1.0f && deq[4] == 1.0f);
    dsq_intq_free(&q);

    /* GPTQ's rule gives the same here: min < 0 < max. */
    p.rule = DSQ_INTQ_RULE_GPTQ;
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 0.5f);
    assert_int_equal(q.zeros[0], 3);
    for (int i = 0; i < 7; i++) assert_int_equal(q.codes[i], want[i]);
    dsq_intq_free(&q);
}

static void test_all_positive_group(void **state)
{
    (void)state;
    /* Values in [1, 2]. AWQ asym: raw min 1 -> z = clamp(-15, 0, 15) = 0 and
     * s = 1/15, so 1.0 -> round(15) = 15 and everything saturates at 15.
     * GPTQ asym: range widened to [0, 2], s = 2/15, z = 0; 1.0 / s is 7.4999995
     * in float32 (as in torch), so it rounds to 7. */
    float g[32];
    for (int i = 0; i < 32; i++) g[i] = 1.0f + (float)i / 31.0f;
    dsq_intq q;
    dsq_intq_params p = P(4, 32, false, DSQ_INTQ_RULE_AWQ);
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_int_equal(q.zeros[0], 0);
    assert_true(q.scales[0] == 1.0f / 15.0f);
    for (int i = 0; i < 32; i++) assert_int_equal(q.codes[i], 15);
    dsq_intq_free(&q);

    p.rule = DSQ_INTQ_RULE_GPTQ;
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_int_equal(q.zeros[0], 0);
    assert_true(q.scales[0] == 2.0f / 15.0f);
    assert_int_equal(q.codes[0], 7);
    assert_int_equal(q.codes[31], 15);
    dsq_intq_free(&q);

    /* GPTQ sym keeps xmin = 0 for a group without negatives: s = 2/15 and
     * z = 8, so 2.0 -> 15 + 8 clamps to 15 and dequantizes to 7 * 2/15. */
    p.sym = true;
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_int_equal(q.zeros[0], 8);
    assert_true(q.scales[0] == 2.0f / 15.0f);
    assert_int_equal(q.codes[31], 15);
    float deq[32];
    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
    assert_true(deq[31] == 7.0f * (2.0f / 15.0f));
    dsq_intq_free(&q);

    /* AWQ sym: s = 2/7, z = 8; 2.0 -> 7 + 8 = 15 exactly representable. */
    p.rule = DSQ_INTQ_RULE_AWQ;
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_int_equal(q.zeros[0], 8);
    assert_true(q.scales[0] == 2.0f / 7.0f);
    assert_int_equal(q.codes[31], 15);
    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
    assert_true(deq[31] == 2.0f);
    dsq_intq_free(&q);
}

static void test_other_bits_hand(void **state)
{
    (void)state;
    float g[32];
    const float v[] = {-1.0f, 2.0f, 0.4f};
    group_of(g, v, 3, 0.0f);
    dsq_intq q;
    /* 2-bit GPTQ asym: s = 3/3 = 1, z = 1; 0.4 -> 0 + 1. */
    dsq_intq_params p = P(2, 32, false, DSQ_INTQ_RULE_GPTQ);
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 1.0f);
    assert_int_equal(q.zeros[0], 1);
    assert_int_equal(q.codes[0], 0);
    assert_int_equal(q.codes[1], 3);
    assert_int_equal(q.codes[2], 1);
    dsq_intq_free(&q);
    /* 3-bit GPTQ sym: xmax = 2, xmin = -2, s = 4/7, z = 4; 2 -> 3.5 -> 4 (even) + 4 = 8 -> 7. */
    p = P(3, 32, true, DSQ_INTQ_RULE_GPTQ);
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 4.0f / 7.0f);
    assert_int_equal(q.zeros[0], 4);
    assert_int_equal(q.codes[1], 7);
    assert_int_equal(q.codes[0], 2); /* -1.75 -> -2 + 4 */
    dsq_intq_free(&q);
    /* 8-bit AWQ sym: s = 2/127, z = 128; -1 -> round(-63.5) = -64 -> 64. */
    p = P(8, 32, true, DSQ_INTQ_RULE_AWQ);
    assert_int_equal(dsq_intq_quantize(g, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 2.0f / 127.0f);
    assert_int_equal(q.zeros[0], 128);
    assert_int_equal(q.codes[0], 64);
    assert_int_equal(q.codes[1], 255);
    dsq_intq_free(&q);
    /* An all-zero group: GPTQ widens to [-1, 1] (z = round(1 / (2/15)) = 7 in
     * float32, where 7.5 comes out as 7.4999995); AWQ's scale floor 1e-5. */
    float zero[32] = {0};
    p = P(4, 32, false, DSQ_INTQ_RULE_GPTQ);
    assert_int_equal(dsq_intq_quantize(zero, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 2.0f / 15.0f);
    assert_int_equal(q.zeros[0], 7);
    dsq_intq_free(&q);
    p.rule = DSQ_INTQ_RULE_AWQ;
    assert_int_equal(dsq_intq_quantize(zero, 1, 32, &p, NULL, &q), DSQ_OK);
    assert_true(q.scales[0] == 1e-5f / 15.0f);
    assert_int_equal(q.zeros[0], 0);
    dsq_intq_free(&q);
}

static void test_errors(void **state)
{
    (void)state;
    float w[400] = {0};
    dsq_intq q;
    dsq_intq_params p = P(4, 128, false, DSQ_INTQ_RULE_AWQ);
    assert_int_equal(dsq_intq_quantize(w, 2, 200, &p, NULL, &q), DSQ_ERR_ARG);
    const char *m = dsq_errmsg();
    assert_non_null(strstr(m, "200"));
    assert_non_null(strstr(m, "128"));
    assert_non_null(strstr(m, "-1"));
    assert_null(strstr(m, "32,")); /* 32 does not divide 200 either */
    assert_null(q.codes);
    p.group_size = 64;
    assert_int_equal(dsq_intq_check(&p, 96), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "32, -1"));
    p.group_size = 48;
    assert_int_equal(dsq_intq_check(&p, 96), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "not supported"));
    p.group_size = 32;
    p.bits = 5;
    assert_int_equal(dsq_intq_check(&p, 96), DSQ_ERR_ARG);
    p.bits = 4;
    p.clip = 1.5f;
    assert_int_equal(dsq_intq_check(&p, 96), DSQ_ERR_ARG);
    p.clip = 1.0f;
    w[32 * 3 + 40] = NAN; /* row 1 of a [3 x 96] weight, column 40 -> group 1 */
    assert_int_equal(dsq_intq_quantize(w, 3, 96, &p, NULL, &q), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "row 1, group 1"));
    assert_null(q.codes);
}

static void test_round_trip_all(void **state)
{
    (void)state;
    const int rows = 5, cols = 256;
    float *w = malloc(sizeof(float) * rows * cols), *deq = malloc(sizeof(float) * rows * cols);
    uint64_t seed = 7;
    for (int i = 0; i < rows * cols; i++) w[i] = dsq_test_randn(&seed) * (i % 7 == 0 ? 3.0f : 0.5f) + 0.1f;
    const int bits[] = {2, 3, 4, 8}, gss[] = {32, 64, 128, -1};
    for (int b = 0; b < 4; b++)
        for (int g = 0; g < 4; g++)
            for (int sym = 0; sym < 2; sym++)
                for (int rule = 0; rule < 2; rule++) {
                    dsq_intq_params p = P(bits[b], gss[g], sym, (dsq_intq_rule)rule);
                    dsq_intq q;
                    assert_int_equal(dsq_intq_quantize(w, rows, cols, &p, NULL, &q), DSQ_OK);
                    assert_int_equal(q.group_size, gss[g] < 0 ? cols : gss[g]);
                    assert_int_equal(q.n_groups, cols / q.group_size);
                    assert_int_equal(dsq_intq_validate(&q), DSQ_OK);
                    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
                    for (int r = 0; r < rows; r++)
                        for (int c = 0; c < cols; c++) {
                            float s = q.scales[r * q.n_groups + c / q.group_size];
                            float err = fabsf(w[r * cols + c] - deq[r * cols + c]);
                            /* One step (the rounded zero can shift the grid by half a step);
                             * GPTQ sym clips the top half of an all-positive group, which
                             * this data (mean 0.1, 32+ values) never produces. */
                            if (!(err <= s * 1.0001f))
                                fail_msg("bits %d group %d sym %d rule %d: |err| %g > step %g at (%d,%d)", bits[b],
                                         gss[g], sym, rule, (double)err, (double)s, r, c);
                        }
                    dsq_intq_free(&q);
                }
    free(w);
    free(deq);
}

static void test_clip(void **state)
{
    (void)state;
    const int cols = 64;
    float w[64];
    uint64_t seed = 3;
    for (int i = 0; i < cols; i++) w[i] = dsq_test_randn(&seed);
    w[5] = 10.0f; /* an outlier sets amax */
    dsq_intq full, clipped;
    dsq_intq_params p = P(4, 32, false, DSQ_INTQ_RULE_AWQ);
    assert_int_equal(dsq_intq_quantize(w, 1, cols, &p, NULL, &full), DSQ_OK);
    p.clip = 0.5f;
    assert_int_equal(dsq_intq_quantize(w, 1, cols, &p, NULL, &clipped), DSQ_OK);
    assert_true(clipped.scales[0] < full.scales[0]);
    float deq[64];
    assert_int_equal(dsq_intq_dequantize(&clipped, deq), DSQ_OK);
    /* AWQ clamps the group to [-5, 5] before quantizing. */
    assert_true(deq[5] <= 5.0f + clipped.scales[0] * 0.5001f);
    assert_true(deq[5] >= 5.0f - clipped.scales[0] * 0.5001f);
    /* The same through per-group ratios: 0.5 on group 0, none on group 1. */
    float gc[2] = {0.5f, 1.0f};
    dsq_intq per;
    p.clip = 1.0f;
    assert_int_equal(dsq_intq_quantize(w, 1, cols, &p, gc, &per), DSQ_OK);
    assert_true(per.scales[0] == clipped.scales[0] && per.scales[1] == full.scales[1]);
    assert_memory_equal(per.codes, clipped.codes, 32);
    assert_memory_equal(per.codes + 32, full.codes + 32, 32);
    gc[1] = 0.0f;
    dsq_intq bad;
    assert_int_equal(dsq_intq_quantize(w, 1, cols, &p, gc, &bad), DSQ_ERR_ARG);
    dsq_intq_free(&full);
    dsq_intq_free(&clipped);
    dsq_intq_free(&per);

    /* GPTQ shrink: the range [xmin, xmax] times 0.5. */
    float s1, s2;
    int z1, z2;
    dsq_intq_params g = P(4, 32, false, DSQ_INTQ_RULE_GPTQ);
    assert_int_equal(dsq_intq_group_params(w, 32, &g, 1.0f, &s1, &z1), DSQ_OK);
    assert_int_equal(dsq_intq_group_params(w, 32, &g, 0.5f, &s2, &z2), DSQ_OK);
    float mn = 0, mx = 0;
    for (int i = 0; i < 32; i++) {
        mn = fminf(mn, w[i]);
        mx = fmaxf(mx, w[i]);
    }
    assert_true(s2 == (0.5f * mx - 0.5f * mn) / 15.0f);
    assert_int_equal(z2, (int)rintf(-(0.5f * mn) / s2));
    assert_true(s1 == (mx - mn) / 15.0f);
}

static void test_g_idx_and_validate(void **state)
{
    (void)state;
    dsq_intq_params p = P(4, 32, false, DSQ_INTQ_RULE_GPTQ);
    dsq_intq q;
    assert_int_equal(dsq_intq_alloc(&p, 1, 64, &q), DSQ_OK);
    q.scales[0] = 1.0f;
    q.scales[1] = 10.0f;
    q.zeros[0] = 0;
    q.zeros[1] = 1;
    for (int c = 0; c < 64; c++) q.codes[c] = 3;
    q.g_idx = malloc(64 * sizeof(int32_t));
    for (int c = 0; c < 64; c++) q.g_idx[c] = c % 2; /* interleaved groups */
    assert_int_equal(dsq_intq_validate(&q), DSQ_OK);
    float deq[64];
    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
    assert_true(deq[0] == 3.0f && deq[1] == 20.0f && deq[62] == 3.0f && deq[63] == 20.0f);
    q.g_idx[7] = 2;
    assert_int_equal(dsq_intq_validate(&q), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "g_idx[7]"));
    q.g_idx[7] = 1;
    q.codes[9] = 16;
    assert_int_equal(dsq_intq_validate(&q), DSQ_ERR_FORMAT);
    q.codes[9] = 15;
    q.sym = true; /* zeros 0 and 1 are not the symmetric midpoint 8 */
    assert_int_equal(dsq_intq_validate(&q), DSQ_ERR_FORMAT);
    q.sym = false;
    q.scales[1] = INFINITY;
    assert_int_equal(dsq_intq_validate(&q), DSQ_ERR_NUMERIC);
    dsq_intq_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_awq_asym_hand),      cmocka_unit_test(test_all_positive_group),
        cmocka_unit_test(test_other_bits_hand),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_round_trip_all),     cmocka_unit_test(test_clip),
        cmocka_unit_test(test_g_idx_and_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
