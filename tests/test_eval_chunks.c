/* eval/chunks.h and eval/nll.h: how the stream is cut, and the NLL sums.
 * (The forward pass over chunks is checked through perplexity, KLD and
 * imatrix in test_generate, test_kld and test_imatrix_collect.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "eval/chunks.h"
#include "eval/nll.h"
#include "tests/helpers/testutil.h"

static void test_chunk_count(void **state)
{
    (void)state;
    assert_int_equal(dsq_chunk_count(1000, 100, 0, 1 << 30), 10);   /* all */
    assert_int_equal(dsq_chunk_count(1099, 100, 0, 1 << 30), 10);   /* a partial chunk is dropped */
    assert_int_equal(dsq_chunk_count(1000, 100, 3, 1 << 30), 3);    /* the first K */
    assert_int_equal(dsq_chunk_count(1000, 100, 30, 1 << 30), 10);  /* more than there are */
    assert_int_equal(dsq_chunk_count(1000, 100, -1, 1 << 30), 10);
    assert_int_equal(dsq_chunk_count(1000, 100, 0, 4), 4);          /* capped */
    assert_int_equal(dsq_chunk_count(1000, 100, 7, 4), 4);
}

static void test_iterator(void **state)
{
    (void)state;
    int32_t toks[23];
    for (int i = 0; i < 23; i++) toks[i] = 100 + i;
    for (int with_bos = 0; with_bos < 2; with_bos++) {
        dsq_chunk_iter it;
        assert_int_equal(dsq_chunk_iter_init(&it, toks, 5, 4, with_bos ? 7 : -1), DSQ_OK);
        const int32_t *chunk, *orig;
        int n = 0;
        while (dsq_chunk_next(&it, &chunk, &orig)) {
            assert_ptr_equal(orig, toks + 5 * n);
            assert_int_equal(chunk[0], with_bos ? 7 : 100 + 5 * n);
            for (int k = 1; k < 5; k++) assert_int_equal(chunk[k], 100 + 5 * n + k);
            n++;
        }
        assert_int_equal(n, 4);
        assert_false(dsq_chunk_next(&it, &chunk, NULL)); /* stays at the end */
        assert_int_equal(toks[0], 100);                  /* the stream itself is not touched */
        dsq_chunk_iter_free(&it);
    }
}

/* Against a long double log-sum-exp of the same row. */
static void test_token_nll(void **state)
{
    (void)state;
    uint64_t rng = 7;
    enum { V = 1000 };
    float *lg = malloc(V * sizeof *lg);
    assert_non_null(lg);
    for (int t = 0; t < 20; t++) {
        for (int i = 0; i < V; i++) lg[i] = 8.0f * dsq_test_randn(&rng) + (t == 3 ? 1e4f : 0.0f);
        int32_t tok = (int32_t)(dsq_test_rand(&rng) % V);
        long double mx = lg[0], s = 0;
        for (int i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) s += expl((long double)lg[i] - mx);
        double want = (double)(mx + logl(s) - lg[tok]);
        double got = dsq_token_nll(lg, V, tok);
        assert_true(got >= 0);
        assert_true(fabs(got - want) <= 1e-5 * (1 + want));
    }
    free(lg);
}

static void test_acc(void **state)
{
    (void)state;
    /* Two-token vocabulary: logits (0, log 3) give p = 1/4, 3/4. */
    const float lg[6] = {0, logf(3), 0, logf(3), 0, logf(3)};
    const int32_t tg[3] = {0, 1, 1};
    dsq_nll_acc a = {0, 0, 0};
    double ppl, err;
    dsq_nll_acc_ppl(&a, &ppl, &err);
    assert_true(ppl == 0 && err == 0);
    dsq_nll_acc_rows(&a, lg, 2, tg, 3);
    assert_int_equal(a.count, 3);
    double n0 = log(4.0), n1 = log(4.0 / 3.0);
    assert_true(fabs(a.nll - (n0 + 2 * n1)) < 1e-6);
    assert_true(fabs(a.nll2 - (n0 * n0 + 2 * n1 * n1)) < 1e-6);
    dsq_nll_acc_ppl(&a, &ppl, &err);
    double mean = (n0 + 2 * n1) / 3, var = (n0 * n0 + 2 * n1 * n1) / 3 - mean * mean;
    assert_true(fabs(ppl - exp(mean)) < 1e-6);
    assert_true(fabs(err - sqrt(var / 2) * exp(mean)) < 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_count),
        cmocka_unit_test(test_iterator),
        cmocka_unit_test(test_token_nll),
        cmocka_unit_test(test_acc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
