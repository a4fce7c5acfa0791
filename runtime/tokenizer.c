/* Encode/decode driver shared by both tokenizer kinds, after llama.cpp's
 * llama_vocab::impl::tokenize, tokenizer_st_partition, token_to_piece and
 * detokenize (src/llama-vocab.cpp). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/grow.h"
#include "core/log.h"
#include "runtime/tok_internal.h"

/* ---------------------------------------------------------------- construction */

dsq_status dsq_tok_new(uint32_t n, dsq_tokenizer **out)
{
    *out = NULL;
    if (n == 0 || n > (uint32_t)INT32_MAX / 2) return dsq_fail(DSQ_ERR_FORMAT, "tokenizer: %u tokens", n);
    dsq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory");
    t->n_vocab = n;
    t->text = calloc(n, sizeof *t->text);
    t->text_len = calloc(n, sizeof *t->text_len);
    t->score = calloc(n, sizeof *t->score);
    t->attr = calloc(n, sizeof *t->attr);
    t->piece = calloc(n, sizeof *t->piece);
    t->piece_len = calloc(n, sizeof *t->piece_len);
    if (!t->text || !t->text_len || !t->score || !t->attr || !t->piece || !t->piece_len) {
        dsq_tokenizer_free(t);
        return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %u tokens", n);
    }
    for (uint32_t i = 0; i < n; i++) t->attr[i] = DSQ_TOKATTR_NORMAL;
    t->bos = t->eos = t->unk = -1;
    *out = t;
    return DSQ_OK;
}

void dsq_tokenizer_free(dsq_tokenizer *t)
{
    if (!t) return;
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->piece);
    free(t->piece_len);
    dsq_strmap_free(&t->vocab);
    dsq_strmap_free(&t->merges);
    for (size_t i = 0; i < t->n_steps; i++) dsq_tok_step_free(&t->steps[i]);
    free(t->steps);
    for (size_t i = 0; i < t->n_norms; i++)
        if (t->norms[i].re) pcre2_code_free(t->norms[i].re);
    free(t->norms);
    free(t->special);
    dsq_tok_arena_free(&t->arena);
    free(t);
}

/* Tokens llama.cpp forces to CONTROL by their text (end-of-turn, end-of-
 * generation and fill-in-the-middle markers), whatever their stored type. */
static const char *const g_control_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
    "<|eom_id|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "[EOS]",
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "begin\xef\xbd\x9c>",
    "<PRE>",
    "\xe2\x96\x81<PRE>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<SUF>",
    "\xe2\x96\x81<SUF>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "end\xef\xbd\x9c>",
    "<MID>",
    "\xe2\x96\x81<MID>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};

static void mark_control_texts(dsq_tokenizer *t)
{
    for (size_t i = 0; i < sizeof g_control_texts / sizeof g_control_texts[0]; i++) {
        int32_t id = (int32_t)dsq_strmap_get(&t->vocab, g_control_texts[i], strlen(g_control_texts[i]));
        if (id >= 0) t->attr[id] |= DSQ_TOKATTR_CONTROL;
    }
}

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int by_len_desc(const void *a, const void *b)
{
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static dsq_status build_special_order(dsq_tokenizer *t)
{
    const uint16_t mask = DSQ_TOKATTR_CONTROL | DSQ_TOKATTR_USER_DEFINED | DSQ_TOKATTR_UNKNOWN;
    size_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & mask) n++;
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    len_id *order = malloc((n ? n : 1) * sizeof *order);
    if (!t->special || !order) {
        free(order);
        return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory");
    }
    size_t k = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & mask) order[k++] = (len_id){t->text_len[i], (int32_t)i};
    /* Longest text first, as llama.cpp sorts its cache (ties by id here, to
     * be deterministic; std::sort leaves them in any order). */
    qsort(order, n, sizeof *order, by_len_desc);
    for (size_t i = 0; i < n; i++) t->special[i] = order[i].id;
    t->n_special = n;
    free(order);
    return DSQ_OK;
}

