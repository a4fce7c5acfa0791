/* The serving engine (serve/engine.h) on the default model, without HTTP:
 * greedy tokens of a sequence are the same whether it decodes alone or
 * beside another one (prompts short enough that every product takes the
 * decode path either way, so the arithmetic is the same to the bit);
 * max_tokens, stop tokens and echoed prompt events; refusals (too long,
 * outside the vocabulary, a full queue); a request cancelled while queued;
 * a submitter that lets go before the end; shutdown with requests running.
 * Under ASan the whole file doubles as the engine's leak and race check. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"
#include "runtime/model.h"
#include "serve/engine.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

typedef struct got {
    dsq_srv_tok ev[256];
    int n;
    dsq_srv_finish fin;
} got;

/* Every event of r until it finishes. */
static void drain(dsq_srv_req *r, got *g)
{
    g->n = 0;
    g->fin = DSQ_FINISH_NONE;
    for (int spins = 0; g->fin == DSQ_FINISH_NONE && spins < 100000; spins++) {
        int k = dsq_srv_wait(r, g->ev + g->n, 256 - g->n, 200, &g->fin);
        g->n += k;
        assert_true(g->n < 256);
    }
    assert_int_not_equal(g->fin, DSQ_FINISH_NONE);
}

static dsq_srv_params greedy(int max_tokens)
{
    dsq_srv_params p;
    memset(&p, 0, sizeof p);
    dsq_sampler_params_default(&p.sp);
    p.max_tokens = max_tokens;
    p.logprobs = -1;
    return p;
}

static dsq_model *open_model(void)
{
    char *path = dsq_test_default_model();
    if (!path) return NULL;
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    free(path);
    return m;
}

static const int32_t g_a[3] = {504, 3458, 314}, g_b[3] = {1204, 28, 2765};

static void test_batched_equals_alone(void **state)
{
    (void)state;
    dsq_model *m = open_model();
    if (!m) DSQ_TEST_SKIP();
    dsq_srv_opts o = {2, 64, 4, 64, 2, false};
    dsq_srv *e;
    expect_ok(dsq_srv_new(m, &o, &e));
    dsq_srv_params p = greedy(8);
    dsq_srv_req *a, *b;
    got alone, ga, gb;
    expect_ok(dsq_srv_submit(e, g_a, 3, &p, &a));
    drain(a, &alone);
    dsq_srv_release(a);
    assert_int_equal(alone.fin, DSQ_FINISH_LENGTH);
    assert_int_equal(alone.n, 8);
    expect_ok(dsq_srv_submit(e, g_b, 3, &p, &b));
    expect_ok(dsq_srv_submit(e, g_a, 3, &p, &a));
    drain(a, &ga);
    drain(b, &gb);
    assert_int_equal(ga.n, 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(ga.ev[i].id, alone.ev[i].id);
        assert_false(ga.ev[i].prompt);
        assert_true(isnan(ga.ev[i].logprob)); /* not asked */
    }
    dsq_srv_release(a);
    dsq_srv_release(b);
    dsq_srv_counts c;
    dsq_srv_counts_get(e, &c);
    assert_int_equal(c.running, 0);
    assert_int_equal(c.waiting, 0);
    assert_int_equal(c.kv_used, 0);
    assert_int_equal(c.requests_finished[DSQ_FINISH_LENGTH], 3);
    assert_int_equal(c.generation_tokens, 24);
    assert_int_equal(c.prompt_tokens, 9);
    dsq_srv_free(e);
    dsq_model_close(m);
}

static void test_stop_echo_and_logprobs(void **state)
{
    (void)state;
    dsq_model *m = open_model();
    if (!m) DSQ_TEST_SKIP();
    dsq_srv_opts o = {2, 64, 4, 2, 2, false}; /* prompt chunks of 2: the echo spans steps */
    dsq_srv *e;
    expect_ok(dsq_srv_new(m, &o, &e));
    dsq_srv_params p = greedy(6);
    dsq_srv_req *r;
    got first, g;
    expect_ok(dsq_srv_submit(e, g_a, 3, &p, &r));
    drain(r, &first);
    dsq_srv_release(r);
    /* the first greedy token as a stop id: one event, flagged, finish STOP */
    int32_t stop = first.ev[0].id;
    p.stop_ids = &stop;
    p.n_stop_ids = 1;
    p.logprobs = 3;
    p.echo_logprobs = true;
    expect_ok(dsq_srv_submit(e, g_a, 3, &p, &r));
    drain(r, &g);
    dsq_srv_release(r);
    assert_int_equal(g.fin, DSQ_FINISH_STOP);
    assert_int_equal(g.n, 4); /* 3 echoed prompt tokens, then the stop token */
    for (int i = 0; i < 3; i++) {
        assert_true(g.ev[i].prompt);
        assert_int_equal(g.ev[i].id, g_a[i]);
        assert_true(i == 0 ? isnan(g.ev[i].logprob) : g.ev[i].logprob <= 0);
    }
    assert_true(g.ev[3].stop && !g.ev[3].prompt && g.ev[3].id == stop);
    assert_int_equal(g.ev[3].n_top, 3);
    assert_int_equal(g.ev[3].top_id[0], stop); /* greedy: the top alternative */
    assert_true(fabsf(g.ev[3].top_lp[0] - g.ev[3].logprob) < 1e-6f);
    assert_true(g.ev[3].top_lp[0] >= g.ev[3].top_lp[1] && g.ev[3].top_lp[1] >= g.ev[3].top_lp[2]);
    /* ignore_eos: the same stop id no longer ends it */
    p.ignore_eos = true;
    expect_ok(dsq_srv_submit(e, g_a, 3, &p, &r));
    drain(r, &g);
    dsq_srv_release(r);
    assert_int_equal(g.fin, DSQ_FINISH_LENGTH);
    assert_int_equal(g.n, 3 + 6);
    /* max_tokens 0 with echo: the prompt only */
    p.max_tokens = 0;
    expect_ok(dsq_srv_submit(e, g_b, 3, &p, &r));
    drain(r, &g);
    dsq_srv_release(r);
    assert_int_equal(g.fin, DSQ_FINISH_LENGTH);
    assert_int_equal(g.n, 3);
    dsq_srv_free(e);
    dsq_model_close(m);
}

