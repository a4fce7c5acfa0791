/* core/grow.h: doubling growth, overflow refused without touching the array. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/grow.h"

static void test_doubles_and_keeps_contents(void **state)
{
    (void)state;
    int32_t *v = NULL;
    size_t cap = 0, n = 0;
    size_t caps_seen[8], k = 0;
    for (int32_t i = 0; i < 1000; i++) {
        size_t before = cap;
        int32_t *p = dsq_grow(v, &cap, n + 1, sizeof *p);
        assert_non_null(p);
        if (cap != before && k < 8) caps_seen[k++] = cap;
        v = p;
        v[n++] = i;
        assert_true(cap >= n);
    }
    for (int32_t i = 0; i < 1000; i++) assert_int_equal(v[i], i);
    /* 16, then doubling */
    assert_int_equal(caps_seen[0], 16);
    for (size_t i = 1; i < k; i++) assert_int_equal(caps_seen[i], 2 * caps_seen[i - 1]);
    /* Room already there: the same pointer, the same capacity. */
    size_t c = cap;
    assert_ptr_equal(dsq_grow(v, &cap, 10, sizeof *v), v);
    assert_int_equal(cap, c);
    /* A jump past twice the capacity goes straight to need. */
    int32_t *p = dsq_grow(v, &cap, 10 * c + 3, sizeof *v);
    assert_non_null(p);
    assert_int_equal(cap, 10 * c + 3);
    free(p);
}

static void test_overflow_leaves_array_alone(void **state)
{
    (void)state;
    size_t cap = 0;
    char *b = dsq_grow(NULL, &cap, 100, 1);
    assert_non_null(b);
    memset(b, 'x', 100);
    size_t before = cap;
    assert_null(dsq_grow(b, &cap, SIZE_MAX / 8 + 1, 8)); /* need * elem overflows */
    assert_null(dsq_grow(b, &cap, SIZE_MAX, 2));
    assert_int_equal(cap, before);
    for (int i = 0; i < 100; i++) assert_int_equal(b[i], 'x'); /* still ours, still intact */
    assert_null(dsq_grow(b, &cap, 200, 0));                    /* no element size */
    free(b);
}

static void test_need_zero(void **state)
{
    (void)state;
    size_t cap = 0;
    void *p = dsq_grow(NULL, &cap, 0, 4);
    assert_non_null(p); /* non-NULL always means room for at least one */
    assert_true(cap >= 1);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doubles_and_keeps_contents),
        cmocka_unit_test(test_overflow_leaves_array_alone),
        cmocka_unit_test(test_need_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
