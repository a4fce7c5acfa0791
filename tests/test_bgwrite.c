/* core/bgwrite: writes on a thread of their own. The bytes arrive in the
 * order handed over, a submit returns while the write is still running, a
 * failure comes back (with its message) on the producer's next call and stops
 * every later write, and stop finishes what is pending. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/bgwrite.h"
#include "tests/helpers/testutil.h"

typedef struct sink {
    uint8_t log[1 << 16];
    size_t len;
    int calls, fail_at; /* the fail_at-th call (1-based) fails; 0: none */
    /* the overlap case: the write waits for the producer's go */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold, go, saw_go;
} sink;

static dsq_status sink_write(void *user, const void *buf, uint64_t n)
{
    sink *s = user;
    s->calls++;
    if (s->hold) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        pthread_mutex_lock(&s->mu);
        while (!s->go)
            if (pthread_cond_timedwait(&s->cv, &s->mu, &until)) break;
        s->saw_go = s->go;
        pthread_mutex_unlock(&s->mu);
    }
    if (s->calls == s->fail_at) return dsq_fail(DSQ_ERR_IO, "out.gguf: write: No space left on device (call %d)", s->calls);
    if (s->len + n > sizeof s->log) return dsq_fail(DSQ_ERR_INTERNAL, "sink full");
    memcpy(s->log + s->len, buf, n);
    s->len += n;
    return DSQ_OK;
}

static sink *new_sink(void)
{
    sink *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

static void free_sink(sink *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Two buffers in turn, as the GGUF quantizer uses them: each refilled only
 * after the submit that followed it returned. */
static void test_order(void **state)
{
    (void)state;
    sink *s = new_sink();
    dsq_bgwrite *b = NULL;
    assert_int_equal(dsq_bgwrite_start(&b, sink_write, s), DSQ_OK);
    uint8_t buf[2][300], want[1 << 16];
    size_t want_len = 0;
    for (int k = 0; k < 150; k++) {
        uint8_t *p = buf[k % 2];
        size_t n = 1 + (size_t)(k * 37) % 300;
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(k * 7 + i);
        memcpy(want + want_len, p, n);
        want_len += n;
        assert_int_equal(dsq_bgwrite_submit(b, p, n), DSQ_OK);
        if (k % 50 == 49) assert_int_equal(dsq_bgwrite_wait(b), DSQ_OK); /* a write of the caller's own */
    }
    assert_int_equal(dsq_bgwrite_wait(b), DSQ_OK);
    assert_int_equal(s->calls, 150);
    assert_int_equal(s->len, want_len);
    assert_memory_equal(s->log, want, want_len);
    dsq_bgwrite_stop(b);
    free_sink(s);
}

/* The submit returns before the write ends: the write waits for a go the
 * producer gives only after its submit returned (10 s at most). */
static void test_overlap(void **state)
{
    (void)state;
    sink *s = new_sink();
    s->hold = true;
    dsq_bgwrite *b = NULL;
    assert_int_equal(dsq_bgwrite_start(&b, sink_write, s), DSQ_OK);
    assert_int_equal(dsq_bgwrite_submit(b, "abc", 3), DSQ_OK);
    pthread_mutex_lock(&s->mu);
    s->go = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    assert_int_equal(dsq_bgwrite_wait(b), DSQ_OK);
    assert_true(s->saw_go);
    assert_int_equal(s->len, 3);
    dsq_bgwrite_stop(b);
    free_sink(s);
}

/* The third write fails: the fourth submit returns its status and message
 * and is not written, nor is anything after; wait says the same. */
static void test_failure(void **state)
{
    (void)state;
    sink *s = new_sink();
    s->fail_at = 3;
    dsq_bgwrite *b = NULL;
    assert_int_equal(dsq_bgwrite_start(&b, sink_write, s), DSQ_OK);
    assert_int_equal(dsq_bgwrite_submit(b, "aa", 2), DSQ_OK);
    assert_int_equal(dsq_bgwrite_submit(b, "bb", 2), DSQ_OK);
    assert_int_equal(dsq_bgwrite_submit(b, "cc", 2), DSQ_OK); /* fails on the thread */
    dsq_fail(DSQ_ERR_ARG, "an unrelated message of the producer's");
    assert_int_equal(dsq_bgwrite_submit(b, "dd", 2), DSQ_ERR_IO);
    assert_non_null(strstr(dsq_errmsg(), "No space left on device (call 3)"));
    assert_int_equal(dsq_bgwrite_submit(b, "ee", 2), DSQ_ERR_IO);
    assert_int_equal(dsq_bgwrite_wait(b), DSQ_ERR_IO);
    assert_non_null(strstr(dsq_errmsg(), "out.gguf"));
    assert_int_equal(s->calls, 3);
    assert_int_equal(s->len, 4);
    assert_memory_equal(s->log, "aabb", 4);
    dsq_bgwrite_stop(b);
    free_sink(s);
}

/* stop with a write pending finishes it; stop(NULL) is a no-op. */
static void test_stop_pending(void **state)
{
    (void)state;
    sink *s = new_sink();
    dsq_bgwrite *b = NULL;
    assert_int_equal(dsq_bgwrite_start(&b, sink_write, s), DSQ_OK);
    static const char big[4096] = "tail";
    assert_int_equal(dsq_bgwrite_submit(b, big, sizeof big), DSQ_OK);
    dsq_bgwrite_stop(b);
    assert_int_equal(s->len, sizeof big);
    assert_memory_equal(s->log, "tail", 4);
    dsq_bgwrite_stop(NULL);
    free_sink(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_failure),
        cmocka_unit_test(test_stop_pending),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
