/* Pre-tokenizer: the regex splits that cut text into words before merging.
 *
 * llama.cpp (src/unicode.cpp unicode_regex_split) applies a list of regexes in
 * turn; each one cuts every piece the previous left into its matches and the
 * gaps between them. It runs them through std::regex on a "collapsed" copy of
 * the text (one byte per code point standing for its Unicode category), or
 * through hand-written loops for the GPT-2 and Llama-3 patterns. Both amount to
 * the same matches as PCRE2 in UTF+UCP mode, once \s is pinned to the
 * White_Space set llama.cpp uses and \d, \w to ASCII; the pattern rewrite
 * below does that. Hugging Face Split pre-tokenizers add the other split
 * behaviours (removed, merged with previous/next, contiguous) and invert. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/log.h"
#include "runtime/tok_internal.h"

/* ---------------------------------------------------------------- patterns */

/* Unicode White_Space (PropList.txt), the set llama.cpp's unicode_set_whitespace
 * holds; PCRE2's own \s would add U+180E. */
#define WS_RANGES                                                                                                      \
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static dsq_status put_str(dsq_tok_buf *b, const char *s) { return dsq_tok_buf_put(b, s, strlen(s)); }

/* Replacement for the escape \c (c one of sSdDwW), inside or outside a
 * character class, or NULL to keep the escape as PCRE2 reads it. */
static const char *class_escape(char c, bool in_class, dsq_re_dialect d)
{
    bool ascii = d == DSQ_RE_LLAMA;
    switch (c) {
    case 's': return in_class ? WS_RANGES : "[" WS_RANGES "]";
    case 'S': return in_class ? NULL : "[^" WS_RANGES "]";
    case 'd': return !ascii ? NULL : in_class ? "0-9" : "[0-9]";
    case 'D': return !ascii || in_class ? NULL : "[^0-9]";
    case 'w': return !ascii ? NULL : in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]";
    case 'W': return !ascii || in_class ? NULL : "[^A-Za-z0-9_]";
    default: return NULL;
    }
}

static dsq_status rewrite_pattern(const char *p, size_t n, dsq_re_dialect d, dsq_tok_buf *out)
{
    if (d == DSQ_RE_LITERAL) {
        /* Every ASCII punctuation character escaped; other bytes literal. */
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)p[i];
            if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) {
                char esc[8];
                if (c < 0x20 || c == 0x7F)
                    snprintf(esc, sizeof esc, "\\x{%X}", c);
                else
                    snprintf(esc, sizeof esc, "\\%c", c);
                DSQ_TRY(put_str(out, esc));
            } else {
                DSQ_TRY(dsq_tok_buf_put(out, &p[i], 1));
            }
        }
        return DSQ_OK;
    }
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            const char *rep = class_escape(p[i + 1], in_class, d);
            if (rep)
                DSQ_TRY(put_str(out, rep));
            else
                DSQ_TRY(dsq_tok_buf_put(out, &p[i], 2));
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            DSQ_TRY(dsq_tok_buf_put(out, &c, 1));
            /* "[^]...]" and "[]...]": a leading ']' is a literal. */
            if (i + 1 < n && p[i + 1] == '^') DSQ_TRY(dsq_tok_buf_put(out, &p[++i], 1));
            if (i + 1 < n && p[i + 1] == ']') DSQ_TRY(dsq_tok_buf_put(out, &p[++i], 1));
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class "[:alpha:]" inside a class: copy through its "]". */
            const char *end = memchr(p + i + 2, ']', n - i - 2);
            if (end) {
                size_t k = (size_t)(end - (p + i)) + 1;
                DSQ_TRY(dsq_tok_buf_put(out, p + i, k));
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        DSQ_TRY(dsq_tok_buf_put(out, &c, 1));
    }
    return DSQ_OK;
}

