/* core/utf8.h: the strict validator against a reference built from the
 * encoder's side (every scalar value encoded by the textbook rules), over
 * every 1-, 2- and 3-byte string, random 4-byte ones, and hostile cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/utf8.h"
#include "tests/helpers/testutil.h"

/* The textbook encoder, for any value below 2^21 (surrogates included). */
static size_t encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12), out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18), out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static bool is_scalar(uint32_t cp) { return cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF); }

static size_t seq(const uint8_t *b, size_t n) { return dsq_utf8_seq_len((const char *)b, n); }

/* Every value encodes to a sequence the validator takes whole exactly when
 * it is a Unicode scalar value (surrogates and > U+10FFFF refused). */
static void test_every_code_point(void **state)
{
    (void)state;
    for (uint32_t cp = 0; cp < 0x140000; cp++) {
        uint8_t b[4];
        size_t n = encode(cp, b);
        size_t got = seq(b, n);
        if (got != (is_scalar(cp) ? n : 0)) fail_msg("U+%04X: seq_len %zu", cp, got);
        if (is_scalar(cp) && seq(b, n - 1 + (n == 1)) != (n == 1 ? 1 : 0))
            fail_msg("U+%04X cut short was accepted", cp);
    }
}

/* Every 1-, 2- and 3-byte string: a prefix is taken whole exactly when it is
 * the encoding of a scalar value of that length (so overlongs, stray
 * continuations and C0/C1/F5..FF leads are all refused). */
static void test_every_short_string(void **state)
{
    (void)state;
    uint8_t *is3 = calloc(1u << 24, 1), is2[1u << 16] = {0};
    assert_non_null(is3);
    for (uint32_t cp = 0; cp < 0x10000; cp++) {
        uint8_t b[4];
        size_t n = encode(cp, b);
        if (!is_scalar(cp)) continue;
        if (n == 2) is2[b[0] << 8 | b[1]] = 1;
        if (n == 3) is3[(uint32_t)b[0] << 16 | b[1] << 8 | b[2]] = 1;
    }
    for (uint32_t x = 0; x < 256; x++) {
        uint8_t b[1] = {(uint8_t)x};
        assert_int_equal(seq(b, 1), x < 0x80 ? 1 : 0);
    }
    for (uint32_t x = 0; x < 1u << 16; x++) {
        uint8_t b[2] = {(uint8_t)(x >> 8), (uint8_t)x};
        size_t want = b[0] < 0x80 ? 1 : is2[x] ? 2 : 0;
        if (seq(b, 2) != want) fail_msg("%02x %02x: got %zu want %zu", b[0], b[1], seq(b, 2), want);
    }
    for (uint32_t x = 0; x < 1u << 24; x++) {
        uint8_t b[3] = {(uint8_t)(x >> 16), (uint8_t)(x >> 8), (uint8_t)x};
        size_t want = b[0] < 0x80 ? 1 : is2[x >> 8] ? 2 : is3[x] ? 3 : 0;
        if (seq(b, 3) != want) fail_msg("%02x %02x %02x: got %zu want %zu", b[0], b[1], b[2], seq(b, 3), want);
    }
    free(is3);
}

/* 4-byte strings: random ones, plus every lead F0..FF with every second byte. */
static void test_four_byte_strings(void **state)
{
    (void)state;
    uint64_t rng = 42;
    for (int i = 0; i < 4000000; i++) {
        uint32_t r = (uint32_t)dsq_test_rand(&rng);
        uint8_t b[4] = {(uint8_t)(0xF0 | (r >> 24 & 0x0F)), (uint8_t)(r >> 16), (uint8_t)(r >> 8), (uint8_t)r};
        if (i & 1) b[1] = (uint8_t)(0x80 | (b[1] & 0x3F)), b[2] = (uint8_t)(0x80 | (b[2] & 0x3F)),
                   b[3] = (uint8_t)(0x80 | (b[3] & 0x3F));
        bool shape = b[0] <= 0xF7 && (b[1] & 0xC0) == 0x80 && (b[2] & 0xC0) == 0x80 && (b[3] & 0xC0) == 0x80;
        uint32_t cp = (uint32_t)(b[0] & 7) << 18 | (uint32_t)(b[1] & 0x3F) << 12 | (uint32_t)(b[2] & 0x3F) << 6 |
                      (b[3] & 0x3F);
        size_t want = shape && cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
        if (seq(b, 4) != want) fail_msg("%02x %02x %02x %02x: got %zu", b[0], b[1], b[2], b[3], seq(b, 4));
    }
}

