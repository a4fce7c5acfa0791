/* GPTQ into GGUF blocks (quantizers/gptq_blocks.h).
 *
 * - a diagonal Hessian feeds nothing back: the bytes equal dsq_quantize's
 *   with the same importance weights (diag(H) when none is given, or the one
 *   given), for every type we quantize to, with and without act-order.
 * - correlated inputs: the error the calibration inputs see, sum (w-q) H
 *   (w-q)^T, is below 0.7x plain imatrix quantization's for every type,
 *   with and without act-order (three draws; measured 0.31-0.55x).
 * - the code maps (quantizers/block_codes.h): for every type, each
 *   element's code read back and its grid value equal the dequantizer's
 *   value bit for bit; setting a code changes that element only; the
 *   nearest code is never farther than the code the quantizer chose.
 * - the reported loss is the weighted sum GPTQ accumulates (finite, > 0).
 * - bad input: a width that is not whole blocks, a type without a quantizer,
 *   NaN in the weight, an indefinite Hessian that no dampening saves: clear
 *   errors naming the tensor. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "core/status.h"
#include "quantizers/block_codes.h"
#include "quantizers/gptq.h"
#include "quantizers/gptq_blocks.h"
#include "quantizers/qtypes.h"
#include "tests/helpers/testutil.h"

static const dsq_type k_types[] = {DSQ_TYPE_Q4_0, DSQ_TYPE_Q4_1, DSQ_TYPE_Q5_0,   DSQ_TYPE_Q5_1,
                                   DSQ_TYPE_Q8_0, DSQ_TYPE_Q2_K, DSQ_TYPE_Q3_K,   DSQ_TYPE_Q4_K,
                                   DSQ_TYPE_Q5_K, DSQ_TYPE_Q6_K, DSQ_TYPE_IQ4_NL, DSQ_TYPE_IQ4_XS};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static size_t row_bytes(dsq_type t, int64_t cols)
{
    uint64_t b = 0;
    assert_int_equal(dsq_type_nbytes(t, (uint64_t)cols, &b), DSQ_OK);
    return (size_t)b;
}

static float *random_weight(int rows, int cols, uint64_t seed)
{
    float *w = malloc(sizeof(float) * rows * cols);
    for (int i = 0; i < rows * cols; i++) {
        w[i] = 0.05f * dsq_test_randn(&seed);
        if (i % 97 == 0) w[i] *= 6.0f; /* a few outliers, as real weights have */
    }
    return w;
}

/* 2/n X^T X of inputs whose columns are mixed with their neighbours, with
 * per-column scales spread over 20x (activation outliers). */
static double *correlated_hessian(int n, int cols, uint64_t seed)
{
    float *x = malloc(sizeof(float) * n * cols), *z = malloc(sizeof(float) * cols);
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < cols; i++) z[i] = dsq_test_randn(&seed);
        for (int j = 0; j < cols; j++) {
            float s = z[j];
            for (int k = 1; k <= 4 && j - k >= 0; k++) s += 0.7f * z[j - k];
            x[t * cols + j] = s * (1.0f + 19.0f * (float)((j * 7) % 13) / 12.0f);
        }
    }
    dsq_hessian h;
    assert_int_equal(dsq_hessian_init(&h, cols), DSQ_OK);
    assert_int_equal(dsq_hessian_add(&h, x, n), DSQ_OK);
    assert_int_equal(dsq_hessian_finalize(&h), DSQ_OK);
    free(x);
    free(z);
    return h.h;
}

