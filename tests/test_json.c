/* core/json.c: the well-formedness check must accept what cJSON parses and
 * never accept what cJSON rejects (else a bad file would be reported as out
 * of memory), and dsq_json_parse must say which of the two a NULL was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/json.h"

static bool cjson_accepts(const char *t)
{
    cJSON *j = cJSON_ParseWithLengthOpts(t, strlen(t), NULL, false);
    cJSON_Delete(j);
    return j != NULL;
}

static void test_against_cjson(void **state)
{
    (void)state;
    static const char *const good[] = {
        "{}", "[]", " \t\n{\"a\": [1, -2.5e+3, 0, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"]} trailing",
        "\xEF\xBB\xBF{\"bom\": 1}", "\"s\"", "0", "-0.0E-7", "[[[]]]", "{\"k\": {\"k\": {}}}",
    };
    static const char *const bad[] = {
        "", " ", "{", "[1,]", "{\"a\" 1}", "{\"a\": }", "{1: 2}", "[1 2]", "\"open", "\"bad \\q escape\"",
        "\"\\udc00 low first\"", "\"\\ud83d high alone\"", "nul", "tru", "-", "[-]", "{\"a\": 1,}", "]",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (!cjson_accepts(good[i])) fail_msg("cJSON rejects good case %zu", i);
        if (!dsq_json_well_formed(good[i], strlen(good[i]))) fail_msg("rejected: %s", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (dsq_json_well_formed(bad[i], strlen(bad[i]))) fail_msg("accepted: %s", bad[i]);
        if (!cjson_accepts(bad[i])) continue;
        fail_msg("cJSON accepts bad case %s (fine, but the case teaches nothing)", bad[i]);
    }
}

static void test_nesting_limit(void **state)
{
    (void)state;
    size_t n = CJSON_NESTING_LIMIT + 1;
    char *t = malloc(2 * n + 1);
    memset(t, '[', n);
    memset(t + n, ']', n);
    t[2 * n] = '\0';
    assert_false(cjson_accepts(t));
    assert_false(dsq_json_well_formed(t, 2 * n));
    free(t);
}

static void test_parse_reason(void **state)
{
    (void)state;
    dsq_status why;
    cJSON *j = dsq_json_parse("{\"a\": 1}", 8, NULL, &why);
    assert_non_null(j);
    assert_int_equal(why, DSQ_OK);
    cJSON_Delete(j);
    assert_null(dsq_json_parse("{\"a\": }", 7, NULL, &why));
    assert_int_equal(why, DSQ_ERR_FORMAT);
    /* Only the length given is read. */
    assert_null(dsq_json_parse("{\"a\": 1}", 4, NULL, &why));
    assert_int_equal(why, DSQ_ERR_FORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cjson),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_parse_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