dsq_status dsq_tok_step_compile(dsq_tok_step *s, const char *pattern, size_t len, dsq_re_dialect dialect,
                                const char *what)
{
    memset(s, 0, sizeof *s);
    dsq_tok_buf pat = {0};
    dsq_status st = rewrite_pattern(pattern, len, dialect, &pat);
    if (st != DSQ_OK) {
        dsq_tok_buf_free(&pat);
        return st;
    }
    uint32_t opts = PCRE2_UTF | PCRE2_UCP;
    opts |= dialect == DSQ_RE_HF ? PCRE2_MULTILINE : PCRE2_DOLLAR_ENDONLY;
    int err = 0;
    PCRE2_SIZE erroff = 0;
    s->re = pcre2_compile((PCRE2_SPTR)pat.p, pat.n, opts, &err, &erroff, NULL);
    dsq_tok_buf_free(&pat);
    if (!s->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dsq_fail(DSQ_ERR_FORMAT, "%s: pattern \"%.80s\" does not compile: %s", what, pattern, (char *)msg);
    }
    /* JIT makes the WikiText-sized inputs fast; the interpreter gives the
     * same matches when JIT is not available on this machine. */
    s->jit = pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE) == 0;
    if (!s->jit) DSQ_LOGD("%s: PCRE2 JIT unavailable, using the interpreter", what);
    return DSQ_OK;
}

void dsq_tok_step_free(dsq_tok_step *s)
{
    if (s->re) pcre2_code_free(s->re);
    s->re = NULL;
}

/* ---------------------------------------------------------------- llama.cpp's table */

/* Patterns as llama.cpp's llm_tokenizer_bpe holds them (src/llama-vocab.cpp),
 * non-ASCII characters written as \x{...} so no editor can normalise them. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                                      \
    RE_CONTRACTIONS                                                                                                    \
        "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                                       \
    RE_CONTRACTIONS                                                                                                    \
        "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK_HANGUL "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define RE_UPPER_LOWER "((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
#define RE_UPPER_LOWER2 "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"

/* DeepSeek-LLM's cased-letter class (Unicode Lu/Ll/Lt ranges). */
#define RE_DS_LETTERS                                                                                                  \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}"   \
    "\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}"     \
    "\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"       \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"                  \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"                  \
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"          \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"         \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"          \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"                    \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"          \
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                   \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"                  \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"          \
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"

