/* The two merge loops, after llama.cpp's llm_tokenizer_bpe_session and
 * llm_tokenizer_spm_session (src/llama-vocab.cpp).
 *
 * Both start from one symbol per UTF-8 character (lengths read from the lead
 * byte only, so any bytes work) and repeatedly join the best adjacent pair:
 * BPE takes the pair whose "left right" string has the lowest merge rank, SPM
 * the pair whose concatenation is the vocabulary token with the highest
 * score; ties go to the leftmost pair. A heap holds candidate pairs; a popped
 * pair whose symbols changed since it was queued is skipped, so each word
 * costs O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "runtime/tok_internal.h"

typedef struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the symbol; n == 0 once merged away */
} sym;

/* A queued pair: the left symbol and the bytes of both when queued. The right
 * one is the left's next when popped: if either changed meanwhile, the size
 * no longer matches (symbols only grow) and the pair is skipped. */
typedef struct cand {
    uint32_t key; /* BPE: rank; SPM: score mapped so that a higher score is smaller */
    int32_t left;
    uint32_t size;
} cand;

typedef struct heap {
    cand *v;
    size_t n;
} heap;

static bool cand_less(const cand *a, const cand *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

/* Capacity is reserved up front (3 per symbol), so pushing cannot fail. */
static void heap_push(heap *h, cand c)
{
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = c;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0];
    cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        const cand *bc = &last;
        if (l < h->n && cand_less(&h->v[l], bc)) {
            best = l;
            bc = &h->v[l];
        }
        if (r < h->n && cand_less(&h->v[r], bc)) best = r;
        if (best == i) break;
        h->v[i] = h->v[best];
        i = best;
    }
    if (h->n) h->v[i] = last;
    return top;
}

void dsq_tok_ws_free(dsq_tok_ws *ws)
{
    free(ws->syms);
    free(ws->heap);
    free(ws->key);
    memset(ws, 0, sizeof *ws);
}

/* The workspace's buffers are void *, so one wrapper serves them all. */
static dsq_status grow(void **p, size_t *cap, size_t want, size_t elem)
{
    void *q = dsq_grow(*p, cap, want, elem);
    if (!q) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu symbols", want);
    *p = q;
    return DSQ_OK;
}

/* One symbol per character of s[0..n); returns the count. */
static dsq_status split_chars(dsq_tok_ws *ws, const char *s, size_t n, int32_t *count)
{
    if (n > INT32_MAX / 4) return dsq_fail(DSQ_ERR_ARG, "tokenizer: a text piece of %zu bytes is too long", n);
    DSQ_TRY(grow(&ws->syms, &ws->syms_cap, n, sizeof(sym)));
    DSQ_TRY(grow(&ws->heap, &ws->heap_cap, 3 * n + 1, sizeof(cand)));
    sym *sy = ws->syms;
    int32_t k = 0;
    for (size_t off = 0; off < n; k++) {
        size_t len = dsq_utf8_len((unsigned char)s[off]);
        if (len > n - off) len = n - off;
        sy[k].prev = k - 1;
        sy[k].off = (uint32_t)off;
        sy[k].n = (uint32_t)len;
        off += len;
        sy[k].next = off == n ? -1 : k + 1;
    }
    *count = k;
    return DSQ_OK;
}

/* Joins right into left and unlinks right. */
static void merge_pair(sym *sy, int32_t l, int32_t r)
{
    sy[l].n += sy[r].n;
    sy[r].n = 0;
    sy[l].next = sy[r].next;
    if (sy[r].next >= 0) sy[sy[r].next].prev = l;
}

/* ---------------------------------------------------------------- BPE */

static void bpe_try_pair(const dsq_tokenizer *t, dsq_tok_ws *ws, heap *h, const char *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return;
    const sym *sy = ws->syms;
    /* The merge table is keyed by the "left right" strings of the merges list. */
    char *key = ws->key;
    memcpy(key, w + sy[l].off, sy[l].n);
    key[sy[l].n] = ' ';
    memcpy(key + sy[l].n + 1, w + sy[r].off, sy[r].n);
    int32_t rank = (int32_t)dsq_strmap_get(&t->merges, key, (size_t)sy[l].n + 1 + sy[r].n);
    if (rank < 0) return;
    heap_push(h, (cand){(uint32_t)rank, l, sy[l].n + sy[r].n});
}

/* Ids for a final symbol that is not itself a token. */
static dsq_status bpe_unknown(const dsq_tokenizer *t, const char *s, size_t n, dsq_tokens *out)
{
    if (t->byte_encode) {
        /* llama.cpp looks each byte up as a one-byte token and drops the misses. */
        for (size_t j = 0; j < n; j++) {
            int32_t id = t->char_tok[(unsigned char)s[j]];
            if (id >= 0) DSQ_TRY(dsq_tokens_push(out, id));
        }
        return DSQ_OK;
    }
    bool all = true;
    for (size_t j = 0; j < n; j++) all = all && t->byte_tok[(unsigned char)s[j]] >= 0;
    if (t->hf_unk_fallback && !(t->byte_fallback && all)) {
        /* Hugging Face BPE: an unknown piece is the unknown token. */
        return t->unk >= 0 ? dsq_tokens_push(out, t->unk) : DSQ_OK;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t id = t->byte_tok[(unsigned char)s[j]];
        if (id >= 0) DSQ_TRY(dsq_tokens_push(out, id));
    }
    return DSQ_OK;
}

