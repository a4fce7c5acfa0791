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
 *   name the grid; min/max leaves them as they were.
 * - the objective's inner loop: its AVX2 and AVX-512 copies give the scalar
 *   reference's bits (run where the CPU has them, said where not), and its
 *   d^2.4 stays within 4e-7 of pow in double; AWQ's group fake quantization
 *   gives dsq_intq_code's bits in every copy and refuses non-finite values. */
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
#include "kernels/cpu.h"
#include "quantizers/intq.h"
#include "quantizers/intq_internal.h"
#include "quantizers/intq_search.h"
#include "quantizers/intq_search_lanes.h"
#include "tests/helpers/testutil.h"

static void test_table(void **state)
{
    (void)state;
    for (int g = 0; g < DSQ_INTQ_GRID_N; g++) {
        const dsq_intq_grid_info *i = dsq_intq_grid_get((dsq_intq_grid)g);
        assert_non_null(i);
        assert_int_equal(dsq_intq_grid_parse(i->name), g);
        /* the smallest ratio stays positive */
        assert_true(dsq_intq_grid_ratio(i->n_ratios - 1, i->steps) > 0.0f);
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
                            double ek =
                                dsq_intq_group_error(w, n, used, &p, dsq_intq_grid_ratio(k, gi->steps), gi->norm);
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

/* d^2.4 without powf: relative error against pow in double over the whole
 * range the objective meets (absolute, in units of FLT_MIN, where the
 * result is subnormal), zero below 2^-60. */
static void test_pow_2p4(void **state)
{
    (void)state;
    double worst = 0.0;
    for (float d = 0x1p-59f; d < 0x1p30f; d *= 1.0009765625f) {
        const double want = pow((double)d, 2.4), got = (double)dsq_intq_pow_2p4(d);
        /* below FLT_MIN the result is subnormal: absolute error then */
        const bool normal = want >= 0x1p-126;
        const double rel = fabs(got - want) / (normal ? want : 0x1p-126);
        if (!(rel <= (normal ? 4e-7 : 1e-6))) fail_msg("pow_2p4(%.9g) = %.9g, pow gives %.9g", (double)d, got, want);
        worst = normal && rel > worst ? rel : worst;
    }
    print_message("d^2.4: worst relative error %.3g\n", worst);
    assert_true(dsq_intq_pow_2p4(0.0f) == 0.0f && dsq_intq_pow_2p4(0x1p-61f) == 0.0f);
    assert_true(dsq_intq_pow_2p4(1.0f) == 1.0f);
}

/* The SIMD copies of the lane sum against the scalar reference, bit for bit:
 * group sizes with and without a tail, every exponent, weighted or not,
 * grids that clamp and grids that do not. */
static void test_lanes_copies_agree(void **state)
{
    (void)state;
    typedef int64_t (*lanes_fn)(float *, const float *, int64_t, const float *, const dsq_intq_code_grid *, float);
    const struct {
        const char *name;
        lanes_fn fn;
        bool runs;
    } copies[] = {
        {"avx2", dsq_intq_lanes_avx2, dsq_cpu_has(DSQ_CPU_AVX2)},
        {"avx512", dsq_intq_lanes_avx512, dsq_cpu_has(DSQ_CPU_AVX512F)},
    };
    const float norms[] = {2.0f, 3.0f, 2.4f, 2.5f};
    const int64_t sizes[] = {16, 32, 64, 128, 200, 7};
    uint64_t seed = 5;
    float w[200], imp[200];
    int compared = 0;
    for (size_t c = 0; c < sizeof copies / sizeof copies[0]; c++) {
        if (!copies[c].runs) {
            print_message("the %s copy not run: this CPU lacks it\n", copies[c].name);
            continue;
        }
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t ni = 0; ni < sizeof norms / sizeof norms[0]; ni++)
                for (int variant = 0; variant < 4; variant++) {
                    const int64_t n = sizes[si];
                    draw_group(w, imp, (int)n, variant % 2 == 1, &seed);
                    const float t = variant < 2 ? 0.03f : INFINITY; /* a clamp, or none */
                    const dsq_intq_code_grid g = {t < INFINITY ? -t : -3e38f, t < INFINITY ? t : 3e38f, 0.004f, 8.0f,
                                                  15.0f};
                    const float *im = variant == 3 ? NULL : imp;
                    float a[DSQ_INTQ_LANES] = {0}, b[DSQ_INTQ_LANES] = {0};
                    const int64_t ta = dsq_intq_lanes_ref(a, w, n, im, &g, norms[ni]);
                    const int64_t tb = copies[c].fn(b, w, n, im, &g, norms[ni]);
                    assert_int_equal(ta, tb);
                    assert_int_equal(ta, norms[ni] == 2.5f ? 0 : n / DSQ_INTQ_LANES * DSQ_INTQ_LANES);
                    if (memcmp(a, b, sizeof a))
                        fail_msg("%s copy: n %lld norm %g variant %d differs from the reference", copies[c].name,
                                 (long long)n, (double)norms[ni], variant);
                    float da[200], db[200];
                    dsq_intq_deltas_ref(w, n, &g, da);
                    (c == 0 ? dsq_intq_deltas_avx2 : dsq_intq_deltas_avx512)(w, n, &g, db);
                    for (int64_t i = 0; i < n; i++)
                        if (memcmp(&da[i], &db[i], sizeof da[i]) || da[i] != dsq_intq_code_delta(w[i], &g))
                            fail_msg("%s copy: delta %lld of %lld differs", copies[c].name, (long long)i, (long long)n);
                    compared++;
                }
    }
    print_message("%d lane sums compared with the reference\n", compared);
}

/* AWQ's group fake quantization: every copy gives, bit for bit, what the
 * rule's params and dsq_intq_code give on w * s, divided by s; a non-finite
 * value is refused by every copy. Sizes with and without a tail past the
 * lanes; values on rounding ties (multiples of half a step). */
static void test_fake_group_copies(void **state)
{
    (void)state;
    typedef bool (*fake_fn)(const float *, const float *, int64_t, const dsq_intq_params *, float *, float *);
    const struct {
        const char *name;
        fake_fn fn;
        bool runs;
    } copies[] = {
        {"ref", dsq_intq_fake_group_ref, true},
        {"avx2", dsq_intq_fake_group_avx2, dsq_cpu_has(DSQ_CPU_AVX2)},
        {"avx512", dsq_intq_fake_group_avx512, dsq_cpu_has(DSQ_CPU_AVX512F)},
    };
    const int64_t sizes[] = {16, 32, 64, 128, 200, 7};
    uint64_t seed = 9;
    float w[200], imp[200], sc[200], v[200], got[200], want[200];
    int compared = 0;
    for (size_t c = 0; c < sizeof copies / sizeof copies[0]; c++) {
        if (!copies[c].runs) {
            print_message("the %s copy not run: this CPU lacks it\n", copies[c].name);
            continue;
        }
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int variant = 0; variant < 8; variant++) {
                const int64_t n = sizes[si];
                draw_group(w, imp, (int)n, variant % 2 == 1, &seed);
                if (variant >= 6) /* ties: the range 0 .. 15 steps of 0.25 gives codes on halves */
                    for (int64_t i = 0; i < n; i++) w[i] = 0.125f * (float)(i % 31);
                for (int64_t i = 0; i < n; i++) sc[i] = 0.5f + imp[i];
                const float *s = variant % 4 < 2 ? sc : NULL;
                dsq_intq_params p = {.bits = variant < 4 ? 4 : 3,
                                     .group_size = (int)n,
                                     .sym = variant % 3 == 0,
                                     .rule = DSQ_INTQ_RULE_AWQ};
                float vv[200], scale, t;
                int zero;
                for (int64_t i = 0; i < n; i++) vv[i] = s ? w[i] * s[i] : w[i];
                float mn, mx;
                dsq_intq_min_max(vv, n, &mn, &mx);
                dsq_intq_range_params(mn, mx, &p, 1.0f, &scale, &zero, &t);
                for (int64_t i = 0; i < n; i++) {
                    float q = (float)(dsq_intq_code(vv[i], scale, zero, dsq_intq_maxq(p.bits)) - zero) * scale;
                    want[i] = s ? q / s[i] : q;
                }
                assert_true(copies[c].fn(w, s, n, &p, v, got));
                if (memcmp(got, want, (size_t)n * sizeof *got))
                    fail_msg("%s copy: n %lld variant %d differs from dsq_intq_code", copies[c].name, (long long)n,
                             variant);
                w[n / 2] = variant % 2 ? NAN : INFINITY;
                assert_false(copies[c].fn(w, s, n, &p, v, got));
                compared++;
            }
    }
    print_message("%d fake-quantized groups compared with dsq_intq_code\n", compared);
}

