/* The well-formedness check is a recogniser of the grammar cJSON parses
 * (cJSON.c 1.7: whitespace is any byte <= 32, a UTF-8 BOM is skipped, the
 * value may be followed by anything, nesting stops at CJSON_NESTING_LIMIT).
 * It must never accept what cJSON rejects, or a malformed file would be
 * reported as out of memory; where JSON and cJSON differ (cJSON takes numbers
 * like "01" or "1." through strtod) it is stricter, which only turns such a
 * rare out-of-memory into "not valid JSON". */
#include "core/json.h"

#include <stdbool.h>
#include <string.h>

typedef struct cursor {
    const unsigned char *p, *end;
    int depth;
} cursor;

static bool value(cursor *c);
static bool number_chars(cursor *c);

static void skip_ws(cursor *c)
{
    while (c->p < c->end && *c->p <= 32) c->p++;
}

static bool literal(cursor *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return false;
    c->p += n;
    return true;
}

static bool is_digit(const cursor *c) { return c->p < c->end && *c->p >= '0' && *c->p <= '9'; }

static bool digits(cursor *c)
{
    if (!is_digit(c)) return false;
    while (is_digit(c)) c->p++;
    return true;
}

/* RFC 8259 numbers: all of them are also numbers to cJSON's strtod, up to
 * the 63 characters cJSON copies for it. */
static bool number(cursor *c)
{
    const unsigned char *start = c->p;
    if (!number_chars(c)) return false;
    return c->p - start <= 63;
}

static bool number_chars(cursor *c)
{
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p < c->end && *c->p == '0') c->p++;
    else if (!digits(c)) return false;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!digits(c)) return false;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (!digits(c)) return false;
    }
    return true;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int d = p[i] >= '0' && p[i] <= '9'   ? p[i] - '0'
                : p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10
                : p[i] >= 'A' && p[i] <= 'F' ? p[i] - 'A' + 10
                                             : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* \uXXXX, with cJSON's surrogate rules: a low surrogate may not come first,
 * a high one must be followed by \u and a low one. */
static bool unicode_escape(cursor *c)
{
    if (c->end - c->p < 4) return false;
    int u = hex4(c->p);
    c->p += 4;
    if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
    if (u < 0xD800 || u > 0xDBFF) return true;
    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u') return false;
    int lo = hex4(c->p + 2);
    c->p += 6;
    return lo >= 0xDC00 && lo <= 0xDFFF;
}

static bool string(cursor *c)
{
    c->p++; /* the opening quote */
    while (c->p < c->end && *c->p != '"') {
        if (*c->p++ != '\\') continue;
        if (c->p >= c->end) return false;
        unsigned char e = *c->p++;
        if (e == 'u') {
            if (!unicode_escape(c)) return false;
        } else if (!strchr("bfnrt\"\\/", e) || e == 0) {
            return false;
        }
    }
    if (c->p >= c->end) return false;
    c->p++;
    return true;
}

/* Arrays and objects: open, items separated by commas, close. */
static bool container(cursor *c, unsigned char close, bool keyed)
{
    if (c->depth >= CJSON_NESTING_LIMIT) return false;
    c->depth++;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        c->depth--;
        return true;
    }
    for (;;) {
        skip_ws(c);
        if (keyed) {
            if (c->p >= c->end || *c->p != '"' || !string(c)) return false;
            skip_ws(c);
            if (c->p >= c->end || *c->p++ != ':') return false;
            skip_ws(c);
        }
        if (!value(c)) return false;
        skip_ws(c);
        if (c->p >= c->end) return false;
        unsigned char sep = *c->p++;
        if (sep == close) break;
        if (sep != ',') return false;
    }
    c->depth--;
    return true;
}

static bool value(cursor *c)
{
    if (c->p >= c->end) return false;
    switch (*c->p) {
    case '"': return string(c);
    case '{': return container(c, '}', true);
    case '[': return container(c, ']', false);
    case 'n': return literal(c, "null");
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    default: return number(c);
    }
}

bool dsq_json_well_formed(const char *text, size_t len)
{
    if (!text) return false;
    cursor c = {(const unsigned char *)text, (const unsigned char *)text + len, 0};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) c.p += 3;
    skip_ws(&c);
    return value(&c);
}

cJSON *dsq_json_parse(const char *text, size_t len, const char **end, dsq_status *why)
{
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, end, false);
    *why = j ? DSQ_OK : dsq_json_well_formed(text, len) ? DSQ_ERR_NOMEM : DSQ_ERR_FORMAT;
    return j;
}
