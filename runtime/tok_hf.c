/* Tokenizer from a Hugging Face folder: tokenizer.json read directly (model
 * BPE with its vocab, merges and added tokens; the normalizer and
 * pre-tokenizer it names) plus tokenizer_config.json for BOS/EOS. The field
 * meanings follow the `tokenizers` library's serialisation. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"
#include "core/log.h"
#include "runtime/tok_internal.h"

#define MAX_JSON_BYTES ((size_t)512 << 20)

/* GPT-2's split pattern as tokenizers' ByteLevel(use_regex = true) has it. */
static const char g_bytelevel_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct hf_ctx {
    const char *path; /* tokenizer.json, for messages */
    dsq_tokenizer *t;
} hf_ctx;

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static dsq_status unsupported(const hf_ctx *c, const char *field, const char *value)
{
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s \"%.60s\" is not supported by dsquant's tokenizer", c->path, field,
                    value ? value : "(missing)");
}

/* ---------------------------------------------------------------- steps and normalizers */

static dsq_status add_step(hf_ctx *c, const char *pat, size_t n, dsq_re_dialect d, dsq_split_behavior b, bool invert,
                           const char *what)
{
    dsq_tokenizer *t = c->t;
    dsq_tok_step *s = realloc(t->steps, (t->n_steps + 1) * sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", c->path);
    t->steps = s;
    DSQ_TRY(dsq_tok_step_compile(&s[t->n_steps], pat, n, d, what));
    s[t->n_steps].behavior = b;
    s[t->n_steps].invert = invert;
    t->n_steps++;
    return DSQ_OK;
}

/* tokenizers' ByteLevel maps the text to GPT-2's byte characters where it
 * stands in the sequence; the steps after it split that mapped text. */
static dsq_status add_map_step(hf_ctx *c)
{
    dsq_tokenizer *t = c->t;
    dsq_tok_step *s = realloc(t->steps, (t->n_steps + 1) * sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", c->path);
    t->steps = s;
    memset(&s[t->n_steps], 0, sizeof *s);
    s[t->n_steps++].byte_map = true;
    return DSQ_OK;
}

static dsq_status add_norm(hf_ctx *c, dsq_tok_norm_kind kind, const char *a, const char *b, bool first_only)
{
    dsq_tokenizer *t = c->t;
    dsq_tok_norm *v = realloc(t->norms, (t->n_norms + 1) * sizeof *v);
    if (!v) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", c->path);
    t->norms = v;
    dsq_tok_norm *nm = &v[t->n_norms];
    memset(nm, 0, sizeof *nm);
    nm->kind = kind;
    nm->first_only = first_only;
    nm->alen = a ? strlen(a) : 0;
    nm->blen = b ? strlen(b) : 0;
    nm->a = dsq_tok_arena_dup(&t->arena, a ? a : "", nm->alen);
    nm->b = dsq_tok_arena_dup(&t->arena, b ? b : "", nm->blen);
    if (!nm->a || !nm->b) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", c->path);
    t->n_norms++;
    return DSQ_OK;
}

/* {"String": s} or {"Regex": r} -> pattern text and dialect. */
static dsq_status read_pattern(const hf_ctx *c, const cJSON *pat, const char *field, const char **p, dsq_re_dialect *d)
{
    const char *s = jstr(pat, "String"), *r = jstr(pat, "Regex");
    if (s) {
        *p = s;
        *d = DSQ_RE_LITERAL;
    } else if (r) {
        *p = r;
        *d = DSQ_RE_HF;
    } else {
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s has neither \"String\" nor \"Regex\"", c->path, field);
    }
    return DSQ_OK;
}

static dsq_status parse_normalizer(hf_ctx *c, const cJSON *n)
{
    if (!n || cJSON_IsNull(n)) return DSQ_OK;
    const char *type = jstr(n, "type");
    if (!type) return dsq_fail(DSQ_ERR_FORMAT, "%s: normalizer without a \"type\"", c->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *e;
        if (!cJSON_IsArray(list)) return dsq_fail(DSQ_ERR_FORMAT, "%s: normalizer Sequence without a list", c->path);
        cJSON_ArrayForEach(e, list) DSQ_TRY(parse_normalizer(c, e));
        return DSQ_OK;
    }
    if (!strcmp(type, "NFC")) {
        /* Text is nearly always NFC already; llama.cpp does not normalise either. */
        DSQ_LOGD("%s: NFC normalizer taken as satisfied", c->path);
        return DSQ_OK;
    }
    if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p) return dsq_fail(DSQ_ERR_FORMAT, "%s: normalizer Prepend without \"prepend\"", c->path);
        if (!strcmp(p, "\xe2\x96\x81")) c->t->add_space_prefix = true; /* decode strips it again */
        return add_norm(c, DSQ_NORM_PREPEND, p, NULL, false);
    }
    if (!strcmp(type, "Replace")) {
        const char *content = jstr(n, "content"), *p = NULL;
        dsq_re_dialect d = DSQ_RE_HF;
        DSQ_TRY(read_pattern(c, cJSON_GetObjectItemCaseSensitive(n, "pattern"), "normalizer Replace pattern", &p, &d));
        if (!content) return dsq_fail(DSQ_ERR_FORMAT, "%s: normalizer Replace without \"content\"", c->path);
        if (!strcmp(p, " ") && !strcmp(content, "\xe2\x96\x81")) c->t->unescape_ws = true;
        DSQ_TRY(add_norm(c, DSQ_NORM_REPLACE, d == DSQ_RE_LITERAL ? p : NULL, content, false));
        if (d != DSQ_RE_LITERAL) {
            dsq_tok_step tmp;
            DSQ_TRY(dsq_tok_step_compile(&tmp, p, strlen(p), DSQ_RE_HF, "normalizer Replace"));
            c->t->norms[c->t->n_norms - 1].re = tmp.re;
        }
        return DSQ_OK;
    }
    return unsupported(c, "normalizer.type", type);
}