/* The Gram objective (AWQ's clip step): with G diagonal it is the
 * elementwise squared error weighted by G's diagonal, so both searches pick
 * the same ratio; with a full G it is d^T G d, checked against the direct
 * sum over tokens; the ratios are AutoAWQ's, 1 - i / 20 as Python rounds them. */
static void test_gram_objective(void **state)
{
    (void)state;
    enum { N = 32, T = 48 };
    uint64_t seed = 13;
    float w[N], imp[N], G[N * N], x[T * N], d[N];
    int agree = 0, shrunk = 0;
    for (int draw = 0; draw < 40; draw++) {
        draw_group(w, imp, N, draw % 2 == 0, &seed);
        dsq_intq_params p = {draw % 3 == 0 ? 3 : 4, N, draw % 4 == 0, DSQ_INTQ_RULE_AWQ, 1.0f, DSQ_INTQ_GRID_MINMAX};
        memset(G, 0, sizeof G);
        for (int i = 0; i < N; i++) G[i * N + i] = imp[i];
        const dsq_intq_objective diag = {NULL, 2.0f, G}, elem = {imp, 2.0f, NULL};
        double ed, ee;
        const float rd = dsq_intq_search_grid(w, N, &p, 1.0f, 10, 20, &diag, d, &ed);
        const float re = dsq_intq_search_grid(w, N, &p, 1.0f, 10, 20, &elem, NULL, &ee);
        assert_true(fabs(ed - ee) <= 1e-5 * ee + 1e-30);
        agree += rd == re;
        /* full G from tokens: E at the chosen ratio is the mean squared output error there */
        for (int t = 0; t < T * N; t++) x[t] = dsq_test_randn(&seed) * (t % N == 3 ? 5.0f : 1.0f);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double g = 0;
                for (int t = 0; t < T; t++) g += (double)x[t * N + i] * x[t * N + j];
                G[i * N + j] = (float)(g / T);
            }
        const dsq_intq_objective full = {NULL, 2.0f, G};
        double e;
        const float r = dsq_intq_search_grid(w, N, &p, 1.0f, 10, 20, &full, d, &e);
        shrunk += r < 1.0f;
        float s, tt;
        int z;
        float mn = INFINITY, mx = -INFINITY;
        for (int i = 0; i < N; i++) mn = fminf(mn, w[i]), mx = fmaxf(mx, w[i]);
        dsq_intq_range_params(mn, mx, &p, r, &s, &z, &tt);
        double direct = 0;
        for (int t = 0; t < T; t++) {
            double o = 0;
            for (int i = 0; i < N; i++) {
                const float v = fminf(fmaxf(w[i], -tt), tt);
                const int c = dsq_intq_code(v, s, z, dsq_intq_maxq(p.bits));
                o += (double)x[t * N + i] * ((double)((float)(c - z) * s) - w[i]);
            }
            direct += o * o;
        }
        direct /= T;
        if (!(fabs(e - direct) <= 1e-4 * direct)) fail_msg("draw %d: d^T G d %.9g, direct %.9g", draw, e, direct);
    }
    print_message("diagonal G and elementwise weights agree on %d of 40 ratios; full G shrank %d\n", agree, shrunk);
    assert_true(agree >= 38); /* a near tie may fall either way in float */
    assert_true(shrunk > 0);
    assert_true(dsq_intq_grid_ratio(9, 20) == 0.55f && dsq_intq_grid_ratio(16, 100) == 0.84f);
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
        cmocka_unit_test(test_pow_2p4),
        cmocka_unit_test(test_gram_objective),
        cmocka_unit_test(test_lanes_copies_agree),
        cmocka_unit_test(test_fake_group_copies),
        cmocka_unit_test(test_quantize_uses_ratio),
        cmocka_unit_test(test_bad_importance),
        cmocka_unit_test(test_configs),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
