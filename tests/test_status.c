/* core/status.h: the stop code and the try macros. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"

static dsq_status fails(void) { return dsq_fail(DSQ_ERR_FORMAT, "bad magic"); }
static dsq_status stops(void) { return DSQ_STOP; }
static dsq_status succeeds(void) { return DSQ_OK; }

static int g_after; /* counts how often a wrapper ran past its try */

static dsq_status with_ctx(dsq_status (*f)(void), const char *name)
{
    DSQ_TRY_CTX(f(), "%s: tensor %d", name, 7);
    g_after++;
    return DSQ_OK;
}

static dsq_status with_ctx_plain(dsq_status (*f)(void))
{
    DSQ_TRY_CTX(f(), "model.gguf");
    g_after++;
    return DSQ_OK;
}

static dsq_status plain(dsq_status (*f)(void))
{
    DSQ_TRY(f());
    g_after++;
    return DSQ_OK;
}

static void test_try_ctx_prefixes_failures(void **state)
{
    (void)state;
    g_after = 0;
    assert_int_equal(with_ctx(fails, "a.gguf"), DSQ_ERR_FORMAT);
    assert_string_equal(dsq_errmsg(), "a.gguf: tensor 7: bad magic");
    assert_int_equal(with_ctx_plain(fails), DSQ_ERR_FORMAT);
    assert_string_equal(dsq_errmsg(), "model.gguf: bad magic");
    assert_int_equal(g_after, 0);
}

/* A stop carries no message, so there is nothing to prefix: the message stays
 * what it was (here: empty) and the code comes back unchanged. */
static void test_stop_passes_through_silently(void **state)
{
    (void)state;
    g_after = 0;
    dsq_clear_error();
    assert_int_equal(with_ctx(stops, "a.gguf"), DSQ_STOP);
    assert_string_equal(dsq_errmsg(), "");
    assert_int_equal(plain(stops), DSQ_STOP);
    assert_string_equal(dsq_errmsg(), "");
    assert_int_equal(g_after, 0);
}

static void test_success_runs_on(void **state)
{
    (void)state;
    g_after = 0;
    dsq_clear_error();
    assert_int_equal(with_ctx(succeeds, "a.gguf"), DSQ_OK);
    assert_int_equal(plain(succeeds), DSQ_OK);
    assert_int_equal(g_after, 2);
    assert_string_equal(dsq_errmsg(), "");
}

static void test_is_error_and_names(void **state)
{
    (void)state;
    assert_false(dsq_is_error(DSQ_OK));
    assert_false(dsq_is_error(DSQ_STOP));
    for (int s = DSQ_ERR_IO; s <= DSQ_ERR_INTERNAL; s++) assert_true(dsq_is_error((dsq_status)s));
    assert_string_equal(dsq_status_name(DSQ_STOP), "stopped");
    for (int s = 0; s < DSQ_STATUS_COUNT; s++) assert_non_null(dsq_status_name((dsq_status)s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_try_ctx_prefixes_failures),
        cmocka_unit_test(test_stop_passes_through_silently),
        cmocka_unit_test(test_success_runs_on),
        cmocka_unit_test(test_is_error_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