static dsq_status parse_split_behavior(const hf_ctx *c, const char *b, dsq_split_behavior *out)
{
    static const struct {
        const char *name;
        dsq_split_behavior b;
    } map[] = {{"Isolated", DSQ_SPLIT_ISOLATED},
               {"Removed", DSQ_SPLIT_REMOVED},
               {"MergedWithPrevious", DSQ_SPLIT_MERGED_PREV},
               {"MergedWithNext", DSQ_SPLIT_MERGED_NEXT},
               {"Contiguous", DSQ_SPLIT_CONTIGUOUS}};
    for (size_t i = 0; b && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(b, map[i].name)) {
            *out = map[i].b;
            return DSQ_OK;
        }
    return unsupported(c, "pre_tokenizer Split behavior", b);
}

/* A text prefix added by a pre-tokenizer only works before any split. */
static dsq_status prefix_first(const hf_ctx *c, const char *what)
{
    if (c->t->n_steps)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s adds a prefix after earlier splits; not supported", c->path, what);
    return DSQ_OK;
}

static dsq_status parse_metaspace(hf_ctx *c, const cJSON *n)
{
    const char *rep = jstr(n, "replacement");
    if (!rep) rep = "\xe2\x96\x81";
    if (strcmp(rep, "\xe2\x96\x81") != 0) return unsupported(c, "pre_tokenizer Metaspace replacement", rep);
    const char *scheme = jstr(n, "prepend_scheme");
    if (!scheme) scheme = jbool(n, "add_prefix_space", true) ? "always" : "never";
    bool always = !strcmp(scheme, "always"), first = !strcmp(scheme, "first");
    if (!always && !first && strcmp(scheme, "never") != 0)
        return unsupported(c, "pre_tokenizer Metaspace prepend_scheme", scheme);
    DSQ_TRY(prefix_first(c, "Metaspace"));
    c->t->unescape_ws = true;
    DSQ_TRY(add_norm(c, DSQ_NORM_REPLACE, " ", rep, false));
    if (always || first) {
        c->t->add_space_prefix = true;
        DSQ_TRY(add_norm(c, DSQ_NORM_PREPEND_MISSING, rep, NULL, first));
    }
    if (jbool(n, "split", true))
        DSQ_TRY(add_step(c, rep, strlen(rep), DSQ_RE_LITERAL, DSQ_SPLIT_MERGED_NEXT, false, "Metaspace"));
    return DSQ_OK;
}