static void test_refusals_queue_and_cancel(void **state)
{
    (void)state;
    dsq_model *m = open_model();
    if (!m) DSQ_TEST_SKIP();
    dsq_srv_opts o = {1, 16, 1, 16, 2, false};
    dsq_srv *e;
    expect_ok(dsq_srv_new(m, &o, &e));
    dsq_srv_params p = greedy(12);
    dsq_srv_req *r[3] = {NULL, NULL, NULL}, *x = NULL;
    int32_t long_prompt[16] = {0}, bad[2] = {1, 1 << 30};
    assert_int_equal(dsq_srv_submit(e, long_prompt, 16, &p, &x), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "context is 16"));
    assert_int_equal(dsq_srv_submit(e, g_a, 3, &p, &x), DSQ_OK); /* 3 + 12 <= 16 */
    got g;
    drain(x, &g);
    dsq_srv_release(x);
    p.max_tokens = 14;
    assert_int_equal(dsq_srv_submit(e, g_a, 3, &p, &x), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "max_tokens 14"));
    p.max_tokens = 12;
    assert_int_equal(dsq_srv_submit(e, bad, 2, &p, &x), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "outside the vocabulary"));
    /* one slot, one waiting place: the third is refused while the first two stand */
    p.ignore_eos = true;
    int refused = 0;
    for (int i = 0; i < 3; i++)
        if (dsq_srv_submit(e, g_b, 3, &p, &r[i]) == DSQ_ERR_UNSUPPORTED) refused++;
    assert_true(refused >= 1);
    assert_non_null(strstr(dsq_errmsg(), "queue is full"));
    /* the waiting one is cancelled: it ends without a token */
    assert_non_null(r[0]);
    if (r[1]) {
        dsq_srv_cancel(r[1]);
        drain(r[1], &g);
        assert_int_equal(g.fin, DSQ_FINISH_CANCELLED);
    }
    drain(r[0], &g);
    assert_int_equal(g.fin, DSQ_FINISH_LENGTH);
    for (int i = 0; i < 3; i++) dsq_srv_release(r[i]);
    dsq_srv_free(e);
    dsq_model_close(m);
}

/* Submitters that let go early and a shutdown with requests running leave
 * nothing behind (ASan's leak check), and the engine refuses what comes after. */
static void test_release_early_and_shutdown(void **state)
{
    (void)state;
    dsq_model *m = open_model();
    if (!m) DSQ_TEST_SKIP();
    dsq_srv_opts o = {2, 64, 8, 64, 2, false};
    dsq_srv *e;
    expect_ok(dsq_srv_new(m, &o, &e));
    dsq_srv_params p = greedy(40);
    p.ignore_eos = true;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    dsq_srv_req *r[4];
    for (int i = 0; i < 4; i++) expect_ok(dsq_srv_submit(e, i % 2 ? g_a : g_b, 3, &p, &r[i]));
    dsq_srv_release(r[0]); /* gone before its first token */
    dsq_srv_tok t;
    dsq_srv_finish fin;
    while (dsq_srv_wait(r[1], &t, 1, 200, &fin) == 0 && fin == DSQ_FINISH_NONE) {
    }
    dsq_srv_shutdown(e);
    got g;
    for (int i = 1; i < 4; i++) {
        drain(r[i], &g);
        assert_true(g.fin == DSQ_FINISH_CANCELLED || g.fin == DSQ_FINISH_LENGTH);
    }
    dsq_srv_req *late = NULL;
    assert_int_equal(dsq_srv_submit(e, g_a, 3, &p, &late), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "shutting down"));
    for (int i = 1; i < 4; i++) dsq_srv_release(r[i]);
    dsq_srv_free(e);
    dsq_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_stop_echo_and_logprobs),
        cmocka_unit_test(test_refusals_queue_and_cancel),
        cmocka_unit_test(test_release_early_and_shutdown),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
