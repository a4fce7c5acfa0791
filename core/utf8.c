#include "core/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t dsq_utf8_seq_len(const char *s, size_t n)
{
    if (n == 0) return 0;
    const uint8_t *p = (const uint8_t *)s;
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3Fu);
    }
    /* The decoded value catches what the lead byte alone cannot: overlong
     * 3- and 4-byte forms, surrogates, and F4 9x..BF (above U+10FFFF). */
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t dsq_utf8_invalid_at(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs are the common case: skip them without decoding. */
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = dsq_utf8_seq_len(s + i, n - i);
        if (k == 0) return i;
        i += k;
    }
    return n;
}

/* Bytes of the ill-formed sequence at p to replace as one: a lead byte and
 * as many following bytes as could still have continued it (Unicode 3.9,
 * "maximal subpart"), or the single byte when it cannot start one. */
static size_t maximal_subpart(const uint8_t *p, size_t n)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 1;
    }
    size_t k = 1;
    if (k < n && p[k] >= lo && p[k] <= hi)
        for (k++; k < len && k < n && (p[k] & 0xC0) == 0x80;) k++;
    return k;
}

char *dsq_utf8_repair(const char *s, size_t n)
{
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = dsq_utf8_seq_len(s + i, n - i);
        if (k > 0) {
            memcpy(out + o, s + i, k);
            o += k, i += k;
            continue;
        }
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += maximal_subpart((const uint8_t *)s + i, n - i);
    }
    out[o] = '\0';
    return out;
}
