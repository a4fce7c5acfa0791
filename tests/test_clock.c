/* core/clock.h: dsq_now_s is monotonic and counts seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>

#include <cmocka.h>

#include "core/clock.h"

static void test_never_goes_back(void **state)
{
    (void)state;
    double prev = dsq_now_s();
    for (int i = 0; i < 100000; i++) {
        double t = dsq_now_s();
        assert_true(t >= prev);
        prev = t;
    }
}

/* A 20 ms sleep reads as 20 ms (give or take a loaded machine): the unit is seconds. */
static void test_counts_seconds(void **state)
{
    (void)state;
    double t0 = dsq_now_s();
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, NULL);
    double el = dsq_now_s() - t0;
    assert_true(el >= 0.019);
    assert_true(el < 5.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_goes_back),
        cmocka_unit_test(test_counts_seconds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
