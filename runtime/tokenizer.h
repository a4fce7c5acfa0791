/* Text <-> token ids, as llama.cpp's tokenizer does it (src/llama-vocab.cpp,
 * src/unicode.cpp): byte-level BPE (GGUF tokenizer.ggml.model "gpt2", with the
 * pre-tokenizer regexes llama.cpp picks by tokenizer.ggml.pre) and
 * SentencePiece-style merging by score (model "llama"). Hugging Face
 * tokenizer.json files of model type BPE are read directly, with their own
 * pre-tokenizer and normalizer.
 *
 * A tokenizer is immutable once built: encode/decode may run from many threads
 * at once. Token ids are int32_t like llama_token; -1 means "none". */
#ifndef DSQ_RUNTIME_TOKENIZER_H
#define DSQ_RUNTIME_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/gguf.h"

typedef struct dsq_tokenizer dsq_tokenizer;

typedef enum dsq_tok_type {
    DSQ_TOK_BPE = 1, /* merges by rank (byte-level or not) */
    DSQ_TOK_SPM = 2, /* merges by token score, byte fallback, leading space */
} dsq_tok_type;

/* Token attributes: the bits of llama.cpp's llama_token_attr. */
enum {
    DSQ_TOKATTR_UNDEFINED = 0,
    DSQ_TOKATTR_UNKNOWN = 1u << 0,
    DSQ_TOKATTR_UNUSED = 1u << 1,
    DSQ_TOKATTR_NORMAL = 1u << 2,
    DSQ_TOKATTR_CONTROL = 1u << 3,
    DSQ_TOKATTR_USER_DEFINED = 1u << 4,
    DSQ_TOKATTR_BYTE = 1u << 5,
    DSQ_TOKATTR_LSTRIP = 1u << 7,
    DSQ_TOKATTR_RSTRIP = 1u << 8,
};

/* Decode options (0 = the plain concatenation of token pieces). */
enum {
    /* Render control/unknown tokens as their text (llama.cpp "unparse_special"). */
    DSQ_DECODE_SPECIAL = 1u << 0,
    /* Drop a leading BOS / trailing EOS that add_bos/add_eos would have added. */
    DSQ_DECODE_REMOVE_SPECIAL = 1u << 1,
    /* llama.cpp's clean_up_tokenization_spaces pass (" ," -> ",", " 's" -> "'s"),
     * when the tokenizer asks for it. Not reversible, so off by default. */
    DSQ_DECODE_CLEAN_SPACES = 1u << 2,
};

/* A growable id list; encode appends to it. Zero-initialise before first use. */
typedef struct dsq_tokens {
    int32_t *ids;
    size_t n, cap;
} dsq_tokens;

void dsq_tokens_free(dsq_tokens *v);

/* From GGUF tokenizer.* metadata (the file may be vocab-only). Unsupported
 * tokenizer.ggml.model / .pre values fail with DSQ_ERR_UNSUPPORTED naming them. */
dsq_status dsq_tokenizer_from_gguf(const dsq_gguf *g, dsq_tokenizer **out);

/* From <dir>/tokenizer.json (+ tokenizer_config.json when present). Only
 * model.type "BPE" is supported; pre-tokenizers Sequence/Split/ByteLevel/
 * Digits/Metaspace, normalizers Sequence/Prepend/Replace/NFC (NFC is taken as
 * already satisfied, as llama.cpp does). Anything else fails naming the field. */
dsq_status dsq_tokenizer_from_hf_dir(const char *dir, dsq_tokenizer **out);

/* A GGUF file or a Hugging Face folder, whichever path names. */
dsq_status dsq_tokenizer_load(const char *path, dsq_tokenizer **out);

void dsq_tokenizer_free(dsq_tokenizer *t);

/* Appends the ids of text[0..len) to out. add_special: BOS/EOS as the
 * tokenizer's add_bos/add_eos say. parse_special: text of control tokens
 * becomes those tokens (user-defined tokens are always matched, as in
 * llama.cpp and Hugging Face). On failure out keeps its earlier contents. */
dsq_status dsq_tokenizer_encode(const dsq_tokenizer *t, const char *text, size_t len, bool add_special,
                                bool parse_special, dsq_tokens *out);

/* Bytes of ids[0..n) (DSQ_DECODE_* flags) as a malloc'd NUL-terminated buffer;
 * *out_len excludes the NUL. Ids outside the vocabulary are an error. */
dsq_status dsq_tokenizer_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                                size_t *out_len);

/* Bytes one token decodes to (llama.cpp token_to_piece with lstrip 0); with
 * special false, control/unknown tokens give "". NULL when id is out of range. */
const char *dsq_tokenizer_piece(const dsq_tokenizer *t, int32_t id, bool special, size_t *len);

dsq_tok_type dsq_tokenizer_type(const dsq_tokenizer *t);
/* The pre-tokenizer name ("gpt-2", "smollm", ...; "hf" for tokenizer.json rules). */
const char *dsq_tokenizer_pre(const dsq_tokenizer *t);
uint32_t dsq_tokenizer_n_vocab(const dsq_tokenizer *t);
int32_t dsq_tokenizer_bos(const dsq_tokenizer *t);
int32_t dsq_tokenizer_eos(const dsq_tokenizer *t);
int32_t dsq_tokenizer_unk(const dsq_tokenizer *t);
bool dsq_tokenizer_add_bos(const dsq_tokenizer *t);
bool dsq_tokenizer_add_eos(const dsq_tokenizer *t);
/* Vocabulary text of a token (as stored: byte-level BPE text is GPT-2's
 * byte-to-unicode form), or NULL when out of range. */
const char *dsq_tokenizer_token_text(const dsq_tokenizer *t, int32_t id, size_t *len);
uint32_t dsq_tokenizer_token_attr(const dsq_tokenizer *t, int32_t id);
/* Id of a token by its exact vocabulary text, or -1. */
int32_t dsq_tokenizer_find(const dsq_tokenizer *t, const char *text, size_t len);

#endif