static void test_diagonal_is_plain(void **state)
{
    (void)state;
    const int rows = 9, cols = 512;
    float *w = random_weight(rows, cols, 11);
    double *H = calloc((size_t)cols * cols, sizeof *H);
    float *diag = malloc(sizeof(float) * cols), *given = malloc(sizeof(float) * cols);
    uint64_t seed = 5;
    for (int i = 0; i < cols; i++) {
        diag[i] = 0.1f + 3.0f * fabsf(dsq_test_randn(&seed));
        given[i] = 0.5f + fabsf(dsq_test_randn(&seed));
        H[(size_t)i * cols + i] = diag[i];
    }
    for (size_t k = 0; k < N_TYPES; k++) {
        const dsq_type t = k_types[k];
        const bool im = dsq_qtype_get(t)->uses_imatrix;
        size_t rb = row_bytes(t, cols);
        uint8_t *plain = malloc(rb * rows), *ours = malloc(rb * rows);
        for (int variant = 0; variant < 3; variant++) {
            /* 0: importance from diag(H); 1: given importance; 2: act-order with diag(H) */
            const float *imp = variant == 1 ? given : NULL;
            assert_int_equal(dsq_quantize(t, w, plain, rows, cols, im ? (imp ? imp : diag) : NULL), DSQ_OK);
            dsq_gptq_blocks_opts o = {
                .type = t, .percdamp = 0.01, .act_order = variant == 2, .importance = imp, .name = "blk.0.test"};
            dsq_gptq_report rep;
            memset(ours, 0xA5, rb * rows);
            assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, ours, &rep), DSQ_OK);
            if (memcmp(plain, ours, rb * rows))
                fail_msg("%s variant %d: GPTQ on a diagonal Hessian differs from plain quantization", dsq_type_name(t),
                         variant);
            assert_true(isfinite(rep.loss) && rep.loss > 0.0);
        }
        free(plain);
        free(ours);
    }
    free(w);
    free(H);
    free(diag);
    free(given);
}

/* The calibration error of GPTQ blocks against plain importance-weighted
 * quantization, with importance = diag(H) for both. */
static void test_correlated_beats_plain(void **state)
{
    (void)state;
    const int rows = 16, cols = 512, n = 2048;
    for (uint64_t draw = 0; draw < 3; draw++) {
        float *w = random_weight(rows, cols, 100 + draw);
        double *H = correlated_hessian(n, cols, 200 + draw);
        float *diag = malloc(sizeof(float) * cols);
        for (int i = 0; i < cols; i++) diag[i] = (float)H[(size_t)i * cols + i];
        for (size_t k = 0; k < N_TYPES; k++) {
            const dsq_type t = k_types[k];
            const bool im = dsq_qtype_get(t)->uses_imatrix;
            size_t rb = row_bytes(t, cols);
            uint8_t *plain = malloc(rb * rows), *ours = malloc(rb * rows);
            assert_int_equal(dsq_quantize(t, w, plain, rows, cols, im ? diag : NULL), DSQ_OK);
            dsq_gptq_blocks_opts o = {.type = t, .percdamp = 0.01, .name = "blk.1.test"};
            dsq_gptq_report rep;
            assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, ours, &rep), DSQ_OK);
            double e_plain, e_ours;
            assert_int_equal(dsq_gptq_blocks_error(w, plain, t, rows, cols, H, &e_plain), DSQ_OK);
            assert_int_equal(dsq_gptq_blocks_error(w, ours, t, rows, cols, H, &e_ours), DSQ_OK);
            if (getenv("DSQ_TEST_VERBOSE"))
                print_message("%s draw %d: plain %g gptq %g (%.3f)\n", dsq_type_name(t), (int)draw, e_plain, e_ours,
                              e_ours / e_plain);
            if (!(e_ours < 0.7 * e_plain))
                fail_msg("%s draw %d: GPTQ error %g not below 0.7x plain %g", dsq_type_name(t), (int)draw, e_ours,
                         e_plain);
            /* act-order at block granularity is a valid order too: never worse than plain */
            o.act_order = true;
            assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, ours, &rep), DSQ_OK);
            assert_int_equal(dsq_gptq_blocks_error(w, ours, t, rows, cols, H, &e_ours), DSQ_OK);
            if (getenv("DSQ_TEST_VERBOSE"))
                print_message("%s draw %d act: plain %g gptq %g (%.3f)\n", dsq_type_name(t), (int)draw, e_plain, e_ours,
                              e_ours / e_plain);
            if (!(e_ours < 0.7 * e_plain))
                fail_msg("%s draw %d act-order: GPTQ error %g not below 0.7x plain %g", dsq_type_name(t), (int)draw,
                         e_ours, e_plain);
            free(plain);
            free(ours);
        }
        free(w);
        free(H);
        free(diag);
    }
}

