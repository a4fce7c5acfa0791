/* Tokenizer from GGUF tokenizer.* metadata, as llama.cpp's
 * llama_vocab::impl::load reads it (src/llama-vocab.cpp). */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "runtime/tok_internal.h"

/* llama.cpp's llama_token_type (GGUF tokenizer.ggml.token_type) -> attributes. */
static uint16_t attr_from_type(int32_t type)
{
    switch (type) {
    case 1: return DSQ_TOKATTR_NORMAL;
    case 2: return DSQ_TOKATTR_UNKNOWN;
    case 3: return DSQ_TOKATTR_CONTROL;
    case 4: return DSQ_TOKATTR_USER_DEFINED;
    case 5: return DSQ_TOKATTR_UNUSED;
    case 6: return DSQ_TOKATTR_BYTE;
    default: return DSQ_TOKATTR_UNDEFINED;
    }
}

/* An optional array key: NULL when absent, an error when of another type. */
static dsq_status opt_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype type, const dsq_gguf_array **out)
{
    *out = NULL;
    if (!dsq_gguf_get(g, key)) return DSQ_OK;
    return dsq_gguf_get_arr(g, key, type, out);
}

static dsq_status read_tokens(dsq_tokenizer *t, const dsq_gguf_array *toks, const char *path)
{
    const dsq_gguf_str *s = toks->data;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const char *p = s[i].ptr;
        size_t n = (size_t)s[i].len;
        char empty[32];
        if (n == 0) { /* llama.cpp gives empty tokens a placeholder text */
            n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%u]", i);
            p = empty;
        }
        if (n > UINT32_MAX / 2) return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%u] is too long", path, i);
        t->text[i] = dsq_tok_arena_dup(&t->arena, p, n);
        if (!t->text[i]) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for the vocabulary", path);
        t->text_len[i] = (uint32_t)n;
        int64_t first;
        DSQ_TRY(dsq_strmap_put(&t->vocab, t->text[i], n, i, &first));
        if (first >= 0)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.tokens: duplicate token \"%.40s\" at %u (first at %d)",
                            path, t->text[i], i, (int)first);
    }
    return DSQ_OK;
}

static dsq_status read_scores_types(dsq_tokenizer *t, const dsq_gguf *g, const char *path)
{
    const dsq_gguf_array *a = NULL;
    if (dsq_gguf_get(g, "tokenizer.ggml.scores")) {
        const dsq_gguf_value *v = dsq_gguf_get(g, "tokenizer.ggml.scores");
        dsq_gguf_vtype et = v->type == DSQ_GGUF_ARRAY ? v->v.arr.elem_type : DSQ_GGUF_F32;
        DSQ_TRY(dsq_gguf_get_arr(g, "tokenizer.ggml.scores", et == DSQ_GGUF_I32 ? DSQ_GGUF_I32 : DSQ_GGUF_F32, &a));
        if (a->n < t->n_vocab)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %u tokens", path,
                            (unsigned long long)a->n, t->n_vocab);
        for (uint32_t i = 0; i < t->n_vocab; i++)
            t->score[i] =
                a->elem_type == DSQ_GGUF_I32 ? (float)((const int32_t *)a->data)[i] : ((const float *)a->data)[i];
    }
    DSQ_TRY(opt_arr(g, "tokenizer.ggml.token_type", DSQ_GGUF_I32, &a));
    if (a) {
        if (a->n < t->n_vocab)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", path,
                            (unsigned long long)a->n, t->n_vocab);
        for (uint32_t i = 0; i < t->n_vocab; i++) t->attr[i] = attr_from_type(((const int32_t *)a->data)[i]);
    }
    return DSQ_OK;
}

static dsq_status read_merges(dsq_tokenizer *t, const dsq_gguf *g, const char *path)
{
    const dsq_gguf_array *a = NULL;
    if (!dsq_gguf_get(g, "tokenizer.ggml.merges"))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs it)", path);
    DSQ_TRY(dsq_gguf_get_arr(g, "tokenizer.ggml.merges", DSQ_GGUF_STRING, &a));
    if (a->n > (uint64_t)INT32_MAX / 4)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.merges has %llu entries", path, (unsigned long long)a->n);
    DSQ_TRY(dsq_strmap_reserve(&t->merges, (size_t)a->n));
    const dsq_gguf_str *s = a->data;
    for (uint32_t i = 0; i < (uint32_t)a->n; i++) {
        /* llama.cpp splits at the first space after the first byte; a merge
         * without one can never match and is left out. */
        if (s[i].len < 3 || s[i].len > UINT32_MAX / 2 || !memchr(s[i].ptr + 1, ' ', (size_t)s[i].len - 1)) continue;
        char *k = dsq_tok_arena_dup(&t->arena, s[i].ptr, (size_t)s[i].len);
        if (!k) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for the merges", path);
        DSQ_TRY(dsq_strmap_put(&t->merges, k, (size_t)s[i].len, i, NULL)); /* a repeat keeps its first rank */
    }
    return DSQ_OK;
}

