/* The group-parameter search (quantizers/intq_search.h).
 *
 * - the table: names both ways, llm-compressor's "imatrix_mse" spelling,
 *   unknown names and values refused (parse, dsq_intq_check).
 * - on random and outlier-heavy groups, for both rules, sym and asym, 2 to 8
 *   bits, weighted or not: the ratio returned is the exact minimum of the
 *   objective over the grid (brute force), so never worse than min/max
 *   (ratio 1); and on outlier-heavy groups the search does strictly better
 *   somewhere (it is not a no-op).
 * - dsq_intq_quantize with a grid: each group's scale and zero are the rule's
 *   at the searched ratio, codes reproduce; the weighted search puts less
 *   weighted error on the important columns than the same grid unweighted.
 * - bad importance (negative, NaN) is an error naming the column; nothing
 *   is left allocated.
 * - the artifacts' configs: compressed-tensors' observer and GPTQ's "meta"
 *   name the grid; min/max leaves them as they were. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/status.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "quantizers/intq.h"
#include "quantizers/intq_search.h"
#include "tests/helpers/testutil.h"

static void test_table(void **state)
{
    (void)state;
    for (int g = 0; g < DSQ_INTQ_GRID_N; g++) {
        const dsq_intq_grid_info *i = dsq_intq_grid_get((dsq_intq_grid)g);
        assert_non_null(i);
        assert_int_equal(dsq_intq_grid_parse(i->name), g);
        /* the smallest ratio stays positive */
        assert_true(1.0f - (float)(i->n_ratios - 1) * i->step > 0.0f);
    }
    assert_int_equal(dsq_intq_grid_parse("imatrix_mse"), DSQ_INTQ_GRID_IMATRIX_MSE);
    assert_int_equal(dsq_intq_grid_parse("MSE"), -1);
    assert_int_equal(dsq_intq_grid_parse(""), -1);
    assert_int_equal(dsq_intq_grid_parse(NULL), -1);
    assert_null(dsq_intq_grid_get(DSQ_INTQ_GRID_N));
    assert_null(dsq_intq_grid_get((dsq_intq_grid)-1));
    dsq_intq_params p = {4, 64, true, DSQ_INTQ_RULE_GPTQ, 1.0f, (dsq_intq_grid)7};
    assert_int_equal(dsq_intq_check(&p, 128), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "grid"));
    assert_false(dsq_intq_fits(&p, 128));
}

/* n values: Gaussian, or (outliers) with a few values 8-20x the rest. */
static void draw_group(float *w, float *imp, int n, bool outliers, uint64_t *seed)
{
    for (int i = 0; i < n; i++) {
        w[i] = 0.02f * dsq_test_randn(seed);
        imp[i] = 0.1f + fabsf(dsq_test_randn(seed)) * (i % 7 == 0 ? 20.0f : 1.0f);
    }
    if (outliers)
        for (int k = 0; k < 2; k++) w[dsq_test_rand(seed) % (uint64_t)n] *= 8.0f + 12.0f * (float)k;
}

static void test_exact_minimum(void **state)
{
    (void)state;
    uint64_t seed = 21;
    float w[128], imp[128];
    const int bits[] = {2, 3, 4, 8};
    int strictly_better = 0, cases = 0;
    for (int grid = DSQ_INTQ_GRID_MSE; grid < DSQ_INTQ_GRID_N; grid++) {
        const dsq_intq_grid_info *gi = dsq_intq_grid_get((dsq_intq_grid)grid);
        for (int rule = 0; rule < 2; rule++)
            for (int b = 0; b < 4; b++)
                for (int sym = 0; sym < 2; sym++)
                    for (int draw = 0; draw < 24; draw++) {
                        const int n = draw % 2 ? 128 : 32;
                        const bool outl = draw % 3 != 0;
                        draw_group(w, imp, n, outl, &seed);
                        dsq_intq_params p = {bits[b], n, sym != 0, (dsq_intq_rule)rule, 1.0f, (dsq_intq_grid)grid};
                        const float *im = draw % 4 == 1 ? NULL : imp;
                        double e;
                        float ratio = dsq_intq_search_ratio(w, n, im, &p, 1.0f, &e);
                        const float *used = gi->weighted ? im : NULL; /* mse ignores importance */
                        double e1 = dsq_intq_group_error(w, n, used, &p, 1.0f, gi->norm);
                        assert_true(e <= e1);
                        assert_true(fabs(e - dsq_intq_group_error(w, n, used, &p, ratio, gi->norm)) <= 1e-12 * e1);
                        double best = INFINITY;
                        for (int k = 0; k < gi->n_ratios; k++) {
                            double ek = dsq_intq_group_error(w, n, used, &p, 1.0f - (float)k * gi->step, gi->norm);
                            best = ek < best ? ek : best;
                        }
                        if (e != best) fail_msg("grid %s: search %.9g, brute force %.9g", gi->name, e, best);
                        cases++;
                        strictly_better += e < e1;
                    }
    }
    print_message("search below min/max in %d of %d groups\n", strictly_better, cases);
    assert_true(strictly_better > cases / 4);
}