static dsq_status parse_pretok(hf_ctx *c, const cJSON *n)
{
    if (!n || cJSON_IsNull(n)) return DSQ_OK;
    const char *type = jstr(n, "type");
    if (!type) return dsq_fail(DSQ_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", c->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *e;
        if (!cJSON_IsArray(list)) return dsq_fail(DSQ_ERR_FORMAT, "%s: pre_tokenizer Sequence without a list", c->path);
        cJSON_ArrayForEach(e, list) DSQ_TRY(parse_pretok(c, e));
        return DSQ_OK;
    }
    if (!strcmp(type, "Split")) {
        const char *p = NULL;
        dsq_re_dialect d = DSQ_RE_HF;
        dsq_split_behavior b = DSQ_SPLIT_ISOLATED;
        DSQ_TRY(read_pattern(c, cJSON_GetObjectItemCaseSensitive(n, "pattern"), "pre_tokenizer Split pattern", &p, &d));
        DSQ_TRY(parse_split_behavior(c, jstr(n, "behavior"), &b));
        return add_step(c, p, strlen(p), d, b, jbool(n, "invert", false), "pre_tokenizer Split");
    }
    if (!strcmp(type, "ByteLevel")) {
        c->t->byte_encode = true;
        if (jbool(n, "add_prefix_space", false)) {
            DSQ_TRY(prefix_first(c, "ByteLevel add_prefix_space"));
            DSQ_TRY(add_norm(c, DSQ_NORM_PREPEND_MISSING, " ", NULL, false));
        }
        if (jbool(n, "use_regex", true))
            DSQ_TRY(
                add_step(c, g_bytelevel_re, strlen(g_bytelevel_re), DSQ_RE_HF, DSQ_SPLIT_ISOLATED, false, "ByteLevel"));
        return add_map_step(c);
    }
    if (!strcmp(type, "Digits")) {
        /* tokenizers splits on char::is_numeric, i.e. \p{N}. */
        const char *p = jbool(n, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        return add_step(c, p, strlen(p), DSQ_RE_HF, DSQ_SPLIT_ISOLATED, false, "Digits");
    }
    if (!strcmp(type, "Punctuation")) {
        /* tokenizers' is_punc: ASCII punctuation or Unicode P. */
        static const char p[] = "[\\p{P}!-/:-@\\[-`{-~]";
        dsq_split_behavior b = DSQ_SPLIT_ISOLATED;
        if (jstr(n, "behavior")) DSQ_TRY(parse_split_behavior(c, jstr(n, "behavior"), &b));
        return add_step(c, p, strlen(p), DSQ_RE_HF, b, false, "Punctuation");
    }
    if (!strcmp(type, "Metaspace")) return parse_metaspace(c, n);
    return unsupported(c, "pre_tokenizer.type", type);
}

static dsq_status check_decoder(const hf_ctx *c, const cJSON *n)
{
    if (!n || cJSON_IsNull(n)) return DSQ_OK;
    const char *type = jstr(n, "type");
    if (!type) return dsq_fail(DSQ_ERR_FORMAT, "%s: decoder without a \"type\"", c->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "decoders"), *e;
        cJSON_ArrayForEach(e, list) DSQ_TRY(check_decoder(c, e));
        return DSQ_OK;
    }
    static const char *const ok[] = {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(type, ok[i])) return DSQ_OK;
    return unsupported(c, "decoder.type", type);
}

/* ---------------------------------------------------------------- vocabulary */

static dsq_status read_id(const hf_ctx *c, const cJSON *v, const char *field, int64_t *id)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > (double)(INT32_MAX / 4) ||
        v->valuedouble != floor(v->valuedouble))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s has a bad token id", c->path, field);
    *id = (int64_t)v->valuedouble;
    return DSQ_OK;
}

static dsq_status count_vocab(const hf_ctx *c, const cJSON *vocab, const cJSON *added, uint32_t *n_out,
                              uint32_t *entries)
{
    int64_t max_id = -1, id = 0;
    uint32_t count = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        DSQ_TRY(read_id(c, e, "model.vocab", &id));
        if (id > max_id) max_id = id;
        count++;
    }
    cJSON_ArrayForEach(e, added)
    {
        DSQ_TRY(read_id(c, cJSON_GetObjectItemCaseSensitive(e, "id"), "added_tokens", &id));
        if (id > max_id) max_id = id;
        count++;
    }
    if (max_id < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: model.vocab is empty", c->path);
    /* Ids must be (nearly) dense: a lone huge id would otherwise size every table. */
    if ((uint64_t)max_id >= 2 * (uint64_t)count + 4096)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: model.vocab has %u tokens but ids up to %lld", c->path, count,
                        (long long)max_id);
    *n_out = (uint32_t)max_id + 1;
    *entries = count;
    return DSQ_OK;
}

static dsq_status set_text(hf_ctx *c, int64_t id, const char *s)
{
    dsq_tokenizer *t = c->t;
    size_t n = strlen(s);
    if (n > UINT32_MAX / 2) return dsq_fail(DSQ_ERR_FORMAT, "%s: token %lld is too long", c->path, (long long)id);
    t->text[id] = dsq_tok_arena_dup(&t->arena, s, n);
    if (!t->text[id]) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", c->path);
    t->text_len[id] = (uint32_t)n;
    return DSQ_OK;
}

