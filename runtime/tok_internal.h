/* Private to runtime/ (tokenizer.c, tok_*.c): internals shared by the
 * tokenizer files, not part of the library's public API. */
#ifndef DSQ_RUNTIME_TOK_INTERNAL_H
#define DSQ_RUNTIME_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/status.h"
#include "core/strmap.h"
#include "runtime/tokenizer.h"

/* ---- arena: strings that live as long as the tokenizer ---- */
typedef struct dsq_tok_chunk dsq_tok_chunk;
typedef struct dsq_tok_arena {
    dsq_tok_chunk *head;
} dsq_tok_arena;

/* Copy of s[0..n) with a NUL after it; NULL when out of memory. */
char *dsq_tok_arena_dup(dsq_tok_arena *a, const char *s, size_t n);
void dsq_tok_arena_free(dsq_tok_arena *a);

/* ---- growable byte buffer ---- */
typedef struct dsq_tok_buf {
    char *p;
    size_t n, cap;
} dsq_tok_buf;

dsq_status dsq_tok_buf_reserve(dsq_tok_buf *b, size_t extra);
dsq_status dsq_tok_buf_put(dsq_tok_buf *b, const void *data, size_t n);
void dsq_tok_buf_free(dsq_tok_buf *b);

dsq_status dsq_tokens_push(dsq_tokens *v, int32_t id);

/* ---- UTF-8 as llama.cpp reads it (src/unicode.cpp) ---- */
/* Length of the sequence a lead byte announces (1 for stray continuation bytes). */
static inline size_t dsq_utf8_len(unsigned char c)
{
    static const unsigned char lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}
/* Decodes one code point at s[*off] the way unicode_cpt_from_utf8 does
 * (overlong forms accepted); an invalid or cut sequence gives U+FFFD and
 * consumes one byte. */
uint32_t dsq_utf8_next(const char *s, size_t n, size_t *off);
/* Encodes cp (<= 0x10FFFF) into out[4]; returns the byte count. */
size_t dsq_utf8_put(uint32_t cp, char *out);

/* The text the pre-tokenizer regexes see: every code point of in re-encoded
 * (norm, which the words are cut from) plus a copy that PCRE2 accepts as UTF-8
 * (shadow: surrogates become U+FFFF, same length). Code points above U+10FFFF
 * become U+FFFD in both. */
dsq_status dsq_tok_sanitize(const char *in, size_t n, dsq_tok_buf *norm, dsq_tok_buf *shadow);

/* ---- pre-tokenizer steps ---- */
typedef enum dsq_split_behavior {
    DSQ_SPLIT_ISOLATED = 0,
    DSQ_SPLIT_REMOVED,
    DSQ_SPLIT_MERGED_PREV,
    DSQ_SPLIT_MERGED_NEXT,
    DSQ_SPLIT_CONTIGUOUS,
} dsq_split_behavior;

typedef struct dsq_tok_step {
    pcre2_code *re; /* NULL for a byte_map step */
    bool byte_map;  /* tokenizers' ByteLevel: later steps see the byte-to-unicode text */
    bool jit;
    dsq_split_behavior behavior;
    bool invert;
} dsq_tok_step;

/* Pattern dialects: llama.cpp runs its patterns through std::regex on a
 * category-collapsed text (\s = White_Space, \d = [0-9], \w = [A-Za-z0-9_],
 * $ = end of text); tokenizer.json patterns are Oniguruma's (\s = White_Space,
 * \d and \w Unicode, $ = end of line). */
typedef enum dsq_re_dialect {
    DSQ_RE_LLAMA,
    DSQ_RE_HF,
    DSQ_RE_LITERAL,
} dsq_re_dialect;

dsq_status dsq_tok_step_compile(dsq_tok_step *s, const char *pattern, size_t len, dsq_re_dialect dialect,
                                const char *what);
void dsq_tok_step_free(dsq_tok_step *s);

/* A tokenizer.ggml.pre entry: the regexes llama.cpp applies in turn, and the
 * flags it sets with them. */
typedef struct dsq_tok_pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *const *regexes;
    bool clean_spaces;
    bool ignore_merges;
    bool add_bos;
} dsq_tok_pre_def;

/* NULL when llama.cpp does not know the name. */
const dsq_tok_pre_def *dsq_tok_pre_find(const char *name);

typedef struct dsq_tok_span {
    size_t start, end;
} dsq_tok_span;