static void build_byte_tables(dsq_tokenizer *t)
{
    /* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the
     * rest to U+0100 upwards in byte order. */
    int next = 0;
    for (int i = 0; i < 324; i++) t->u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = keep ? (uint32_t)b : 256u + (uint32_t)next++;
        t->b2u_len[b] = (uint8_t)dsq_utf8_put(cp, t->b2u[b]);
        t->u2b[cp] = (int16_t)b;
    }
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        t->byte_tok[b] = (int32_t)dsq_strmap_get(&t->vocab, buf, 6);
        char c = (char)b;
        t->char_tok[b] = (int32_t)dsq_strmap_get(&t->vocab, &c, 1);
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> XX, or -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* U+2581 -> ' ' (llama_unescape_whitespace). */
static dsq_status unescape_ws(const char *s, size_t n, dsq_tok_buf *b)
{
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            DSQ_TRY(dsq_tok_buf_put(b, " ", 1));
            i += 3;
        } else {
            DSQ_TRY(dsq_tok_buf_put(b, s + i, 1));
            i++;
        }
    }
    return DSQ_OK;
}

/* Byte-level token text back to bytes (llama_decode_text); a code point
 * outside the byte map stays as its UTF-8 (llama.cpp writes an
 * "[UNK_BYTE_0x..]" marker instead). */
static dsq_status byte_decode(const dsq_tokenizer *t, const char *s, size_t n, dsq_tok_buf *b)
{
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = dsq_utf8_next(s, n, &i);
        if (cp < 324 && t->u2b[cp] >= 0) {
            char c = (char)t->u2b[cp];
            DSQ_TRY(dsq_tok_buf_put(b, &c, 1));
        } else {
            DSQ_TRY(dsq_tok_buf_put(b, s + start, i - start));
        }
    }
    return DSQ_OK;
}

/* token_to_piece(special = true) of one token into b. */
static dsq_status make_piece(const dsq_tokenizer *t, uint32_t id, dsq_tok_buf *b)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    uint16_t a = t->attr[id];
    if (a & (DSQ_TOKATTR_UNKNOWN | DSQ_TOKATTR_CONTROL | DSQ_TOKATTR_USER_DEFINED)) return dsq_tok_buf_put(b, s, n);
    if (a & DSQ_TOKATTR_NORMAL) {
        if (t->type == DSQ_TOK_SPM || t->unescape_ws) return unescape_ws(s, n, b);
        if (t->byte_encode) return byte_decode(t, s, n, b);
        return dsq_tok_buf_put(b, s, n);
    }
    if (a & DSQ_TOKATTR_BYTE) {
        int v = byte_token_value(s, n);
        if (v < 0) return dsq_tok_buf_put(b, s, n);
        char c = (char)v;
        return dsq_tok_buf_put(b, &c, 1);
    }
    return DSQ_OK; /* unused / undefined tokens decode to nothing */
}

static dsq_status build_pieces(dsq_tokenizer *t)
{
    dsq_tok_buf b = {0};
    dsq_status st = DSQ_OK;
    for (uint32_t i = 0; i < t->n_vocab && st == DSQ_OK; i++) {
        b.n = 0;
        st = make_piece(t, i, &b);
        if (st != DSQ_OK) break;
        t->piece[i] = dsq_tok_arena_dup(&t->arena, b.p ? b.p : "", b.n);
        t->piece_len[i] = (uint32_t)b.n;
        if (!t->piece[i]) st = dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory");
    }
    dsq_tok_buf_free(&b);
    return st;
}