static void test_block_codes(void **state)
{
    (void)state;
    const int cols = 256;
    float *w = random_weight(1, cols, 77);
    float *deq = malloc(sizeof(float) * cols), *deq2 = malloc(sizeof(float) * cols);
    for (size_t k = 0; k < N_TYPES; k++) {
        const dsq_type t = k_types[k];
        const dsq_type_info *ti = dsq_type_get((int)t);
        assert_true(dsq_block_codes_supported(t));
        size_t rb = row_bytes(t, cols);
        uint8_t *q = malloc(rb);
        assert_int_equal(dsq_quantize(t, w, q, 1, cols, NULL), DSQ_OK);
        assert_int_equal(dsq_dequantize(t, q, deq, 1, cols), DSQ_OK);
        for (int b = 0; b < cols / (int)ti->block_elems; b++) {
            uint8_t *blk = q + (size_t)b * ti->block_bytes;
            dsq_block_grid g;
            dsq_block_grid_get(t, blk, &g);
            assert_int_equal(g.n, (int)ti->block_elems);
            for (int e = 0; e < g.n; e++) {
                const int j = b * g.n + e, code = dsq_block_code_get(t, blk, e);
                assert_true(code >= g.lo && code <= g.hi);
                float v = dsq_block_value(&g, e, code);
                if (memcmp(&v, &deq[j], sizeof v))
                    fail_msg("%s element %d: grid value %.9g, dequantized %.9g", dsq_type_name(t), j, v, deq[j]);
                int near = dsq_block_nearest(&g, e, w[j]);
                assert_true(fabsf(dsq_block_value(&g, e, near) - w[j]) <= fabsf(v - w[j]));
            }
            /* a new code at one element changes that element's value only */
            for (int e = 0; e < g.n; e += 7) {
                const int j = b * g.n + e, old = dsq_block_code_get(t, blk, e);
                const int nc = old == g.hi ? g.lo : old + 1;
                dsq_block_code_set(t, blk, e, nc);
                assert_int_equal(dsq_block_code_get(t, blk, e), nc);
                assert_int_equal(dsq_dequantize(t, q, deq2, 1, cols), DSQ_OK);
                for (int i = 0; i < cols; i++) {
                    float want = i == j ? dsq_block_value(&g, e, nc) : deq[i];
                    if (memcmp(&want, &deq2[i], sizeof want))
                        fail_msg("%s: code %d at element %d changed element %d", dsq_type_name(t), nc, j, i);
                }
                dsq_block_code_set(t, blk, e, old);
            }
        }
        free(q);
    }
    free(w);
    free(deq);
    free(deq2);
}

static void test_bad_input(void **state)
{
    (void)state;
    const int rows = 4, cols = 256;
    float *w = random_weight(rows, cols, 3);
    double *H = correlated_hessian(300, cols, 4);
    uint8_t *out = malloc(row_bytes(DSQ_TYPE_Q8_0, cols) * rows);
    dsq_gptq_blocks_opts o = {.type = DSQ_TYPE_Q4_K, .percdamp = 0.01, .name = "blk.3.ffn_down.weight"};
    /* 224 columns: whole Q8_0 blocks but not whole Q4_K super-blocks */
    assert_int_equal(dsq_gptq_blocks_quantize(w, rows, 224, H, &o, out, NULL), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "blk.3.ffn_down.weight"));
    assert_non_null(strstr(dsq_errmsg(), "q4_K"));
    o.type = DSQ_TYPE_F16;
    assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, out, NULL), DSQ_ERR_UNSUPPORTED);
    o.type = DSQ_TYPE_Q8_0;
    w[2 * cols + 17] = NAN;
    assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, out, NULL), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "row 2, column 17"));
    w[2 * cols + 17] = 0.0f;
    /* negative definite: no dampening up to 1 makes it factor */
    for (int i = 0; i < cols * cols; i++) H[i] = -H[i];
    for (int i = 0; i < cols; i++) H[(size_t)i * cols + i] = 1.0;
    for (int i = 0; i < cols - 1; i++) H[(size_t)i * cols + i + 1] = H[(size_t)(i + 1) * cols + i] = 5.0;
    assert_int_equal(dsq_gptq_blocks_quantize(w, rows, cols, H, &o, out, NULL), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "not positive definite"));
    free(w);
    free(H);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_diagonal_is_plain),
        cmocka_unit_test(test_correlated_beats_plain),
        cmocka_unit_test(test_block_codes),
        cmocka_unit_test(test_bad_input),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