static void test_quantize_uses_ratio(void **state)
{
    (void)state;
    const int rows = 6, cols = 256, gs = 64, ng = cols / gs;
    uint64_t seed = 5;
    float *w = malloc(sizeof(float) * rows * cols), imp[256], *dq = malloc(sizeof(float) * rows * cols);
    for (int r = 0; r < rows; r++) draw_group(w + r * cols, imp, cols, true, &seed);
    for (int c = 0; c < cols; c++) imp[c] = c % 8 == 0 ? 50.0f : 0.01f; /* one column in 8 matters */
    for (int grid = 0; grid < DSQ_INTQ_GRID_N; grid++) {
        dsq_intq_params p = {4, gs, false, DSQ_INTQ_RULE_GPTQ, 1.0f, (dsq_intq_grid)grid};
        dsq_intq q;
        assert_int_equal(dsq_intq_quantize_weighted(w, rows, cols, &p, NULL, imp, &q), DSQ_OK);
        for (int r = 0; r < rows; r++)
            for (int g = 0; g < ng; g++) {
                const float *src = w + r * cols + g * gs;
                float ratio = dsq_intq_search_ratio(src, gs, imp + g * gs, &p, 1.0f, NULL), s;
                int z;
                assert_int_equal(dsq_intq_group_params(src, gs, &p, ratio, &s, &z), DSQ_OK);
                assert_true(q.scales[r * ng + g] == s);
                assert_int_equal(q.zeros[r * ng + g], z);
                if (grid == DSQ_INTQ_GRID_MINMAX) assert_true(ratio == 1.0f);
                for (int i = 0; i < gs; i++)
                    assert_int_equal(q.codes[r * cols + g * gs + i], dsq_intq_code(src[i], s, z, 15));
            }
        dsq_intq_free(&q);
    }
    /* the same grid weighted and not: less error where the importance is (each
     * group's weighted choice is the weighted minimum, so never more) */
    double err[2];
    for (int k = 0; k < 2; k++) {
        dsq_intq_params p = {3, gs, true, DSQ_INTQ_RULE_GPTQ, 1.0f, DSQ_INTQ_GRID_IMATRIX_MSE};
        dsq_intq q;
        assert_int_equal(dsq_intq_quantize_weighted(w, rows, cols, &p, NULL, k ? imp : NULL, &q), DSQ_OK);
        assert_int_equal(dsq_intq_dequantize(&q, dq), DSQ_OK);
        err[k] = 0.0;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                double d = (double)dq[r * cols + c] - w[r * cols + c];
                err[k] += imp[c] * fabs(d * d * d);
            }
        dsq_intq_free(&q);
    }
    print_message("weighted |e|^3 error, imatrix-mse grid: uniform %.6g, weighted %.6g\n", err[0], err[1]);
    assert_true(err[1] < err[0]);
    free(w);
    free(dq);
}

static void test_bad_importance(void **state)
{
    (void)state;
    float w[2 * 64], imp[64];
    uint64_t seed = 3;
    for (int i = 0; i < 128; i++) w[i] = dsq_test_randn(&seed);
    for (int i = 0; i < 64; i++) imp[i] = 1.0f;
    dsq_intq_params p = {4, 32, true, DSQ_INTQ_RULE_GPTQ, 1.0f, DSQ_INTQ_GRID_IMATRIX_MSE};
    dsq_intq q;
    imp[37] = -1.0f;
    assert_int_equal(dsq_intq_quantize_weighted(w, 2, 64, &p, NULL, imp, &q), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "input column 37"));
    assert_null(q.codes);
    imp[37] = NAN;
    assert_int_equal(dsq_intq_quantize_weighted(w, 2, 64, &p, NULL, imp, &q), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "input column 37"));
    assert_null(q.codes);
}

static char *config_text(bool ct, const char *grid)
{
    cJSON *o = NULL;
    if (ct) {
        const char *ign[] = {"lm_head"};
        dsq_ct_config c = {4, 64, true, NULL, ign, 1, grid};
        assert_int_equal(dsq_ct_config_json(&c, &o), DSQ_OK);
    } else {
        dsq_gptq_config c = {4, 64, 0.01, false, false, true, true, DSQ_GPTQ_FORMAT_V1, grid};
        assert_int_equal(dsq_gptq_config_json(&c, &o), DSQ_OK);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void test_configs(void **state)
{
    (void)state;
    char *ct0 = config_text(true, NULL), *ct1 = config_text(true, "imatrix_mse");
    assert_non_null(strstr(ct0, "\"observer\":\"minmax\""));
    assert_non_null(strstr(ct1, "\"observer\":\"imatrix_mse\""));
    char *g0 = config_text(false, NULL), *g1 = config_text(false, "mse");
    assert_null(strstr(g0, "\"meta\""));
    assert_non_null(strstr(g1, "\"meta\":{\"quantizer\":[\"dsquant\"],\"grid\":\"mse\"}"));
    free(ct0);
    free(ct1);
    free(g0);
    free(g1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_exact_minimum),
        cmocka_unit_test(test_quantize_uses_ratio),
        cmocka_unit_test(test_bad_importance),
        cmocka_unit_test(test_configs),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