dsq_status dsq_tok_finish(dsq_tokenizer *t, const char *what)
{
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (!t->text[i]) return dsq_fail(DSQ_ERR_INTERNAL, "%s: token %u has no text", what, i);
    mark_control_texts(t);
    DSQ_TRY(build_special_order(t));
    build_byte_tables(t);
    DSQ_TRY(build_pieces(t));
    if (t->bos >= (int32_t)t->n_vocab) t->bos = -1;
    if (t->eos >= (int32_t)t->n_vocab) t->eos = -1;
    if (t->unk >= (int32_t)t->n_vocab) t->unk = -1;
    if (t->add_bos && t->bos < 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: add_bos_token is true but no BOS token is set", what);
    if (t->add_eos && t->eos < 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: add_eos_token is true but no EOS token is set", what);
    DSQ_LOGD("%s: %s tokenizer, pre \"%s\", %u tokens, %zu merges, %zu special", what,
             t->type == DSQ_TOK_SPM ? "SPM" : "BPE", t->pre, t->n_vocab, t->merges.n, t->n_special);
    return DSQ_OK;
}

/* ---------------------------------------------------------------- special-token partition */

typedef struct frag {
    int32_t token; /* >= 0: a special token; -1: raw text */
    size_t off, len;
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static dsq_status frags_push(frags *f, frag x)
{
    frag *v = dsq_grow(f->v, &f->cap, f->n + 1, sizeof *v);
    if (!v) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu fragments", f->n + 1);
    f->v = v;
    f->v[f->n++] = x;
    return DSQ_OK;
}

/* Cuts every raw fragment of in at the occurrences of token id (left to
 * right), honouring its lstrip/rstrip attributes. */
static dsq_status split_on_token(const dsq_tokenizer *t, const char *text, int32_t id, const frags *in, frags *out)
{
    const char *tok = t->text[id];
    size_t tl = t->text_len[id];
    uint16_t a = t->attr[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        frag f = in->v[i];
        if (f.token >= 0 || f.len < tl) {
            DSQ_TRY(frags_push(out, f));
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        for (;;) {
            const char *hit = memmem(text + pos, end - pos, tok, tl);
            if (!hit) {
                if (end > pos) DSQ_TRY(frags_push(out, (frag){-1, pos, end - pos}));
                break;
            }
            size_t m = (size_t)(hit - text);
            size_t left_len = m - pos;
            if (a & DSQ_TOKATTR_LSTRIP)
                while (left_len > 0 && isspace((unsigned char)text[pos + left_len - 1])) left_len--;
            if (left_len > 0) DSQ_TRY(frags_push(out, (frag){-1, pos, left_len}));
            DSQ_TRY(frags_push(out, (frag){id, 0, 0}));
            pos = m + tl;
            if (a & DSQ_TOKATTR_RSTRIP)
                while (pos < end && isspace((unsigned char)text[pos])) pos++;
            if (pos >= end) break;
        }
    }
    return DSQ_OK;
}

static dsq_status partition(const dsq_tokenizer *t, const char *text, size_t len, bool parse_special, frags *out)
{
    out->n = 0;
    if (len == 0) return DSQ_OK;
    DSQ_TRY(frags_push(out, (frag){-1, 0, len}));
    frags tmp = {0};
    dsq_status st = DSQ_OK;
    for (size_t k = 0; k < t->n_special && st == DSQ_OK; k++) {
        int32_t id = t->special[k];
        /* Control and unknown tokens count only when asked; user-defined
         * tokens always split the text (as Hugging Face does). */
        if (!parse_special && (t->attr[id] & (DSQ_TOKATTR_CONTROL | DSQ_TOKATTR_UNKNOWN))) continue;
        if (t->text_len[id] == 0 || !memmem(text, len, t->text[id], t->text_len[id])) continue;
        st = split_on_token(t, text, id, out, &tmp);
        if (st == DSQ_OK) {
            frags swap = *out;
            *out = tmp;
            tmp = swap;
        }
    }
    free(tmp.v);
    return st;
}

/* ---------------------------------------------------------------- encode */

typedef struct enc_ctx {
    dsq_tok_buf a, b, norm, shadow;
    dsq_tok_spans spans;
    dsq_tok_ws ws;
} enc_ctx;

static void enc_ctx_free(enc_ctx *c)
{
    dsq_tok_buf_free(&c->a);
    dsq_tok_buf_free(&c->b);
    dsq_tok_buf_free(&c->norm);
    dsq_tok_buf_free(&c->shadow);
    dsq_tok_spans_free(&c->spans);
    dsq_tok_ws_free(&c->ws);
}

/* ' ' -> U+2581 (llama_escape_whitespace), appending to b. */
static dsq_status escape_ws(const char *s, size_t n, dsq_tok_buf *b)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            DSQ_TRY(dsq_tok_buf_put(b, "\xe2\x96\x81", 3));
        else
            DSQ_TRY(dsq_tok_buf_put(b, &s[i], 1));
    }
    return DSQ_OK;
}

static dsq_status replace_literal(const dsq_tok_norm *nm, const dsq_tok_buf *in, dsq_tok_buf *out)
{
    out->n = 0;
    DSQ_TRY(dsq_tok_buf_reserve(out, in->n));
    for (size_t i = 0; i < in->n;) {
        if (nm->alen && in->n - i >= nm->alen && !memcmp(in->p + i, nm->a, nm->alen)) {
            DSQ_TRY(dsq_tok_buf_put(out, nm->b, nm->blen));
            i += nm->alen;
        } else {
            DSQ_TRY(dsq_tok_buf_put(out, in->p + i, 1));
            i++;
        }
    }
    return DSQ_OK;
}

static dsq_status replace_regex(const dsq_tok_norm *nm, const dsq_tok_buf *in, dsq_tok_buf *out)
{
    PCRE2_SIZE cap = in->n * 2 + 64;
    for (int attempt = 0; attempt < 2; attempt++) {
        out->n = 0;
        DSQ_TRY(dsq_tok_buf_reserve(out, cap));
        PCRE2_SIZE outlen = out->cap;
        int rc = pcre2_substitute(nm->re, (PCRE2_SPTR)(in->p ? in->p : ""), in->n, 0,
                                  PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_LITERAL |
                                      PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK,
                                  NULL, NULL, (PCRE2_SPTR)nm->b, nm->blen, (PCRE2_UCHAR *)out->p, &outlen);
        if (rc >= 0) {
            out->n = outlen;
            return DSQ_OK;
        }
        if (rc != PCRE2_ERROR_NOMEMORY) return dsq_fail(DSQ_ERR_ARG, "tokenizer: normalizer Replace failed (%d)", rc);
        cap = outlen + 1;
    }
    return dsq_fail(DSQ_ERR_INTERNAL, "tokenizer: normalizer Replace output size");
}

/* tokenizer.json normalizers, in order, on c->a (result left in c->a).
 * at_start: this fragment begins the input text. */
static dsq_status normalize(const dsq_tokenizer *t, enc_ctx *c, bool at_start)
{
    for (size_t i = 0; i < t->n_norms; i++) {
        const dsq_tok_norm *nm = &t->norms[i];
        c->b.n = 0;
        if (nm->kind == DSQ_NORM_PREPEND || nm->kind == DSQ_NORM_PREPEND_MISSING) {
            if (c->a.n == 0 || (nm->first_only && !at_start)) continue;
            if (nm->kind == DSQ_NORM_PREPEND_MISSING && c->a.n >= nm->alen && !memcmp(c->a.p, nm->a, nm->alen))
                continue;
            DSQ_TRY(dsq_tok_buf_put(&c->b, nm->a, nm->alen));
            DSQ_TRY(dsq_tok_buf_put(&c->b, c->a.p, c->a.n));
        } else if (nm->re) {
            DSQ_TRY(replace_regex(nm, &c->a, &c->b));
        } else {
            DSQ_TRY(replace_literal(nm, &c->a, &c->b));
        }
        dsq_tok_buf swap = c->a;
        c->a = c->b;
        c->b = swap;
    }
    return DSQ_OK;
}

/* GPT-2 byte-to-unicode over the whole of c->norm, moving the spans along;
 * the result (valid UTF-8) becomes both norm and shadow. */
static dsq_status byte_map_text(const dsq_tokenizer *t, enc_ctx *c)
{
    size_t n = c->norm.n;
    if (n > SIZE_MAX / 2 / sizeof(size_t)) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: text too large");
    size_t *at = malloc((n + 1) * sizeof *at);
    if (!at) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory");
    c->shadow.n = 0;
    dsq_status st = dsq_tok_buf_reserve(&c->shadow, 2 * n);
    for (size_t i = 0; i < n && st == DSQ_OK; i++) {
        unsigned char ch = (unsigned char)c->norm.p[i];
        at[i] = c->shadow.n;
        memcpy(c->shadow.p + c->shadow.n, t->b2u[ch], t->b2u_len[ch]);
        c->shadow.n += t->b2u_len[ch];
    }
    if (st == DSQ_OK) {
        at[n] = c->shadow.n;
        c->shadow.p[c->shadow.n] = '\0';
        for (size_t i = 0; i < c->spans.n; i++) {
            c->spans.v[i].start = at[c->spans.v[i].start];
            c->spans.v[i].end = at[c->spans.v[i].end];
        }
        c->norm.n = 0;
        st = dsq_tok_buf_put(&c->norm, c->shadow.p, c->shadow.n);
    }
    free(at);
    return st;
}

/* Pre-tokenizer steps in order; a byte_map step re-encodes the text so the
 * steps after it see GPT-2's byte characters. *mapped tells whether it ran. */
static dsq_status run_steps(const dsq_tokenizer *t, enc_ctx *c, bool *mapped)
{
    *mapped = false;
    c->spans.n = 0;
    if (c->norm.n == 0) return DSQ_OK;
    DSQ_TRY(dsq_tok_spans_push(&c->spans, 0, c->norm.n));
    for (size_t i = 0; i < t->n_steps;) {
        size_t j = i;
        while (j < t->n_steps && !t->steps[j].byte_map) j++;
        DSQ_TRY(dsq_tok_pretokenize(t->steps + i, j - i, c->shadow.p, &c->spans));
        if (j < t->n_steps) {
            DSQ_TRY(byte_map_text(t, c));
            *mapped = true;
        }
        i = j + 1;
    }
    return DSQ_OK;
}

static dsq_status encode_bpe_fragment(const dsq_tokenizer *t, enc_ctx *c, const char *s, size_t n, bool at_start,
                                      dsq_tokens *out)
{
    c->a.n = 0;
    DSQ_TRY(dsq_tok_buf_put(&c->a, s, n));
    DSQ_TRY(normalize(t, c, at_start));
    DSQ_TRY(dsq_tok_sanitize(c->a.p, c->a.n, &c->norm, &c->shadow));
    bool mapped = false;
    DSQ_TRY(run_steps(t, c, &mapped));
    for (size_t i = 0; i < c->spans.n; i++) {
        const char *w = c->norm.p + c->spans.v[i].start;
        size_t wn = c->spans.v[i].end - c->spans.v[i].start;
        if (t->byte_encode && !mapped) { /* llama.cpp maps each word after all splits */
            c->b.n = 0;
            DSQ_TRY(dsq_tok_buf_reserve(&c->b, 2 * wn));
            for (size_t j = 0; j < wn; j++) {
                unsigned char ch = (unsigned char)w[j];
                memcpy(c->b.p + c->b.n, t->b2u[ch], t->b2u_len[ch]);
                c->b.n += t->b2u_len[ch];
            }
            w = c->b.p;
            wn = c->b.n;
        }
        DSQ_TRY(dsq_tok_bpe_word(t, &c->ws, w, wn, out));
    }
    return DSQ_OK;
}

static dsq_status encode_spm_fragment(const dsq_tokenizer *t, enc_ctx *c, const char *s, size_t n, bool prefix,
                                      dsq_tokens *out)
{
    c->a.n = 0;
    if (prefix) DSQ_TRY(dsq_tok_buf_put(&c->a, "\xe2\x96\x81", 3));
    DSQ_TRY(escape_ws(s, n, &c->a));
    return dsq_tok_spm_text(t, &c->ws, c->a.p, c->a.n, out);
}

static dsq_status encode_frags(const dsq_tokenizer *t, const char *text, const frags *fr, bool add_special,
                               dsq_tokens *out)
{
    enc_ctx c = {0};
    dsq_status st = DSQ_OK;
    if (add_special && t->add_bos) st = dsq_tokens_push(out, t->bos);
    bool prev_special = true; /* SPM: the first raw fragment gets the space prefix */
    for (size_t i = 0; i < fr->n && st == DSQ_OK; i++) {
        const frag *f = &fr->v[i];
        if (f->token >= 0) {
            st = dsq_tokens_push(out, f->token);
            prev_special = true;
            continue;
        }
        if (t->type == DSQ_TOK_SPM)
            st = encode_spm_fragment(t, &c, text + f->off, f->len, t->add_space_prefix && prev_special, out);
        else
            st = encode_bpe_fragment(t, &c, text + f->off, f->len, f->off == 0, out);
        prev_special = false;
    }
    if (st == DSQ_OK && add_special && t->add_eos) st = dsq_tokens_push(out, t->eos);
    enc_ctx_free(&c);
    return st;
}

dsq_status dsq_tokenizer_encode(const dsq_tokenizer *t, const char *text, size_t len, bool add_special,
                                bool parse_special, dsq_tokens *out)
{
    if (!t || !out || (!text && len)) return dsq_fail(DSQ_ERR_ARG, "tokenizer encode: NULL argument");
    size_t n0 = out->n;
    frags fr = {0};
    dsq_status st = partition(t, text, len, parse_special, &fr);
    if (st == DSQ_OK) st = encode_frags(t, text, &fr, add_special, out);
    free(fr.v);
    if (st != DSQ_OK) out->n = n0;
    return st;
}

/* ---------------------------------------------------------------- decode */

/* llama.cpp's clean_up_tokenization_spaces passes, in place; returns the new length. */
static size_t clean_spaces(char *s, size_t n)
{
    size_t w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " ?", " !", " .", " ," */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) w--;
        s[w++] = x;
    }
    n = w;
    w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            w--;
            s[++i] = '\0';
        }
        s[w++] = x;
    }
    n = w;
    w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " 's", " 'm", " 're", " 've" */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm')
                w--;
            else if (i + 2 < n && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e')))
                w--;
        }
        s[w++] = x;
    }
    return w;
}