static const char *const re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {RE_LLAMA3, NULL};
static const char *const re_qwen2[] = {RE_QWEN2, NULL};
static const char *const re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const re_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[" RE_DS_LETTERS "]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    RE_CJK_HANGUL,
    "\\p{N}+",
    NULL,
};
static const char *const re_deepseek_coder[] = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_HANGUL, "\\p{N}", NULL};
static const char *const re_deepseek_v3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_poro[] = {RE_PORO, NULL};
static const char *const re_viking[] = {RE_PORO, "\\p{N}", NULL};
static const char *const re_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER2
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER2 RE_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_chameleon[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    RE_GPT2,
    NULL,
};
static const char *const re_superbpe[] = {"\\p{N}+", "(?=(\\d{3})+(?!\\d))", NULL};
static const char *const re_bailing[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_seed_coder[] = {
    RE_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

/* tokenizer.ggml.pre names, grouped as llama.cpp's llama_vocab::impl::load
 * maps them to pre-tokenizer types (clean_spaces defaults to true there). */
static const dsq_tok_pre_def g_pre[] = {
    {"default", re_default, true, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", re_llama3, true, true, true},
    {"dbrx|smaug-bpe", re_llama3, true, false, false},
    {"deepseek-llm", re_deepseek_llm, false, false, false},
    {"deepseek-coder", re_deepseek_coder, false, false, false},
    {"deepseek-v3|hunyuan-dense", re_deepseek_v3, false, false, false},
    {"falcon", re_falcon, true, false, false},
    {"starcoder|refact|codeshell|exaone|minerva-7b", re_starcoder, true, false, false},
    {"command-r|smollm", re_starcoder, false, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|jina-v1-en|jina-v2-code|roberta-bpe|"
     "a.x-4.0|mellum|exaone4|mpt|olmo|jais",
     re_gpt2, true, false, false},
    {"trillion|granite-docling", re_gpt2, false, false, false},
    {"qwen2|deepseek-r1-qwen|hunyuan|grok-2", re_qwen2, false, false, false},
    {"stablelm2|megrez", re_qwen2, true, false, false},
    {"poro-chat", re_poro, false, false, false},
    {"bloom|gpt3-finnish", re_poro, true, false, false},
    {"chatglm-bpe|glm4", re_llama3, true, false, false},
    {"viking", re_viking, false, false, false},
    {"tekken", re_tekken, false, true, true},
    {"chameleon", re_chameleon, false, false, true},
    {"gpt-4o|llama4|minimax-m2", re_gpt4o, false, false, false},
    {"superbpe", re_superbpe, false, false, false},
    {"bailingmoe|bailingmoe2|llada-moe", re_bailing, false, false, false},
    {"seed-coder", re_seed_coder, false, false, false},
};

static bool name_in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && !memcmp(p, name, n)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

const dsq_tok_pre_def *dsq_tok_pre_find(const char *name)
{
    for (size_t i = 0; i < sizeof g_pre / sizeof g_pre[0]; i++)
        if (name_in_list(g_pre[i].names, name)) return &g_pre[i];
    return NULL;
}

/* ---------------------------------------------------------------- splitting */

typedef struct piece {
    size_t start, end;
    bool delim; /* a match of the pattern (before invert) */
} piece;

typedef struct pieces {
    piece *v;
    size_t n, cap;
} pieces;

static dsq_status pieces_push(pieces *p, size_t start, size_t end, bool delim)
{
    piece *v = dsq_grow(p->v, &p->cap, p->n + 1, sizeof *v);
    if (!v) return dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for %zu pieces", p->n + 1);
    p->v = v;
    p->v[p->n++] = (piece){start, end, delim};
    return DSQ_OK;
}

typedef struct matcher {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
} matcher;

static int run_match(const dsq_tok_step *s, matcher *m, const char *subj, size_t len, size_t off, uint32_t opts)
{
    /* pcre2_match takes the JIT path by itself when the options allow it
     * (an anchored retry does not). */
    int rc = pcre2_match(s->re, (PCRE2_SPTR)subj, len, off, opts | PCRE2_NO_UTF_CHECK, m->md, m->mctx);
    /* A pattern with nested repeats can outgrow JIT's 32 KiB default stack on
     * a long word; the interpreter keeps its frames on the heap instead. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(s->re, (PCRE2_SPTR)subj, len, off, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m->md, m->mctx);
    return rc;
}

static dsq_status match_fail(int rc)
{
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return dsq_fail(DSQ_ERR_ARG, "tokenizer: pre-tokenizer regex failed on the text: %s", (char *)msg);
}

/* Matches and gaps of one piece, in order, the way std::regex_iterator walks
 * them: after an empty match, a non-empty one anchored at the same place is
 * tried, else the search moves on by one character. */
static dsq_status find_pieces(const dsq_tok_step *s, matcher *m, const char *subj, size_t len, pieces *out)
{
    size_t off = 0, gap = 0;
    uint32_t opts = 0;
    while (off <= len) {
        int rc = run_match(s, m, subj, len, off, opts);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!(opts & PCRE2_ANCHORED)) break;
            if (off >= len) break;
            off += dsq_utf8_len((unsigned char)subj[off]);
            opts = 0;
            continue;
        }
        if (rc < 0) return match_fail(rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        size_t ms = ov[0], me = ov[1];
        if (ms < off || me < ms || me > len) return dsq_fail(DSQ_ERR_INTERNAL, "tokenizer: bad regex match bounds");
        if (ms > gap) DSQ_TRY(pieces_push(out, gap, ms, false));
        DSQ_TRY(pieces_push(out, ms, me, true));
        gap = me;
        off = me;
        opts = me == ms ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    }
    if (gap < len) DSQ_TRY(pieces_push(out, gap, len, false));
    return DSQ_OK;
}

/* Folds matches/gaps by the split behaviour (Hugging Face's
 * SplitDelimiterBehavior) and appends the non-empty results, shifted by base. */
static dsq_status fold_pieces(const dsq_tok_step *s, pieces *p, size_t base, dsq_tok_spans *out)
{
    size_t first = out->n;
    bool prev_match = false;
    if (s->invert)
        for (size_t i = 0; i < p->n; i++) p->v[i].delim = !p->v[i].delim;
    switch (s->behavior) {
    case DSQ_SPLIT_ISOLATED:
        for (size_t i = 0; i < p->n; i++) DSQ_TRY(dsq_tok_spans_push(out, p->v[i].start, p->v[i].end));
        break;
    case DSQ_SPLIT_REMOVED:
        for (size_t i = 0; i < p->n; i++)
            if (!p->v[i].delim) DSQ_TRY(dsq_tok_spans_push(out, p->v[i].start, p->v[i].end));
        break;
    case DSQ_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < p->n; i++) {
            if (p->v[i].delim && !prev_match && out->n > first)
                out->v[out->n - 1].end = p->v[i].end;
            else
                DSQ_TRY(dsq_tok_spans_push(out, p->v[i].start, p->v[i].end));
            prev_match = p->v[i].delim;
        }
        break;
    case DSQ_SPLIT_MERGED_NEXT:
        /* Walk backwards so a delimiter joins the piece after it. */
        for (size_t k = p->n; k-- > 0;) {
            if (p->v[k].delim && !prev_match && out->n > first)
                out->v[out->n - 1].start = p->v[k].start;
            else
                DSQ_TRY(dsq_tok_spans_push(out, p->v[k].start, p->v[k].end));
            prev_match = p->v[k].delim;
        }
        for (size_t a = first, b = out->n; a + 1 < b; a++, b--) {
            dsq_tok_span tmp = out->v[a];
            out->v[a] = out->v[b - 1];
            out->v[b - 1] = tmp;
        }
        break;
    case DSQ_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < p->n; i++) {
            if (p->v[i].delim == prev_match && out->n > first)
                out->v[out->n - 1].end = p->v[i].end;
            else
                DSQ_TRY(dsq_tok_spans_push(out, p->v[i].start, p->v[i].end));
            prev_match = p->v[i].delim;
        }
        break;
    }
    /* Drop empty pieces and make offsets absolute. */
    size_t w = first;
    for (size_t i = first; i < out->n; i++) {
        if (out->v[i].end <= out->v[i].start) continue;
        out->v[w].start = out->v[i].start + base;
        out->v[w].end = out->v[i].end + base;
        w++;
    }
    out->n = w;
    return DSQ_OK;
}

static dsq_status apply_step(const dsq_tok_step *s, matcher *m, const char *text, const dsq_tok_spans *in,
                             dsq_tok_spans *out)
{
    pieces p = {0};
    dsq_status st = DSQ_OK;
    out->n = 0;
    for (size_t i = 0; i < in->n && st == DSQ_OK; i++) {
        p.n = 0;
        size_t a = in->v[i].start, b = in->v[i].end;
        st = find_pieces(s, m, text + a, b - a, &p);
        if (st == DSQ_OK) st = fold_pieces(s, &p, a, out);
    }
    free(p.v);
    return st;
}

dsq_status dsq_tok_pretokenize(const dsq_tok_step *steps, size_t n_steps, const char *shadow, dsq_tok_spans *spans)
{
    if (n_steps == 0 || spans->n == 0) return DSQ_OK;
    matcher m = {0};
    dsq_tok_spans tmp = {0};
    dsq_status st = DSQ_OK;
    m.mctx = pcre2_match_context_create(NULL);
    /* One match-data block sized for the pattern with the most groups. */
    uint32_t groups = 1;
    for (size_t i = 0; i < n_steps; i++) {
        uint32_t c = 0;
        pcre2_pattern_info(steps[i].re, PCRE2_INFO_CAPTURECOUNT, &c);
        if (c + 1 > groups) groups = c + 1;
    }
    m.md = pcre2_match_data_create(groups, NULL);
    if (!m.mctx || !m.md) {
        st = dsq_fail(DSQ_ERR_NOMEM, "tokenizer: out of memory for regex matching");
        goto done;
    }
    for (size_t i = 0; i < n_steps && st == DSQ_OK; i++) {
        st = apply_step(&steps[i], &m, shadow, spans, &tmp);
        if (st == DSQ_OK) {
            dsq_tok_spans swap = *spans;
            *spans = tmp;
            tmp = swap;
        }
    }
done:
    dsq_tok_spans_free(&tmp);
    if (m.md) pcre2_match_data_free(m.md);
    if (m.mctx) pcre2_match_context_free(m.mctx);
    return st;
}