static dsq_status read_vocab(hf_ctx *c, const cJSON *vocab, const cJSON *added, uint32_t entries)
{
    dsq_tokenizer *t = c->t;
    const cJSON *e;
    int64_t id = 0;
    cJSON_ArrayForEach(e, vocab)
    {
        DSQ_TRY(read_id(c, e, "model.vocab", &id));
        if (t->text[id])
            return dsq_fail(DSQ_ERR_FORMAT, "%s: model.vocab gives id %lld to \"%.40s\" and \"%.40s\"", c->path,
                            (long long)id, t->text[id], e->string);
        DSQ_TRY(set_text(c, id, e->string ? e->string : ""));
    }
    cJSON_ArrayForEach(e, added)
    {
        const char *content = jstr(e, "content");
        if (!content) return dsq_fail(DSQ_ERR_FORMAT, "%s: added_tokens entry without \"content\"", c->path);
        DSQ_TRY(read_id(c, cJSON_GetObjectItemCaseSensitive(e, "id"), "added_tokens", &id));
        if (!t->text[id] || strcmp(t->text[id], content) != 0) DSQ_TRY(set_text(c, id, content));
        uint16_t a = jbool(e, "special", false) ? DSQ_TOKATTR_CONTROL : DSQ_TOKATTR_USER_DEFINED;
        if (jbool(e, "lstrip", false)) a |= DSQ_TOKATTR_LSTRIP;
        if (jbool(e, "rstrip", false)) a |= DSQ_TOKATTR_RSTRIP;
        t->attr[id] = a;
    }
    DSQ_TRY(dsq_strmap_reserve(&t->vocab, (size_t)entries + t->n_vocab));
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (!t->text[i]) { /* a hole in the ids, filled as llama.cpp's converter does */
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%u]", i);
            DSQ_TRY(set_text(c, i, pad));
            t->attr[i] = DSQ_TOKATTR_UNUSED;
        }
        int64_t first;
        DSQ_TRY(dsq_strmap_put(&t->vocab, t->text[i], t->text_len[i], i, &first));
        if (first >= 0) DSQ_LOGD("%s: token %u repeats the text of token %d", c->path, i, (int)first);
    }
    return DSQ_OK;
}

static dsq_status read_merges(hf_ctx *c, const cJSON *merges)
{
    dsq_tokenizer *t = c->t;
    int n = cJSON_GetArraySize(merges);
    DSQ_TRY(dsq_strmap_reserve(&t->merges, (size_t)(n > 0 ? n : 0)));
    const cJSON *e;
    int32_t rank = 0;
    dsq_tok_buf key = {0};
    dsq_status st = DSQ_OK;
    cJSON_ArrayForEach(e, merges)
    {
        key.n = 0;
        if (cJSON_IsString(e)) {
            st = dsq_tok_buf_put(&key, e->valuestring, strlen(e->valuestring));
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            st = dsq_tok_buf_put(&key, a, strlen(a));
            if (st == DSQ_OK) st = dsq_tok_buf_put(&key, " ", 1);
            if (st == DSQ_OK) st = dsq_tok_buf_put(&key, b, strlen(b));
        } else {
            st = dsq_fail(DSQ_ERR_FORMAT, "%s: model.merges[%d] is neither \"a b\" nor [a, b]", c->path, rank);
        }
        if (st != DSQ_OK) break;
        char *k = dsq_tok_arena_dup(&t->arena, key.p, key.n);
        if (!k) {
            st = dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for the merges", c->path);
            break;
        }
        st = dsq_strmap_put(&t->merges, k, key.n, rank++, NULL); /* a repeat keeps its first rank */
        if (st != DSQ_OK) break;
    }
    dsq_tok_buf_free(&key);
    return st;
}

static dsq_status parse_model(hf_ctx *c, const cJSON *model)
{
    dsq_tokenizer *t = c->t;
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    t->hf_unk_fallback = true;
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk = (int32_t)dsq_strmap_get(&t->vocab, unk, strlen(unk));
    const char *cs = jstr(model, "continuing_subword_prefix"), *ew = jstr(model, "end_of_word_suffix");
    if (cs && cs[0]) return unsupported(c, "model.continuing_subword_prefix", cs);
    if (ew && ew[0]) return unsupported(c, "model.end_of_word_suffix", ew);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble != 0) return unsupported(c, "model.dropout", "non-zero");
    if (t->byte_fallback)
        for (uint32_t i = 0; i < t->n_vocab; i++) {
            const char *s = t->text[i];
            if (t->attr[i] == DSQ_TOKATTR_NORMAL && t->text_len[i] == 6 && !memcmp(s, "<0x", 3) && s[5] == '>')
                t->attr[i] = DSQ_TOKATTR_BYTE;
        }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return dsq_fail(DSQ_ERR_FORMAT, "%s: model.merges is missing", c->path);
    return read_merges(c, merges);
}