dsq_status dsq_tokenizer_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                                size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || (!ids && n)) return dsq_fail(DSQ_ERR_ARG, "tokenizer decode: NULL argument");
    bool special = flags & DSQ_DECODE_SPECIAL;
    bool remove_space = t->add_space_prefix;
    if ((flags & DSQ_DECODE_REMOVE_SPECIAL) && t->add_bos && n > 0 && ids[0] == t->bos) {
        remove_space = false;
        ids++;
        n--;
    }
    if ((flags & DSQ_DECODE_REMOVE_SPECIAL) && t->add_eos && n > 0 && ids[n - 1] == t->eos) n--;
    dsq_tok_buf b = {0};
    dsq_status st = dsq_tok_buf_reserve(&b, 0);
    for (size_t i = 0; i < n && st == DSQ_OK; i++) {
        int32_t id = ids[i];
        if (id < 0 || (uint32_t)id >= t->n_vocab) {
            st = dsq_fail(DSQ_ERR_ARG, "token id %d is outside the vocabulary (0..%u)", id, t->n_vocab - 1);
            break;
        }
        if (!special && (t->attr[id] & (DSQ_TOKATTR_UNKNOWN | DSQ_TOKATTR_CONTROL))) {
            remove_space = false; /* llama.cpp spends the lstrip on the skipped token */
            continue;
        }
        const char *p = t->piece[id];
        size_t pl = t->piece_len[id];
        if (remove_space && pl && p[0] == ' ') {
            p++;
            pl--;
        }
        remove_space = false;
        st = dsq_tok_buf_put(&b, p, pl);
    }
    if (st != DSQ_OK) {
        dsq_tok_buf_free(&b);
        return st;
    }
    if ((flags & DSQ_DECODE_CLEAN_SPACES) && t->clean_spaces) {
        b.n = clean_spaces(b.p, b.n);
        b.p[b.n] = '\0';
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return DSQ_OK;
}