/* Reads an optional special-token id; an id outside the vocabulary keeps the
 * default, as llama.cpp does. */
static dsq_status read_special_id(const dsq_gguf *g, const char *key, uint32_t n_vocab, int32_t *id)
{
    if (*id >= (int32_t)n_vocab) *id = -1;
    if (!dsq_gguf_get(g, key)) return DSQ_OK;
    uint32_t v = 0;
    DSQ_TRY(dsq_gguf_get_u32(g, key, &v));
    if (v >= n_vocab)
        DSQ_LOGW("%s = %u is outside the vocabulary; using %d", key, v, *id);
    else
        *id = (int32_t)v;
    return DSQ_OK;
}

static dsq_status read_opt_bool(const dsq_gguf *g, const char *key, bool *v)
{
    if (!dsq_gguf_get(g, key)) return DSQ_OK;
    return dsq_gguf_get_bool(g, key, v);
}

/* BPE: which of llama.cpp's pre-tokenizers, and the regex steps for it. */
static dsq_status setup_bpe_pre(dsq_tokenizer *t, const dsq_gguf *g, const char *path)
{
    const char *pre = NULL;
    if (dsq_gguf_get(g, "tokenizer.ggml.pre")) DSQ_TRY(dsq_gguf_get_str(g, "tokenizer.ggml.pre", &pre));
    if (!pre || !pre[0]) {
        DSQ_LOGW("%s: no tokenizer.ggml.pre; using llama.cpp's 'default' pre-tokenizer", path);
        pre = "default";
    }
    const dsq_tok_pre_def *def = dsq_tok_pre_find(pre);
    if (!def)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre \"%.60s\" is not a pre-tokenizer dsquant knows",
                        path, pre);
    snprintf(t->pre, sizeof t->pre, "%s", pre);
    size_t n = 0;
    while (def->regexes[n]) n++;
    t->steps = calloc(n, sizeof *t->steps);
    if (!t->steps) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        DSQ_TRY(dsq_tok_step_compile(&t->steps[i], def->regexes[i], strlen(def->regexes[i]), DSQ_RE_LLAMA,
                                     "tokenizer.ggml.pre"));
        t->n_steps++;
    }
    t->clean_spaces = def->clean_spaces;
    t->ignore_merges = def->ignore_merges;
    t->add_bos = def->add_bos;
    return DSQ_OK;
}

static dsq_status load_gguf(dsq_tokenizer **tp, const dsq_gguf *g, const char *path)
{
    const char *model = NULL;
    if (!dsq_gguf_get(g, "tokenizer.ggml.model"))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tokenizer.ggml.model is missing (no tokenizer in this file)", path);
    DSQ_TRY(dsq_gguf_get_str(g, "tokenizer.ggml.model", &model));
    bool spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: tokenizer.ggml.model \"%.40s\" is not supported (only \"gpt2\" and \"llama\")", path,
                        model);
    const dsq_gguf_array *toks = NULL;
    if (!dsq_gguf_get(g, "tokenizer.ggml.tokens"))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tokenizer.ggml.tokens is missing", path);
    DSQ_TRY(dsq_gguf_get_arr(g, "tokenizer.ggml.tokens", DSQ_GGUF_STRING, &toks));
    if (toks->n == 0 || toks->n > (uint64_t)INT32_MAX / 4)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path,
                        (unsigned long long)toks->n);
    DSQ_TRY(dsq_tok_new((uint32_t)toks->n, tp));
    dsq_tokenizer *t = *tp;
    t->type = spm ? DSQ_TOK_SPM : DSQ_TOK_BPE;
    DSQ_TRY(dsq_strmap_reserve(&t->vocab, t->n_vocab));
    DSQ_TRY(read_tokens(t, toks, path));
    DSQ_TRY(read_scores_types(t, g, path));
    if (spm) {
        snprintf(t->pre, sizeof t->pre, "default");
        t->add_space_prefix = true;
        t->add_bos = true;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
    } else {
        DSQ_TRY(read_merges(t, g, path));
        DSQ_TRY(setup_bpe_pre(t, g, path));
        t->byte_encode = true;
        t->bos = t->eos = 11; /* llama.cpp's defaults for gpt2 vocabularies */
    }
    DSQ_TRY(read_opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix));
    DSQ_TRY(read_special_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos));
    DSQ_TRY(read_special_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos));
    DSQ_TRY(read_special_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk));
    DSQ_TRY(read_opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos));
    DSQ_TRY(read_opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos));
    return dsq_tok_finish(t, path);
}

dsq_status dsq_tokenizer_from_gguf(const dsq_gguf *g, dsq_tokenizer **out)
{
    *out = NULL;
    const char *path = g->path ? g->path : "GGUF";
    dsq_tokenizer *t = NULL;
    dsq_status st = load_gguf(&t, g, path);
    if (st != DSQ_OK) {
        dsq_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DSQ_OK;
}