/* ---------------------------------------------------------------- BOS / EOS */

static const char *special_content(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return jstr(v, "content");
    return NULL;
}

/* TemplateProcessing "single": a special token before $A means add_bos,
 * after it add_eos (when tokenizer_config.json does not say). */
static void template_specials(const cJSON *pp, const char **before, const char **after)
{
    if (!pp || cJSON_IsNull(pp)) return;
    const char *type = jstr(pp, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) template_specials(e, before, after);
        return;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0) return;
    bool seen_a = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "single"))
    {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence"))
            seen_a = true;
        else if (sp && jstr(sp, "id")) {
            if (!seen_a && !*before) *before = jstr(sp, "id");
            if (seen_a) *after = jstr(sp, "id");
        }
    }
}

static int32_t find_text(const dsq_tokenizer *t, const char *s)
{
    return s ? (int32_t)dsq_strmap_get(&t->vocab, s, strlen(s)) : -1;
}

static dsq_status read_config(hf_ctx *c, const char *dir, const cJSON *root)
{
    dsq_tokenizer *t = c->t;
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "tokenizer_config.json"));
    cJSON *cfg = NULL;
    if (dsq_exists(path)) {
        char *buf = NULL;
        size_t len = 0;
        DSQ_TRY(dsq_read_file(path, MAX_JSON_BYTES, &buf, &len));
        dsq_status why;
        cfg = dsq_json_parse(buf, len, NULL, &why);
        free(buf);
        if (!cfg && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
        if (!cfg || !cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
        }
    }
    const char *before = NULL, *after = NULL;
    template_specials(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &before, &after);
    t->bos = find_text(t, special_content(cfg, "bos_token"));
    t->eos = find_text(t, special_content(cfg, "eos_token"));
    if (t->bos < 0) t->bos = find_text(t, before);
    if (t->eos < 0) t->eos = find_text(t, after);
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
    t->add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : (before && find_text(t, before) == t->bos && t->bos >= 0);
    t->add_eos = cJSON_IsBool(ae) ? cJSON_IsTrue(ae) : (after && find_text(t, after) == t->eos && t->eos >= 0);
    t->clean_spaces = jbool(cfg, "clean_up_tokenization_spaces", false);
    cJSON_Delete(cfg);
    return DSQ_OK;
}

/* ---------------------------------------------------------------- entry */

static dsq_status load_hf(hf_ctx *c, const char *dir, const cJSON *root)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return dsq_fail(DSQ_ERR_FORMAT, "%s: no \"model\" object", c->path);
    const char *type = jstr(model, "type");
    if (!type && cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "BPE";
    if (!type || strcmp(type, "BPE") != 0) return unsupported(c, "model.type", type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return dsq_fail(DSQ_ERR_FORMAT, "%s: model.vocab is not an object", c->path);
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: added_tokens is not a list", c->path);
    uint32_t n = 0, entries = 0;
    DSQ_TRY(count_vocab(c, vocab, added, &n, &entries));
    DSQ_TRY(dsq_tok_new(n, &c->t));
    dsq_tokenizer *t = c->t;
    t->type = DSQ_TOK_BPE;
    snprintf(t->pre, sizeof t->pre, "hf");
    DSQ_TRY(read_vocab(c, vocab, added, entries));
    DSQ_TRY(parse_model(c, model));
    DSQ_TRY(parse_normalizer(c, cJSON_GetObjectItemCaseSensitive(root, "normalizer")));
    DSQ_TRY(parse_pretok(c, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")));
    DSQ_TRY(check_decoder(c, cJSON_GetObjectItemCaseSensitive(root, "decoder")));
    DSQ_TRY(read_config(c, dir, root));
    return dsq_tok_finish(t, c->path);
}

dsq_status dsq_tokenizer_from_hf_dir(const char *dir, dsq_tokenizer **out)
{
    *out = NULL;
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "tokenizer.json"));
    if (!dsq_exists(path))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no tokenizer.json (tokenizer.model-only folders are not supported)",
                        dir);
    char *buf = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, MAX_JSON_BYTES, &buf, &len));
    dsq_status why;
    cJSON *root = dsq_json_parse(buf, len, NULL, &why);
    free(buf);
    if (!root && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
    }
    hf_ctx c = {path, NULL};
    dsq_status st = load_hf(&c, dir, root);
    cJSON_Delete(root);
    if (st != DSQ_OK) {
        dsq_tokenizer_free(c.t);
        return st;
    }
    *out = c.t;
    return DSQ_OK;
}