/* ---------------------------------------------------------------- accessors */

const char *dsq_tokenizer_piece(const dsq_tokenizer *t, int32_t id, bool special, size_t *len)
{
    if (len) *len = 0;
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (!special && (t->attr[id] & (DSQ_TOKATTR_UNKNOWN | DSQ_TOKATTR_CONTROL))) return "";
    if (len) *len = t->piece_len[id];
    return t->piece[id];
}

dsq_tok_type dsq_tokenizer_type(const dsq_tokenizer *t) { return t->type; }
const char *dsq_tokenizer_pre(const dsq_tokenizer *t) { return t->pre; }
uint32_t dsq_tokenizer_n_vocab(const dsq_tokenizer *t) { return t->n_vocab; }
int32_t dsq_tokenizer_bos(const dsq_tokenizer *t) { return t->bos; }
int32_t dsq_tokenizer_eos(const dsq_tokenizer *t) { return t->eos; }
int32_t dsq_tokenizer_unk(const dsq_tokenizer *t) { return t->unk; }
bool dsq_tokenizer_add_bos(const dsq_tokenizer *t) { return t->add_bos; }
bool dsq_tokenizer_add_eos(const dsq_tokenizer *t) { return t->add_eos; }

const char *dsq_tokenizer_token_text(const dsq_tokenizer *t, int32_t id, size_t *len)
{
    if (len) *len = 0;
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (len) *len = t->text_len[id];
    return t->text[id];
}

uint32_t dsq_tokenizer_token_attr(const dsq_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return 0;
    return t->attr[id];
}

int32_t dsq_tokenizer_find(const dsq_tokenizer *t, const char *text, size_t len)
{
    if (!t || (!text && len)) return -1;
    return (int32_t)dsq_strmap_get(&t->vocab, text ? text : "", len);
}

dsq_status dsq_tokenizer_load(const char *path, dsq_tokenizer **out)
{
    *out = NULL;
    if (dsq_is_dir(path)) return dsq_tokenizer_from_hf_dir(path, out);
    dsq_gguf *g = NULL;
    DSQ_TRY(dsq_gguf_open(path, &g));
    dsq_status st = dsq_tokenizer_from_gguf(g, out);
    if (st != DSQ_OK) st = dsq_fail_context(st, "%s", path);
    dsq_gguf_close(g);
    return st;
}
