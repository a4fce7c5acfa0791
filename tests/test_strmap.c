/* core/strmap.h against a linear-search reference: first value wins, keys
 * are byte strings (NUL and prefixes distinct), growth keeps every entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/strmap.h"
#include "tests/helpers/testutil.h"

static void test_basics(void **state)
{
    (void)state;
    dsq_strmap m = {0};
    assert_int_equal(dsq_strmap_get(&m, "a", 1), -1); /* empty map */
    int64_t prev = 99;
    assert_int_equal(dsq_strmap_put(&m, "a", 1, 5, &prev), DSQ_OK);
    assert_int_equal(prev, -1);
    assert_int_equal(dsq_strmap_put(&m, "a", 1, 6, &prev), DSQ_OK); /* the first value stays */
    assert_int_equal(prev, 5);
    assert_int_equal(dsq_strmap_get(&m, "a", 1), 5);
    /* Byte strings: a NUL inside, a prefix, the empty key are all distinct keys. */
    assert_int_equal(dsq_strmap_put(&m, "a\0b", 3, 7, NULL), DSQ_OK);
    assert_int_equal(dsq_strmap_put(&m, "", 0, 8, NULL), DSQ_OK);
    assert_int_equal(dsq_strmap_put(&m, "ab", 2, 9, NULL), DSQ_OK);
    assert_int_equal(dsq_strmap_get(&m, "a\0b", 3), 7);
    assert_int_equal(dsq_strmap_get(&m, "", 0), 8);
    assert_int_equal(dsq_strmap_get(&m, "ab", 2), 9);
    assert_int_equal(dsq_strmap_get(&m, "abc", 2), 9); /* len is authoritative */
    assert_int_equal(dsq_strmap_get(&m, "b", 1), -1);
    assert_int_equal(m.n, 4);
    dsq_strmap_free(&m);
    assert_int_equal(dsq_strmap_get(&m, "a", 1), -1); /* freed is empty again */
}

/* Many keys, some repeated, put with and without a reserve, against a reference. */
static void test_against_reference(void **state)
{
    (void)state;
    enum { N = 20000 };
    char (*keys)[16] = malloc(N * sizeof *keys);
    size_t *lens = malloc(N * sizeof *lens);
    int64_t *want = malloc(N * sizeof *want);
    assert_true(keys && lens && want);
    uint64_t rng = 1;
    for (int i = 0; i < N; i++) {
        /* short keys from a small alphabet, so repeats and shared prefixes are common */
        size_t len = (size_t)(dsq_test_rand(&rng) % 5);
        for (size_t k = 0; k < len; k++) keys[i][k] = (char)("ab\0c"[dsq_test_rand(&rng) % 4]);
        lens[i] = len;
        want[i] = i;
        for (int j = 0; j < i; j++)
            if (lens[j] == len && !memcmp(keys[j], keys[i], len)) {
                want[i] = want[j];
                break;
            }
    }
    for (int reserve = 0; reserve < 2; reserve++) {
        dsq_strmap m = {0};
        if (reserve) assert_int_equal(dsq_strmap_reserve(&m, N), DSQ_OK);
        size_t cap0 = m.cap;
        for (int i = 0; i < N; i++) {
            int64_t prev;
            assert_int_equal(dsq_strmap_put(&m, keys[i], lens[i], i, &prev), DSQ_OK);
            assert_int_equal(prev, want[i] == i ? -1 : want[i]);
        }
        if (reserve) assert_int_equal(m.cap, cap0); /* no growth after a reserve */
        for (int i = 0; i < N; i++) assert_int_equal(dsq_strmap_get(&m, keys[i], lens[i]), want[i]);
        dsq_strmap_free(&m);
    }
    free(keys);
    free(lens);
    free(want);
}

/* Distinct keys through many growth steps. */
static void test_growth(void **state)
{
    (void)state;
    enum { N = 100000 };
    char (*keys)[16] = malloc(N * sizeof *keys);
    assert_non_null(keys);
    dsq_strmap m = {0};
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        assert_int_equal(dsq_strmap_put(&m, keys[i], strlen(keys[i]), i, NULL), DSQ_OK);
    }
    assert_int_equal(m.n, N);
    assert_true(m.mask + 1 >= 2 * m.n); /* at most half full */
    for (int i = 0; i < N; i++) assert_int_equal(dsq_strmap_get(&m, keys[i], strlen(keys[i])), i);
    assert_int_equal(dsq_strmap_get(&m, "k100000", 7), -1);
    dsq_strmap_free(&m);
    free(keys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