dsq_status dsq_tok_bpe_word(const dsq_tokenizer *t, dsq_tok_ws *ws, const char *w, size_t n, dsq_tokens *out)
{
    if (n == 0) return DSQ_OK;
    if (t->ignore_merges) {
        int32_t id = (int32_t)dsq_strmap_get(&t->vocab, w, n);
        if (id >= 0) return dsq_tokens_push(out, id);
    }
    int32_t ns = 0;
    DSQ_TRY(split_chars(ws, w, n, &ns));
    DSQ_TRY(grow(&ws->key, &ws->key_cap, n + 2, 1));
    sym *sy = ws->syms;
    heap h = {ws->heap, 0};
    for (int32_t i = 1; i < ns; i++) bpe_try_pair(t, ws, &h, w, i - 1, i);
    while (h.n) {
        cand c = heap_pop(&h);
        int32_t r = sy[c.left].next;
        if (sy[c.left].n == 0 || r < 0 || sy[c.left].n + sy[r].n != c.size) continue; /* stale */
        merge_pair(sy, c.left, r);
        bpe_try_pair(t, ws, &h, w, sy[c.left].prev, c.left);
        bpe_try_pair(t, ws, &h, w, c.left, sy[c.left].next);
    }
    for (int32_t i = 0; i != -1; i = sy[i].next) {
        const char *s = w + sy[i].off;
        int32_t id = (int32_t)dsq_strmap_get(&t->vocab, s, sy[i].n);
        if (id >= 0)
            DSQ_TRY(dsq_tokens_push(out, id));
        else
            DSQ_TRY(bpe_unknown(t, s, sy[i].n, out));
    }
    return DSQ_OK;
}

/* ---------------------------------------------------------------- SPM */

/* Higher score -> smaller key, ties kept equal (IEEE order on the bits). */
static uint32_t score_key(float score)
{
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
    return ~u;
}

static void spm_try_pair(const dsq_tokenizer *t, dsq_tok_ws *ws, heap *h, const char *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return;
    const sym *sy = ws->syms;
    /* Adjacent symbols are contiguous bytes: no copy needed. */
    uint32_t size = sy[l].n + sy[r].n;
    int32_t id = (int32_t)dsq_strmap_get(&t->vocab, s + sy[l].off, size);
    if (id < 0) return;
    heap_push(h, (cand){score_key(t->score[id]), l, size});
}

/* llama.cpp's byte_to_token for SPM: <0xXX>, else the one-byte token. */
static int32_t spm_byte(const dsq_tokenizer *t, unsigned char b)
{
    if (t->byte_tok[b] >= 0) return t->byte_tok[b];
    if (t->char_tok[b] >= 0) return t->char_tok[b];
    return t->unk;
}

dsq_status dsq_tok_spm_text(const dsq_tokenizer *t, dsq_tok_ws *ws, const char *s, size_t n, dsq_tokens *out)
{
    if (n == 0) return DSQ_OK;
    int32_t ns = 0;
    DSQ_TRY(split_chars(ws, s, n, &ns));
    sym *sy = ws->syms;
    heap h = {ws->heap, 0};
    for (int32_t i = 1; i < ns; i++) spm_try_pair(t, ws, &h, s, i - 1, i);
    while (h.n) {
        cand c = heap_pop(&h);
        int32_t r = sy[c.left].next;
        if (sy[c.left].n == 0 || r < 0 || sy[c.left].n + sy[r].n != c.size) continue; /* stale */
        merge_pair(sy, c.left, r);
        spm_try_pair(t, ws, &h, s, sy[c.left].prev, c.left);
        spm_try_pair(t, ws, &h, s, c.left, sy[c.left].next);
    }
    /* Every merged symbol is a token, so only single characters can miss the
     * vocabulary; llama.cpp's rev_merge re-segmentation never applies to them
     * and they go out as bytes. */
    for (int32_t i = 0; i != -1; i = sy[i].next) {
        int32_t id = (int32_t)dsq_strmap_get(&t->vocab, s + sy[i].off, sy[i].n);
        if (id >= 0) {
            DSQ_TRY(dsq_tokens_push(out, id));
            continue;
        }
        for (uint32_t j = 0; j < sy[i].n; j++) {
            int32_t b = spm_byte(t, (unsigned char)s[sy[i].off + j]);
            if (b >= 0) DSQ_TRY(dsq_tokens_push(out, b));
        }
    }
    return DSQ_OK;
}
