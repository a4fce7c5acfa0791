/* Small containers and UTF-8 helpers for the tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "runtime/tok_internal.h"

/* ---------------------------------------------------------------- arena */

struct dsq_tok_chunk {
    dsq_tok_chunk *next;
    size_t used, cap;
    char data[];
};

#define ARENA_CHUNK (1u << 20)

char *dsq_tok_arena_dup(dsq_tok_arena *a, const char *s, size_t n)
{
    if (n >= SIZE_MAX / 2) return NULL;
    size_t need = n + 1;
    dsq_tok_chunk *c = a->head;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > ARENA_CHUNK ? need : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    char *p = c->data + c->used;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    c->used += need;
    return p;
}

void dsq_tok_arena_free(dsq_tok_arena *a)
{
    dsq_tok_chunk *c = a->head;
    while (c) {
        dsq_tok_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---------------------------------------------------------------- buffers */

dsq_status dsq_tok_buf_reserve(dsq_tok_buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->n) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: text too large");
    size_t need = b->n + extra + 1; /* room for a NUL */
    char *p = dsq_grow(b->p, &b->cap, need, 1);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", need);
    b->p = p;
    b->p[b->n] = '\0'; /* a buffer nothing is put into is still an empty string (decode of no ids) */
    return DSQ_OK;
}

dsq_status dsq_tok_buf_put(dsq_tok_buf *b, const void *data, size_t n)
{
    DSQ_TRY(dsq_tok_buf_reserve(b, n));
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return DSQ_OK;
}

void dsq_tok_buf_free(dsq_tok_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

dsq_status dsq_tokens_push(dsq_tokens *v, int32_t id)
{
    int32_t *p = dsq_grow(v->ids, &v->cap, v->n + 1, sizeof *p);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu token ids", v->n + 1);
    v->ids = p;
    v->ids[v->n++] = id;
    return DSQ_OK;
}

void dsq_tokens_free(dsq_tokens *v)
{
    if (!v) return;
    free(v->ids);
    memset(v, 0, sizeof *v);
}

dsq_status dsq_tok_spans_push(dsq_tok_spans *s, size_t start, size_t end)
{
    dsq_tok_span *p = dsq_grow(s->v, &s->cap, s->n + 1, sizeof *p);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu pieces", s->n + 1);
    s->v = p;
    s->v[s->n].start = start;
    s->v[s->n].end = end;
    s->n++;
    return DSQ_OK;
}

void dsq_tok_spans_free(dsq_tok_spans *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- UTF-8 */

static bool is_cont(const char *s, size_t n, size_t i) { return i < n && ((unsigned char)s[i] & 0xC0) == 0x80; }

uint32_t dsq_utf8_next(const char *s, size_t n, size_t *off)
{
    size_t i = *off;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *off = i + 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0 && is_cont(s, n, i + 1)) {
        *off = i + 2;
        return ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
    }
    if ((c & 0xF0) == 0xE0 && is_cont(s, n, i + 1) && is_cont(s, n, i + 2)) {
        *off = i + 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)((unsigned char)s[i + 1] & 0x3F) << 6) |
               ((unsigned char)s[i + 2] & 0x3F);
    }
    if ((c & 0xF8) == 0xF0 && is_cont(s, n, i + 1) && is_cont(s, n, i + 2) && is_cont(s, n, i + 3)) {
        *off = i + 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)((unsigned char)s[i + 1] & 0x3F) << 12) |
               ((uint32_t)((unsigned char)s[i + 2] & 0x3F) << 6) | ((unsigned char)s[i + 3] & 0x3F);
    }
    *off = i + 1;
    return 0xFFFD;
}

size_t dsq_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

dsq_status dsq_tok_sanitize(const char *in, size_t n, dsq_tok_buf *norm, dsq_tok_buf *shadow)
{
    norm->n = 0;
    shadow->n = 0;
    /* Re-encoding never grows a sequence beyond 3 bytes per input byte (U+FFFD). */
    if (n > SIZE_MAX / 4) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: text too large");
    DSQ_TRY(dsq_tok_buf_reserve(norm, 3 * n));
    DSQ_TRY(dsq_tok_buf_reserve(shadow, 3 * n));
    size_t off = 0;
    while (off < n) {
        uint32_t cp = dsq_utf8_next(in, n, &off);
        if (cp > 0x10FFFF) cp = 0xFFFD;
        char enc[4];
        size_t k = dsq_utf8_put(cp, enc);
        memcpy(norm->p + norm->n, enc, k);
        norm->n += k;
        /* PCRE2 rejects encoded surrogates; U+FFFF (unassigned, also 3 bytes)
         * falls in the same pre-tokenizer classes as a surrogate does. */
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            enc[0] = (char)0xEF;
            enc[1] = (char)0xBF;
            enc[2] = (char)0xBF;
        }
        memcpy(shadow->p + shadow->n, enc, k);
        shadow->n += k;
    }
    norm->p[norm->n] = '\0';
    shadow->p[shadow->n] = '\0';
    return DSQ_OK;
}