static void test_hostile_strings(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t bad_at; /* (size_t)-1: valid */
    } cases[] = {
        {"", (size_t)-1},
        {"plain ascii", (size_t)-1},
        {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", (size_t)-1},
        {"\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF", (size_t)-1}, /* U+D7FF U+E000 U+FFFF U+10FFFF */
        {"a\xC0\x80", 1},                 /* overlong NUL */
        {"a\xC1\xBF", 1},                 /* overlong U+007F */
        {"ab\xE0\x80\x80", 2},            /* overlong 3-byte */
        {"\xE0\x9F\xBF", 0},              /* overlong U+07FF */
        {"\xF0\x80\x80\x80", 0},          /* overlong 4-byte */
        {"\xF0\x8F\xBF\xBF", 0},          /* overlong U+FFFF */
        {"x\xED\xA0\x80", 1},             /* U+D800, a lone high surrogate */
        {"x\xED\xBF\xBF", 1},             /* U+DFFF */
        {"\xED\xA0\xBD\xED\xB8\x80", 0},  /* CESU-8 surrogate pair */
        {"\xF4\x90\x80\x80", 0},          /* U+110000 */
        {"\xF5\x80\x80\x80", 0},          /* lead above F4 */
        {"\xF8\x88\x80\x80\x80", 0},      /* 5-byte form */
        {"\xFE\xFF", 0},                  /* never in UTF-8 */
        {"ok\x80", 2},                    /* stray continuation */
        {"\xC3", 0},                      /* cut off */
        {"abc\xE2\x82", 3},               /* cut off at the end */
        {"\xF0\x9F\x98", 0},              /* cut off 4-byte */
        {"\xE2\x28\xA1", 0},              /* continuation missing in the middle */
        {"\xC3\xA9\xC3", 2},              /* valid, then cut off */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].s);
        size_t want = cases[i].bad_at == (size_t)-1 ? n : cases[i].bad_at;
        size_t got = dsq_utf8_invalid_at(cases[i].s, n);
        if (got != want) fail_msg("case %zu: invalid_at %zu, want %zu", i, got, want);
        assert_int_equal(dsq_utf8_valid(cases[i].s, n), cases[i].bad_at == (size_t)-1);
    }
    /* NUL is U+0000, text like any other: callers that cannot hold it check. */
    assert_true(dsq_utf8_valid("a\0b", 3));
    assert_int_equal(dsq_utf8_seq_len("", 0), 0);
    /* n is authoritative: bytes past it are not read. */
    assert_int_equal(dsq_utf8_seq_len("\xC3\xA9", 1), 0);
}

/* Each maximal ill-formed subpart becomes one U+FFFD, as Python's
 * bytes.decode("utf-8", "replace") does (checked against it on 200000
 * random strings while writing this; these are the instructive cases). */
static void test_repair(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xC3\xA9", "caf\xC3\xA9"},
        {"a\x80" "b", "a\xEF\xBF\xBD" "b"},                               /* stray continuation */
        {"\xE2\x82", "\xEF\xBF\xBD"},                                 /* cut-off 3-byte: one */
        {"\xE2\x82z", "\xEF\xBF\xBD" "z"},
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},                             /* cut-off 4-byte: one */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                     /* overlong: C0 never starts one */
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},   /* E0 80: 80 cannot follow E0 */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},   /* surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xFF\xC3\xA9", "\xEF\xBF\xBD\xC3\xA9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r = dsq_utf8_repair(cases[i].in, strlen(cases[i].in));
        assert_non_null(r);
        if (strcmp(r, cases[i].out)) fail_msg("case %zu repaired wrongly", i);
        assert_true(dsq_utf8_valid(r, strlen(r)));
        free(r);
    }
    char *r = dsq_utf8_repair("", 0);
    assert_string_equal(r, "");
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_point),
        cmocka_unit_test(test_every_short_string),
        cmocka_unit_test(test_four_byte_strings),
        cmocka_unit_test(test_hostile_strings),
        cmocka_unit_test(test_repair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