typedef struct dsq_tok_spans {
    dsq_tok_span *v;
    size_t n, cap;
} dsq_tok_spans;

dsq_status dsq_tok_spans_push(dsq_tok_spans *s, size_t start, size_t end);
void dsq_tok_spans_free(dsq_tok_spans *s);

/* Applies regex steps in turn to the pieces of shadow in spans: each cuts
 * the pieces the one before left (byte ranges; empty ones dropped). */
dsq_status dsq_tok_pretokenize(const dsq_tok_step *steps, size_t n_steps, const char *shadow, dsq_tok_spans *spans);

/* ---- normalizer steps (tokenizer.json) ---- */
typedef enum dsq_tok_norm_kind {
    DSQ_NORM_PREPEND,         /* always (normalizer Prepend) */
    DSQ_NORM_PREPEND_MISSING, /* unless already there (ByteLevel prefix space, Metaspace) */
    DSQ_NORM_REPLACE,
} dsq_tok_norm_kind;

typedef struct dsq_tok_norm {
    dsq_tok_norm_kind kind;
    const char *a; /* prepend text / literal pattern (NULL when re is set) */
    size_t alen;
    const char *b; /* replacement */
    size_t blen;
    pcre2_code *re;  /* Replace with a Regex pattern */
    bool first_only; /* Metaspace prepend_scheme "first": only where the input starts */
} dsq_tok_norm;

/* ---- the tokenizer ---- */
struct dsq_tokenizer {
    dsq_tok_type type;
    char pre[64];
    uint32_t n_vocab;
    const char **text;
    uint32_t *text_len;
    float *score;
    uint16_t *attr;
    const char **piece; /* token_to_piece(special = true), built once */
    uint32_t *piece_len;

    dsq_strmap vocab;  /* text -> id; the first id of a repeated text wins, as std::unordered_map::emplace */
    dsq_strmap merges; /* "left right" -> rank */

    dsq_tok_step *steps;
    size_t n_steps;
    dsq_tok_norm *norms;
    size_t n_norms;

    int32_t *special; /* partition order: longest text first */
    size_t n_special;

    int32_t bos, eos, unk;
    int32_t byte_tok[256]; /* <0xXX> token (or the 1-byte token) per byte, -1 none */
    int32_t char_tok[256]; /* token whose text is that single byte, -1 none */
    char b2u[256][2];      /* GPT-2 bytes_to_unicode, UTF-8 */
    uint8_t b2u_len[256];
    int16_t u2b[324]; /* inverse, by code point; -1 none */

    bool add_bos, add_eos;
    bool add_space_prefix; /* SPM: " " before raw text after a special; decode strips one */
    bool unescape_ws;      /* U+2581 -> ' ' in decoded pieces (tokenizer.json Metaspace-style BPE) */
    bool byte_encode;      /* GPT-2 byte-to-unicode before BPE */
    bool byte_fallback;    /* <0xXX> for unknown pieces (non-byte-level BPE) */
    bool ignore_merges;
    bool clean_spaces;
    bool hf_unk_fallback; /* unknown piece -> unk (Hugging Face BPE), not dropped */

    dsq_tok_arena arena;
};

/* Allocates the per-token arrays for n tokens (attrs NORMAL, scores 0) and a
 * vocab map; every other field gets its "none" value. */
dsq_status dsq_tok_new(uint32_t n, dsq_tokenizer **out);
/* Common finishing step after a constructor filled tokens, merges and flags:
 * checks the vocab map, marks control-looking tokens as llama.cpp does, builds
 * the special-token order, byte tables and the piece cache. */
dsq_status dsq_tok_finish(dsq_tokenizer *t, const char *what);

/* Scratch space of the merge loops, reused from word to word. */
typedef struct dsq_tok_ws {
    void *syms;
    size_t syms_cap;
    void *heap;
    size_t heap_cap;
    void *key;
    size_t key_cap;
} dsq_tok_ws;

void dsq_tok_ws_free(dsq_tok_ws *ws);

/* Merge loops, on one piece of text: BPE by merge rank on a pre-tokenized
 * word, SPM by token score on a whole (escaped) fragment. */
dsq_status dsq_tok_bpe_word(const dsq_tokenizer *t, dsq_tok_ws *ws, const char *w, size_t n, dsq_tokens *out);
dsq_status dsq_tok_spm_text(const dsq_tokenizer *t, dsq_tok_ws *ws, const char *s, size_t n, dsq_tokens *out);

#endif
