/* Tokenizers between Hugging Face files and GGUF tokenizer.* metadata.
 *
 * HF -> GGUF follows llama.cpp's converter: TextModel.get_vocab_base and
 * _set_vocab_gpt2 for byte-level BPE ("gpt2"), _set_vocab_llama_hf for BPE
 * with byte fallback ("llama"), gguf-py's SpecialVocab for special ids,
 * add_bos/add_eos and the chat template, LlamaModel.set_vocab for
 * add_space_prefix. Where the converter needs the transformers package (the
 * pre-tokenizer hash of get_vocab_base_pre, re-normalising added tokens) we
 * read tokenizer.json directly instead; hf_tokenizer.h lists those choices
 * and the table of pre-tokenizers is below.
 *
 * GGUF -> HF writes a tokenizer.json that the tokenizers package loads and
 * that converts back to the same tokenizer.* keys. For "llama" vocabularies
 * the BPE merges are derived from the scores the way transformers'
 * convert_slow_tokenizer (SentencePieceExtractor) derives them from a
 * SentencePiece model. */
#include "formats/hf_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/grow.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strmap.h"
#include "core/utf8.h"

enum {
    TOKENIZER_MAX_BYTES = 512 << 20,
    SIDE_FILE_MAX_BYTES = 64 << 20,
    MAX_TOKENS = 1 << 24, /* ids must stay well inside int32 */
    /* gguf-py TokenType */
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

/* Scores the converter gives tokens it adds (SentencePiece paths). */
#define SCORE_ADDED (-1000.0f)
#define SCORE_PAD (-10000.0f)

typedef enum vocab_kind { KIND_GPT2, KIND_LLAMA } vocab_kind;

/* ================================================================ helpers */

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* "<0xXX>": a SentencePiece byte-fallback piece (LlamaHfVocab's BYTE rule). */
static bool is_byte_token(const char *s)
{
    return strlen(s) == 6 && starts_with(s, "<0x") && is_hex(s[3]) && is_hex(s[4]) && s[5] == '>';
}

/* TextModel.does_token_look_special: added tokens some models forget to
 * mark special. */
static bool looks_special(const char *s)
{
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (!strcmp(s, exact[i])) return true;
    if (starts_with(s, "<|") && ends_with(s, "|>")) return true;
    if (starts_with(s, "<\xef\xbd\x9c") && ends_with(s, "\xef\xbd\x9c>")) return true; /* <｜ ... ｜> */
    return starts_with(s, "<unused") && ends_with(s, ">");
}

/* User-defined tokens are stored pre-normalised: U+2581 becomes a space. */
static char *spaces_from_spm(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (!strncmp(s + i, "\xe2\x96\x81", 3)) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    out[o] = '\0';
    return out;
}

static bool is_pad_name(const char *s, int64_t id)
{
    char buf[32];
    snprintf(buf, sizeof buf, "[PAD%lld]", (long long)id);
    return !strcmp(s, buf);
}

/* ================================================== pre-tokenizer table */

/* Hands child to parent under key. cJSON copies the key, which can fail; the
 * child is then still ours, so it is freed here (NULL child: false too). */
static bool add_obj(cJSON *parent, const char *key, cJSON *child)
{
    if (!child) return false;
    if (cJSON_AddItemToObject(parent, key, child)) return true;
    cJSON_Delete(child);
    return false;
}

static cJSON *j_split(const char *regex)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *pat = cJSON_CreateObject();
    if (!o || !pat || !cJSON_AddStringToObject(pat, "Regex", regex) || !cJSON_AddStringToObject(o, "type", "Split")) {
        cJSON_Delete(o);
        cJSON_Delete(pat);
        return NULL;
    }
    if (!add_obj(o, "pattern", pat) || !cJSON_AddStringToObject(o, "behavior", "Isolated") ||
        !cJSON_AddFalseToObject(o, "invert")) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", "ByteLevel") ||
        !cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space) ||
        !cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets) || !cJSON_AddBoolToObject(o, "use_regex", use_regex)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_digits(bool individual)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", "Digits") ||
        !cJSON_AddBoolToObject(o, "individual_digits", individual)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_punctuation(const char *behavior)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", "Punctuation") || !cJSON_AddStringToObject(o, "behavior", behavior)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A Sequence pre-tokenizer of n parts (NULL parts make it fail as a whole). */
static cJSON *j_seq(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    bool ok = o && arr && cJSON_AddStringToObject(o, "type", "Sequence");
    for (int i = 0; i < n; i++) {
        cJSON *p = va_arg(ap, cJSON *);
        if (p && ok)
            cJSON_AddItemToArray(arr, p);
        else {
            cJSON_Delete(p);
            ok = false;
        }
    }
    va_end(ap);
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(arr);
        return NULL;
    }
    if (!add_obj(o, "pretokenizers", arr)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The split patterns as the models' tokenizer.json files spell them;
 * llama-vocab.cpp quotes the same ones (some rewritten without (?i:)). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3                                                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                                         \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"                                                                     \
    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"  \
    "\\s+(?!\\S)|\\s+"
#define RE_CJK                                                                                                         \
    "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9e\xbf]+" /* [一-龥ࠀ-一가-퟿]+ */
#define RE_DEEPSEEK_LETTERS                                                                                            \
    "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf\xc7\x84-"                 \
    "\xca\x93\xca\x95-"                                                                                                \
    "\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-"     \
    "\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-"                        \
    "\xe1\x83\x85\xe1\x8e\xa0-"                                                                                        \
    "\xe1\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab" \
    "\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-"                         \
    "\xe1\xbc\x9d\xe1\xbc\xa0-"                                                                                        \
    "\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-"  \
    "\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-" \
    "\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4" \
    "\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d"  \
    "\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-"  \
    "\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-"  \
    "\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80-\xea\x9a\x9b"  \
    "\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-"                         \
    "\xea\xae\xbf\xef\xac\x80-"                                                                                        \
    "\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-"         \
    "\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-"              \
    "\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-"              \
    "\xf0\x9e\xa5\x83]+"
/* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
#define RE_DEEPSEEK_PUNCT                                                                                              \
    "\\s?[!-/"                                                                                                         \
    ":-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+"
#define RE_DEEPSEEK3                                                                                                   \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "                \
    "?[\\p{P}\\p{S}]+"                                                                                                 \
    "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

static cJSON *pre_gpt2(void) { return j_byte_level(false, true, true); }

static cJSON *pre_llama3(void) { return j_seq(2, j_split(RE_LLAMA3), j_byte_level(false, true, false)); }

static cJSON *pre_qwen2(void) { return j_seq(2, j_split(RE_QWEN2), j_byte_level(false, false, false)); }

static cJSON *pre_digits_gpt2(void) { return j_seq(2, j_digits(true), j_byte_level(false, true, true)); }

static cJSON *pre_deepseek_coder(void)
{
    return j_seq(6, j_split("[\r\n]"), j_split("\\s?\\p{L}+"), j_split("\\s?\\p{P}+"), j_split(RE_CJK), j_digits(true),
                 j_byte_level(false, true, false));
}

static cJSON *pre_deepseek_llm(void)
{
    return j_seq(7, j_split("[\r\n]"), j_split(RE_DEEPSEEK_LETTERS), j_split(RE_DEEPSEEK_PUNCT), j_split("\\s+$"),
                 j_split(RE_CJK), j_digits(false), j_byte_level(false, true, false));
}

static cJSON *pre_deepseek3(void)
{
    return j_seq(4, j_split("\\p{N}{1,3}"),
                 j_split("[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+"), /* [一-龥぀-ゟ゠-ヿ]+
                                                                                                             */
                 j_split(RE_DEEPSEEK3), j_byte_level(false, true, false));
}

static cJSON *pre_falcon(void)
{
    return j_seq(4, j_punctuation("Contiguous"), j_byte_level(false, true, true), j_digits(false),
                 j_split("[0-9][0-9][0-9]"));
}

/* llama.cpp's regexes for a missing or "default" pre (llm_tokenizer_bpe). */
static cJSON *pre_default(void)
{
    return j_seq(5, j_split("[\\p{P}\\$\\+<=>\\^~\\|]+"), j_split(RE_GPT2), j_split("\\p{N}+"),
                 j_split("[0-9][0-9][0-9]"), j_byte_level(false, true, false));
}

typedef enum norm_kind { NORM_NONE, NORM_NFC } norm_kind;

typedef struct pre_row {
    const char *name; /* tokenizer.ggml.pre */
    cJSON *(*build)(void);
    norm_kind norm;
    bool decoder_plain; /* ByteLevel decoder with every flag false (Qwen2) */
    /* Rows with the same pre-tokenizer are told apart by a token only that
     * model family has (what llama.cpp's token-id hash sees). */
    const char *probe;
    bool ignore_merges;
} pre_row;

/* Order matters: the first row that fits wins. Verified rows: gpt-2,
 * starcoder, deepseek-coder, falcon against llama.cpp's vocab test files;
 * smollm against SmolLM2's tokenizer.json; llama-bpe, qwen2, deepseek-llm,
 * deepseek-v3 and default are built from llama-vocab.cpp's regexes. */
static const pre_row g_pre_rows[] = {
    {"llama-bpe", pre_llama3, NORM_NONE, false, NULL, true},
    {"deepseek-r1-qwen", pre_qwen2, NORM_NFC, true,
     "<\xef\xbd\x9c"
     "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
     false},
    {"qwen2", pre_qwen2, NORM_NFC, true, NULL, false},
    {"smollm", pre_digits_gpt2, NORM_NONE, false, "<|im_start|>", false},
    {"starcoder", pre_digits_gpt2, NORM_NONE, false, NULL, false},
    {"gpt-2", pre_gpt2, NORM_NONE, false, NULL, false},
    {"deepseek-coder", pre_deepseek_coder, NORM_NONE, false, NULL, false},
    {"deepseek-llm", pre_deepseek_llm, NORM_NONE, false, NULL, false},
    {"deepseek-v3", pre_deepseek3, NORM_NONE, false, NULL, false},
    {"falcon", pre_falcon, NORM_NONE, false, NULL, false},
    {"default", pre_default, NORM_NONE, false, NULL, false},
};
#define N_PRE_ROWS (sizeof g_pre_rows / sizeof g_pre_rows[0])

/* Names llama.cpp treats exactly like one of the rows (same regexes). They
 * export; converting back gives the row's name. */
static const struct {
    const char *alias, *row;
} g_pre_aliases[] = {
    {"llama3", "llama-bpe"},  {"llama-v3", "llama-bpe"}, {"smaug-bpe", "llama-bpe"}, {"dbrx", "llama-bpe"},
    {"falcon3", "llama-bpe"}, {"pixtral", "llama-bpe"},  {"megrez", "qwen2"},        {"mpt", "gpt-2"},
    {"olmo", "gpt-2"},        {"phi-2", "gpt-2"},        {"refact", "starcoder"},    {"codeshell", "starcoder"},
};

static const pre_row *pre_row_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof g_pre_aliases / sizeof g_pre_aliases[0]; i++)
        if (!strcmp(name, g_pre_aliases[i].alias)) name = g_pre_aliases[i].row;
    for (size_t i = 0; i < N_PRE_ROWS; i++)
        if (!strcmp(g_pre_rows[i].name, name)) return &g_pre_rows[i];
    return NULL;
}

/* ------------------------------------------- canonical pre-tokenizer form */

static bool set_default_bool(cJSON *o, const char *key, bool v)
{
    return cJSON_GetObjectItemCaseSensitive(o, key) || cJSON_AddBoolToObject(o, key, v);
}

/* Fills the defaults tokenizers applies when a key is missing, and drops
 * what does not change token ids (ByteLevel trim_offsets). */
static bool canon_step(cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "";
    if (!strcmp(type, "ByteLevel")) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "trim_offsets");
        return set_default_bool(o, "add_prefix_space", true) && set_default_bool(o, "use_regex", true);
    }
    if (!strcmp(type, "Split")) return set_default_bool(o, "invert", false);
    if (!strcmp(type, "Digits")) return set_default_bool(o, "individual_digits", false);
    if (!strcmp(type, "Punctuation"))
        return cJSON_GetObjectItemCaseSensitive(o, "behavior") || cJSON_AddStringToObject(o, "behavior", "Isolated");
    return true;
}

/* Appends the steps of a (possibly nested) Sequence to flat; items are
 * copied. listkey is "pretokenizers" or "normalizers". */
static bool flatten(const cJSON *node, const char *listkey, cJSON *flat)
{
    if (!node || cJSON_IsNull(node)) return true;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, listkey);
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "Sequence") && cJSON_IsArray(list)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
        {
            if (!flatten(it, listkey, flat)) return false;
        }
        return true;
    }
    cJSON *copy = cJSON_Duplicate(node, true);
    if (!copy || !canon_step(copy)) {
        cJSON_Delete(copy);
        return false;
    }
    cJSON_AddItemToArray(flat, copy);
    return true;
}

/* A flat array of canonical steps (empty for null), or NULL on no memory. */
static cJSON *canon(const cJSON *node, const char *listkey)
{
    cJSON *flat = cJSON_CreateArray();
    if (flat && !flatten(node, listkey, flat)) {
        cJSON_Delete(flat);
        return NULL;
    }
    return flat;
}

static cJSON *row_normalizer(const pre_row *r)
{
    if (r->norm == NORM_NONE) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "type", "NFC")) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ===================================================== HF side: reading */

typedef struct hf_files {
    const char *dir;
    char tok_path[4096];
    cJSON *tok;    /* tokenizer.json */
    cJSON *tcfg;   /* tokenizer_config.json, or NULL */
    cJSON *config; /* config.json, or NULL */
    char *chat_jinja;
    cJSON *chat_json; /* chat_template.json */
} hf_files;

static void hf_files_free(hf_files *f)
{
    cJSON_Delete(f->tok);
    cJSON_Delete(f->tcfg);
    cJSON_Delete(f->config);
    cJSON_Delete(f->chat_json);
    free(f->chat_jinja);
}

/* Reads dir/name; *text stays NULL when the file does not exist. */
static dsq_status read_optional(const char *dir, const char *name, size_t max, char **text, char *path, size_t cap)
{
    *text = NULL;
    DSQ_TRY(dsq_path_join(path, cap, dir, name));
    if (!dsq_exists(path)) return DSQ_OK;
    return dsq_read_file(path, max, text, NULL);
}

static dsq_status read_json(const char *dir, const char *name, size_t max, bool required, cJSON **out, char *path,
                            size_t cap)
{
    char *text = NULL;
    *out = NULL;
    DSQ_TRY(read_optional(dir, name, max, &text, path, cap));
    if (!text) return required ? dsq_fail(DSQ_ERR_NOT_FOUND, "%s: not found", path) : DSQ_OK;
    dsq_status why;
    *out = dsq_json_parse(text, strlen(text), NULL, &why);
    free(text);
    if (!*out && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return DSQ_OK;
}

static dsq_status hf_files_load(const char *dir, hf_files *f)
{
    memset(f, 0, sizeof *f);
    f->dir = dir;
    char path[4096];
    DSQ_TRY(read_json(dir, "tokenizer.json", TOKENIZER_MAX_BYTES, true, &f->tok, f->tok_path, sizeof f->tok_path));
    DSQ_TRY(read_json(dir, "tokenizer_config.json", SIDE_FILE_MAX_BYTES, false, &f->tcfg, path, sizeof path));
    DSQ_TRY(read_json(dir, "config.json", SIDE_FILE_MAX_BYTES, false, &f->config, path, sizeof path));
    DSQ_TRY(read_optional(dir, "chat_template.jinja", SIDE_FILE_MAX_BYTES, &f->chat_jinja, path, sizeof path));
    return read_json(dir, "chat_template.json", SIDE_FILE_MAX_BYTES, false, &f->chat_json, path, sizeof path);
}

static const cJSON *jget(const cJSON *o, const char *key)
{
    const cJSON *it = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool dflt)
{
    const cJSON *it = jget(o, key);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : dflt;
}

/* A non-negative integer id below limit, or -1. */
static int64_t jid(const cJSON *it, int64_t limit)
{
    if (!cJSON_IsNumber(it)) return -1;
    double v = it->valuedouble;
    return v >= 0 && v < (double)limit && v == (double)(int64_t)v ? (int64_t)v : -1;
}

/* True when config.json names a Qwen2 model (LlamaModel rules not applied). */
static bool config_is_qwen2(const hf_files *f)
{
    const cJSON *a = jget(f->config, "architectures");
    const cJSON *first = cJSON_IsArray(a) ? a->child : NULL;
    return cJSON_IsString(first) && !strcmp(first->valuestring, "Qwen2ForCausalLM");
}

/* ====================================================== HF side: vocab */

typedef struct vocab {
    vocab_kind kind;
    int64_t n;
    char **text; /* owned; every entry set after vocab_fill_gaps */
    int32_t *type;
    float *score;   /* llama only */
    int64_t unk_id; /* model.unk_token's id (llama), -1 if none */
    cJSON *merges;  /* borrowed from tokenizer.json */
} vocab;

static void vocab_free(vocab *v)
{
    for (int64_t i = 0; v->text && i < v->n; i++) free(v->text[i]);
    free(v->text);
    free(v->type);
    free(v->score);
    memset(v, 0, sizeof *v);
}

static dsq_status vocab_kind_of(const hf_files *f, vocab_kind *kind)
{
    const cJSON *model = jget(f->tok, "model");
    const cJSON *type = jget(model, "type");
    if (!cJSON_IsObject(model)) return dsq_fail(DSQ_ERR_FORMAT, "%s: no \"model\" object", f->tok_path);
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tokenizer model \"%.32s\" is not supported (only BPE)", f->tok_path,
                        cJSON_IsString(type) ? type->valuestring : "?");
    if (!cJSON_IsObject(jget(model, "vocab")))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: model.vocab must be an object", f->tok_path);
    if (jbool(model, "byte_fallback", false)) {
        *kind = KIND_LLAMA;
        return DSQ_OK;
    }
    /* BpeVocab's condition for a GPT-2 style byte-level BPE. */
    const cJSON *dec = jget(f->tok, "decoder"), *dt = jget(dec, "type");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "ByteLevel") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: a BPE tokenizer needs byte_fallback or a ByteLevel decoder to be converted", f->tok_path);
    *kind = KIND_GPT2;
    return DSQ_OK;
}

/* The largest id in model.vocab and added_tokens, checked. */
static dsq_status vocab_max_id(const hf_files *f, int64_t *max_id)
{
    const cJSON *it, *model = jget(f->tok, "model");
    *max_id = -1;
    cJSON_ArrayForEach(it, jget(model, "vocab"))
    {
        int64_t id = jid(it, MAX_TOKENS);
        if (id < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: vocab entry \"%.64s\" has a bad id", f->tok_path, it->string);
        if (id > *max_id) *max_id = id;
    }
    cJSON_ArrayForEach(it, jget(f->tok, "added_tokens"))
    {
        int64_t id = jid(jget(it, "id"), MAX_TOKENS);
        if (id < 0 || !cJSON_IsString(jget(it, "content")))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: an added_tokens entry has no valid id and content", f->tok_path);
        if (id > *max_id) *max_id = id;
    }
    if (*max_id < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: the vocabulary is empty", f->tok_path);
    return DSQ_OK;
}

/* The converter sizes the token list to config.json's vocab_size. */
static dsq_status vocab_alloc(const hf_files *f, vocab *v)
{
    int64_t max_id;
    DSQ_TRY(vocab_max_id(f, &max_id));
    int64_t n = max_id + 1;
    int64_t cfg_n = jid(jget(f->config, "vocab_size"), MAX_TOKENS + 1);
    if (cfg_n > 0 && cfg_n < n)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: token id %lld does not fit config.json vocab_size %lld", f->tok_path,
                        (long long)max_id, (long long)cfg_n);
    if (cfg_n > n) n = cfg_n;
    v->n = n;
    v->text = calloc((size_t)n, sizeof *v->text);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->score = v->kind == KIND_LLAMA ? calloc((size_t)n, sizeof *v->score) : NULL;
    if (!v->text || !v->type || (v->kind == KIND_LLAMA && !v->score))
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
    return DSQ_OK;
}

static dsq_status vocab_set(vocab *v, int64_t id, const char *s)
{
    char *copy = strdup(s);
    if (!copy) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for token %lld", (long long)id);
    free(v->text[id]);
    v->text[id] = copy;
    return DSQ_OK;
}

static dsq_status vocab_fill_model(const hf_files *f, vocab *v)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jget(jget(f->tok, "model"), "vocab"))
    {
        int64_t id = jid(it, v->n);
        if (v->text[id]) return dsq_fail(DSQ_ERR_FORMAT, "%s: vocab id %lld is used twice", f->tok_path, (long long)id);
        DSQ_TRY(vocab_set(v, id, it->string));
        v->type[id] = v->kind == KIND_LLAMA && is_byte_token(it->string) ? TT_BYTE : TT_NORMAL;
    }
    return DSQ_OK;
}

/* get_vocab_base: an added token is CONTROL when special (or when it looks
 * special), else USER_DEFINED with U+2581 pre-normalised to spaces. */
static dsq_status vocab_fill_added(const hf_files *f, vocab *v)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jget(f->tok, "added_tokens"))
    {
        int64_t id = jid(jget(it, "id"), v->n);
        const char *content = jget(it, "content")->valuestring;
        bool special = jbool(it, "special", false) || looks_special(content);
        if (special) {
            DSQ_TRY(vocab_set(v, id, content));
        } else {
            char *s = spaces_from_spm(content);
            if (!s) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for token %lld", (long long)id);
            free(v->text[id]);
            v->text[id] = s;
        }
        v->type[id] = special ? TT_CONTROL : TT_USER_DEFINED;
        /* SentencePiece gives control pieces 0; the converter gives added
         * user-defined pieces -1000. */
        if (v->score) v->score[id] = special ? 0.0f : SCORE_ADDED;
    }
    return DSQ_OK;
}

/* Ids nobody uses become "[PAD<id>]" UNUSED tokens, as get_vocab_base pads. */
static dsq_status vocab_fill_gaps(vocab *v)
{
    for (int64_t i = 0; i < v->n; i++) {
        if (v->text[i]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%lld]", (long long)i);
        DSQ_TRY(vocab_set(v, i, buf));
        v->type[i] = TT_UNUSED;
        if (v->score) v->score[i] = SCORE_PAD;
    }
    return DSQ_OK;
}

/* model.unk_token of a byte-fallback BPE is SentencePiece's UNKNOWN piece. */
static void vocab_mark_unk(const hf_files *f, vocab *v)
{
    const cJSON *unk = jget(jget(f->tok, "model"), "unk_token");
    v->unk_id = -1;
    if (v->kind != KIND_LLAMA || !cJSON_IsString(unk)) return;
    for (int64_t i = 0; i < v->n; i++) {
        if (!strcmp(v->text[i], unk->valuestring)) {
            v->unk_id = i;
            v->type[i] = TT_UNKNOWN;
            v->score[i] = 0.0f;
            return;
        }
    }
}

/* One merge as the two parts: "a b" strings (split at the first space
 * after the first byte, as llama.cpp does) or [a, b] pairs. */
static bool merge_parts(const cJSON *m, const char **a, size_t *alen, const char **b)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring;
        const char *sp = s[0] ? strchr(s + 1, ' ') : NULL;
        if (!sp) return false;
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        return true;
    }
    const cJSON *x = cJSON_IsArray(m) ? m->child : NULL, *y = x ? x->next : NULL;
    if (!cJSON_IsString(x) || !cJSON_IsString(y) || y->next) return false;
    *a = x->valuestring;
    *alen = strlen(x->valuestring);
    *b = y->valuestring;
    return true;
}

/* SentencePiece scores for llama.cpp's SPM tokenizer, which merges the pair
 * whose joined text has the highest score: a token made by merge number r
 * (its first) scores -r, so score order is merge order. Single characters
 * and byte/control tokens keep 0; they never result from a merge. */
static dsq_status vocab_llama_scores(const hf_files *f, vocab *v)
{
    size_t n = v->n > 0 ? (size_t)v->n : 0;
    dsq_strmap m = {0};
    dsq_status st = dsq_strmap_reserve(&m, n);
    for (int64_t i = 0; st == DSQ_OK && i < v->n; i++)
        if (v->type[i] == TT_NORMAL) st = dsq_strmap_put(&m, v->text[i], strlen(v->text[i]), i, NULL);
    uint8_t *seen = calloc(n ? n : 1, 1);
    char *buf = NULL;
    size_t cap = 0;
    int64_t rank = 0;
    if (st == DSQ_OK && !seen) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory for merge ranks");
    const cJSON *mg, *list = st == DSQ_OK ? v->merges : (cJSON *)NULL;
    cJSON_ArrayForEach(mg, list)
    {
        const char *a, *b;
        size_t alen;
        if (!merge_parts(mg, &a, &alen, &b)) {
            st = dsq_fail(DSQ_ERR_FORMAT, "%s: merge %lld is malformed", f->tok_path, (long long)rank);
            break;
        }
        size_t need = alen + strlen(b) + 1;
        if (need > cap) {
            char *nb = realloc(buf, need * 2);
            if (!nb) {
                st = dsq_fail(DSQ_ERR_NOMEM, "out of memory for merges");
                break;
            }
            buf = nb;
            cap = need * 2;
        }
        memcpy(buf, a, alen);
        strcpy(buf + alen, b);
        int64_t id = dsq_strmap_get(&m, buf, need - 1);
        if (id >= 0 && !seen[id]) {
            seen[id] = 1;
            v->score[id] = (float)-rank;
        }
        rank++;
    }
    free(buf);
    free(seen);
    dsq_strmap_free(&m);
    return st;
}

static dsq_status vocab_build(const hf_files *f, vocab *v)
{
    DSQ_TRY(vocab_kind_of(f, &v->kind));
    v->merges = (cJSON *)jget(jget(f->tok, "model"), "merges");
    if (v->merges && !cJSON_IsArray(v->merges))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: model.merges must be a list", f->tok_path);
    DSQ_TRY(vocab_alloc(f, v));
    DSQ_TRY(vocab_fill_model(f, v));
    DSQ_TRY(vocab_fill_added(f, v));
    DSQ_TRY(vocab_fill_gaps(v));
    vocab_mark_unk(f, v);
    if (v->kind == KIND_LLAMA) DSQ_TRY(vocab_llama_scores(f, v));
    return DSQ_OK;
}

/* ================================================ HF side: pre-tokenizer */

static bool vocab_has(const vocab *v, const char *s)
{
    for (int64_t i = 0; i < v->n; i++)
        if (!strcmp(v->text[i], s)) return true;
    return false;
}

/* Matches tokenizer.json's pre_tokenizer (and normalizer) against the rows.
 * *name stays NULL when nothing matches. */
static dsq_status match_pre(const hf_files *f, const vocab *v, const char **name)
{
    *name = NULL;
    cJSON *want_pre = canon(jget(f->tok, "pre_tokenizer"), "pretokenizers");
    cJSON *want_norm = canon(jget(f->tok, "normalizer"), "normalizers");
    dsq_status st =
        want_pre && want_norm ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory matching the pre-tokenizer");
    int best = -1;
    for (size_t i = 0; i < N_PRE_ROWS && st == DSQ_OK; i++) {
        const pre_row *r = &g_pre_rows[i];
        if (r->probe && !vocab_has(v, r->probe)) continue;
        cJSON *built = r->build(), *rn = row_normalizer(r);
        cJSON *pre = canon(built, "pretokenizers"), *norm = canon(rn, "normalizers");
        if (!built || !rn || !pre || !norm) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory matching the pre-tokenizer");
        int score = st == DSQ_OK && cJSON_Compare(pre, want_pre, true) ? 1 + cJSON_Compare(norm, want_norm, true) : 0;
        /* The first row with the same pre-tokenizer, unless a later one
         * also has the same normalizer. */
        if (score > 0 && score > best) {
            *name = r->name;
            best = score;
        }
        cJSON_Delete(built);
        cJSON_Delete(rn);
        cJSON_Delete(pre);
        cJSON_Delete(norm);
    }
    cJSON_Delete(want_pre);
    cJSON_Delete(want_norm);
    if (st == DSQ_OK && best == 1)
        DSQ_LOGW("%s: pre-tokenizer matches \"%s\" but the normalizer differs", f->tok_path, *name);
    return st;
}

/* ================================================= HF side: SpecialVocab */

enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, N_SPECIAL };

/* gguf-py SpecialVocab's token types, their GGUF id keys and add_* keys
 * (GGUFWriter has no cls handler: SpecialVocab skips it with a warning). */
static const struct {
    const char *typ, *id_key, *add_key;
} g_special[N_SPECIAL] = {
    {"bos", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token"},
    {"eos", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_eos_token"},
    {"unk", "tokenizer.ggml.unknown_token_id", NULL},
    {"sep", "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.add_sep_token"},
    {"pad", "tokenizer.ggml.padding_token_id", NULL},
    {"cls", NULL, NULL},
    {"mask", "tokenizer.ggml.mask_token_id", NULL},
};

typedef struct special_vocab {
    int64_t id[N_SPECIAL];      /* -1: unset */
    int add[N_SPECIAL];         /* -1: unset, else 0/1 */
    const char *str[N_SPECIAL]; /* token strings named by tokenizer_config.json (borrowed) */
    const cJSON *chat;          /* chat template: string or list (borrowed), or NULL */
    const char *chat_text;      /* chat_template.jinja, when chat is NULL */
} special_vocab;

/* tokenizer_config.json's "<typ>_token": a string or {"content": ...}. */
static const char *config_token_str(const cJSON *tcfg, const char *typ)
{
    char key[32];
    snprintf(key, sizeof key, "%s_token", typ);
    const cJSON *e = jget(tcfg, key);
    if (cJSON_IsString(e)) return e->valuestring;
    const cJSON *c = jget(e, "content");
    return cJSON_IsObject(e) && cJSON_IsString(c) ? c->valuestring : NULL;
}

static const char *template_special_id(const cJSON *piece)
{
    const cJSON *id = jget(jget(piece, "SpecialToken"), "id");
    return cJSON_IsString(id) && id->valuestring[0] ? id->valuestring : NULL;
}

static const char *template_sequence_id(const cJSON *piece)
{
    const cJSON *id = jget(jget(piece, "Sequence"), "id");
    return cJSON_IsString(id) ? id->valuestring : NULL;
}

static bool str_eq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* SpecialVocab's reading of TemplateProcessing "pair": a separator between
 * A and B turns add_sep on. */
static void template_pair(special_vocab *sv, const cJSON *pair, const char *first, const char *last)
{
    int n = cJSON_GetArraySize(pair);
    if (n == 0) return;
    int start = first && str_eq(template_special_id(cJSON_GetArrayItem(pair, 0)), first) ? 1 : 0;
    int stop = last && str_eq(template_special_id(cJSON_GetArrayItem(pair, n - 1)), last) ? n - 1 : n;
    if (stop - start < 1) return;
    const char *a = template_sequence_id(cJSON_GetArrayItem(pair, start));
    const char *b = template_sequence_id(cJSON_GetArrayItem(pair, stop - 1));
    if (!str_eq(a, "A") || !str_eq(b, "B") || stop - start < 3) return;
    const char *sep = sv->str[SP_SEP], *eos = sv->str[SP_EOS];
    const char *e0 = template_special_id(cJSON_GetArrayItem(pair, start + 1));
    bool add_sep = e0 && (str_eq(e0, sep) || str_eq(e0, eos)) && !last;
    if (stop - start == 4) {
        const char *e1 = template_special_id(cJSON_GetArrayItem(pair, start + 2));
        if (str_eq(e1, sep) || str_eq(e1, eos)) add_sep = true;
    }
    sv->add[SP_SEP] = add_sep;
}

/* SpecialVocab's crude TemplateProcessing reading: a leading special token
 * that is bos (or cls) means add_bos, a trailing one that is eos add_eos. */
static void template_single(special_vocab *sv, const cJSON *proc, bool have_tcfg)
{
    const cJSON *single = jget(proc, "single");
    int n = cJSON_GetArraySize(single);
    const char *first = NULL, *last = NULL;
    if (n > 1) {
        first = template_special_id(cJSON_GetArrayItem(single, 0));
        if (first) {
            if (!have_tcfg) sv->str[SP_BOS] = first;
            sv->add[SP_BOS] = str_eq(first, sv->str[SP_BOS]) || str_eq(first, sv->str[SP_CLS]);
        }
        last = template_special_id(cJSON_GetArrayItem(single, n - 1));
        if (last) {
            if (!have_tcfg)
                sv->str[SP_EOS] = last;
            else if (!str_eq(last, sv->str[SP_EOS]))
                DSQ_LOGW("tokenizer.json: trailing special token %s is not the eos token; add_eos_token left false",
                         last);
            sv->add[SP_EOS] = str_eq(last, sv->str[SP_EOS]);
        }
    }
    template_pair(sv, jget(proc, "pair"), first, last);
}

static void read_post_processor(special_vocab *sv, const hf_files *f)
{
    const cJSON *pp = jget(f->tok, "post_processor");
    if (!cJSON_IsObject(pp)) return;
    const cJSON *list = jget(pp, "processors");
    const cJSON *proc = cJSON_IsArray(list) ? list->child : pp;
    for (; proc; proc = cJSON_IsArray(list) ? proc->next : NULL) {
        const cJSON *t = jget(proc, "type");
        if (!cJSON_IsString(t)) continue;
        if (!strcmp(t->valuestring, "RobertaProcessing")) {
            sv->add[SP_BOS] = sv->add[SP_EOS] = sv->add[SP_SEP] = 1;
        } else if (!strcmp(t->valuestring, "TemplateProcessing")) {
            template_single(sv, proc, f->tcfg != NULL);
        }
    }
}

/* The first added token whose content is s (SpecialVocab looks nowhere else). */
static int64_t added_token_id(const hf_files *f, const char *s)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jget(f->tok, "added_tokens"))
    {
        const cJSON *c = jget(it, "content");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, s)) return jid(jget(it, "id"), MAX_TOKENS);
    }
    return -1;
}

static void set_special(special_vocab *sv, int k, int64_t id, int64_t n_vocab)
{
    if (id < 0 || sv->id[k] >= 0) return;
    if (id >= n_vocab) {
        DSQ_LOGW("special token %s id %lld is out of range (%lld tokens); skipped", g_special[k].typ, (long long)id,
                 (long long)n_vocab);
        return;
    }
    sv->id[k] = id;
}

static void read_tokenizer_config(special_vocab *sv, const hf_files *f, int64_t n_vocab)
{
    const cJSON *chat = jget(f->tcfg, "chat_template");
    if (cJSON_IsString(chat) || cJSON_IsArray(chat))
        sv->chat = chat;
    else if (chat)
        DSQ_LOGW("tokenizer_config.json: chat_template is neither a string nor a list; ignored");
    if (!chat && f->chat_jinja) sv->chat_text = f->chat_jinja;
    const cJSON *alt = jget(f->chat_json, "chat_template");
    if (!chat && !f->chat_jinja && (cJSON_IsString(alt) || cJSON_IsArray(alt))) sv->chat = alt;
    for (int k = 0; k < N_SPECIAL; k++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", g_special[k].typ);
        const cJSON *add = jget(f->tcfg, key);
        if (cJSON_IsBool(add)) sv->add[k] = cJSON_IsTrue(add);
        const char *s = config_token_str(f->tcfg, g_special[k].typ);
        if (s) set_special(sv, k, added_token_id(f, s), n_vocab);
    }
}

static void special_vocab_load(special_vocab *sv, const hf_files *f, int64_t n_vocab)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        sv->id[k] = -1;
        sv->add[k] = -1;
        sv->str[k] = config_token_str(f->tcfg, g_special[k].typ);
    }
    sv->chat = NULL;
    sv->chat_text = NULL;
    if (!sv->str[SP_BOS] && sv->str[SP_CLS] && f->tcfg) sv->str[SP_BOS] = sv->str[SP_CLS];
    if (!sv->str[SP_EOS] && sv->str[SP_SEP] && f->tcfg) sv->str[SP_EOS] = sv->str[SP_SEP];
    read_post_processor(sv, f);
    if (f->tcfg) read_tokenizer_config(sv, f, n_vocab);
    for (int k = 0; k < N_SPECIAL; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", g_special[k].typ);
        set_special(sv, k, jid(jget(f->config, key), MAX_TOKENS), n_vocab);
    }
}

/* ======================================================= HF side: writing */

static dsq_status put_str_arr(dsq_gguf_writer *w, const char *key, char **s, int64_t n)
{
    return dsq_gguf_set_str_arr(w, key, (const char *const *)s, NULL, (uint64_t)n);
}

/* Merges as "a b" strings; [a, b] pairs get their spaces encoded as U+0120
 * the way SpecialVocab does (transformers >= 4.45 writes pairs). */
static dsq_status merges_as_strings(const hf_files *f, const cJSON *merges, char ***out, int64_t *n_out)
{
    int64_t n = cJSON_GetArraySize(merges), i = 0;
    char **s = calloc((size_t)(n ? n : 1), sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %lld merges", (long long)n);
    *out = s;
    *n_out = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges)
    {
        const char *a, *b;
        size_t alen;
        if (!merge_parts(m, &a, &alen, &b))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: merge %lld is malformed", f->tok_path, (long long)i);
        size_t cap = cJSON_IsString(m) ? strlen(m->valuestring) + 1 : 2 * (alen + strlen(b)) + 2;
        char *o = malloc(cap);
        if (!o) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for merges");
        if (cJSON_IsString(m)) {
            memcpy(o, m->valuestring, cap);
        } else {
            size_t k = 0;
            for (const char *p = a; *p; p++) k += *p == ' ' ? (size_t)snprintf(o + k, 3, "\xc4\xa0") : (o[k] = *p, 1u);
            o[k++] = ' ';
            for (const char *p = b; *p; p++) k += *p == ' ' ? (size_t)snprintf(o + k, 3, "\xc4\xa0") : (o[k] = *p, 1u);
            o[k] = '\0';
        }
        s[i++] = o;
        *n_out = i;
    }
    return DSQ_OK;
}

static void free_strs(char **s, int64_t n)
{
    for (int64_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

static dsq_status write_merges(dsq_gguf_writer *w, const hf_files *f, const vocab *v)
{
    if (!v->merges || cJSON_GetArraySize(v->merges) == 0) {
        DSQ_LOGW("%s: no merges; llama.cpp cannot load a gpt2 tokenizer without them", f->tok_path);
        return DSQ_OK;
    }
    char **s = NULL;
    int64_t n = 0;
    dsq_status st = merges_as_strings(f, v->merges, &s, &n);
    if (st == DSQ_OK) st = put_str_arr(w, "tokenizer.ggml.merges", s, n);
    free_strs(s, n);
    return st;
}

/* A chat template list: "default" -> tokenizer.chat_template, others ->
 * tokenizer.chat_template.<name> plus the tokenizer.chat_templates list
 * (GGUFWriter.add_chat_template; names keep [A-Za-z0-9], the rest -> '_'). */
static dsq_status write_chat_list(dsq_gguf_writer *w, const cJSON *list)
{
    int n = cJSON_GetArraySize(list), k = 0;
    char **names = calloc((size_t)(n ? n : 1), sizeof *names);
    if (!names) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for chat templates");
    dsq_status st = DSQ_OK;
    const char *dflt = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const cJSON *nm = jget(it, "name"), *tp = jget(it, "template");
        if (!cJSON_IsString(nm) || !nm->valuestring[0] || !cJSON_IsString(tp) || st != DSQ_OK) continue;
        char *name = strdup(nm->valuestring);
        if (!name) {
            st = dsq_fail(DSQ_ERR_NOMEM, "out of memory for chat templates");
            break;
        }
        for (char *p = name; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
        if (!strcmp(name, "default")) {
            dflt = tp->valuestring;
            free(name);
            continue;
        }
        char key[256];
        snprintf(key, sizeof key, "tokenizer.chat_template.%.200s", name);
        names[k++] = name;
        st = dsq_gguf_set_str(w, key, tp->valuestring);
    }
    if (st == DSQ_OK && k > 0) st = put_str_arr(w, "tokenizer.chat_templates", names, k);
    if (st == DSQ_OK && dflt) st = dsq_gguf_set_str(w, "tokenizer.chat_template", dflt);
    free_strs(names, k);
    return st;
}

static dsq_status write_special(dsq_gguf_writer *w, const special_vocab *sv)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        if (sv->id[k] < 0) continue;
        if (!g_special[k].id_key) {
            DSQ_LOGW("no GGUF key for special token type %s (id %lld); skipped", g_special[k].typ,
                     (long long)sv->id[k]);
            continue;
        }
        DSQ_TRY(dsq_gguf_set_u32(w, g_special[k].id_key, (uint32_t)sv->id[k]));
    }
    for (int k = 0; k < N_SPECIAL; k++)
        if (sv->add[k] >= 0 && g_special[k].add_key) DSQ_TRY(dsq_gguf_set_bool(w, g_special[k].add_key, sv->add[k]));
    if (cJSON_IsString(sv->chat)) return dsq_gguf_set_str(w, "tokenizer.chat_template", sv->chat->valuestring);
    if (cJSON_IsArray(sv->chat)) return write_chat_list(w, sv->chat);
    if (sv->chat_text) return dsq_gguf_set_str(w, "tokenizer.chat_template", sv->chat_text);
    return DSQ_OK;
}

static dsq_status write_vocab(dsq_gguf_writer *w, const hf_files *f, const vocab *v, const char *pre)
{
    DSQ_TRY(dsq_gguf_set_str(w, "tokenizer.ggml.model", v->kind == KIND_LLAMA ? "llama" : "gpt2"));
    if (pre) DSQ_TRY(dsq_gguf_set_str(w, "tokenizer.ggml.pre", pre));
    DSQ_TRY(put_str_arr(w, "tokenizer.ggml.tokens", v->text, v->n));
    if (v->kind == KIND_LLAMA)
        DSQ_TRY(dsq_gguf_set_arr(w, "tokenizer.ggml.scores", DSQ_GGUF_F32, v->score, (uint64_t)v->n));
    DSQ_TRY(dsq_gguf_set_arr(w, "tokenizer.ggml.token_type", DSQ_GGUF_I32, v->type, (uint64_t)v->n));
    return v->kind == KIND_GPT2 ? write_merges(w, f, v) : DSQ_OK;
}

/* LlamaModel.set_vocab additions: add_space_prefix from tokenizer_config's
 * add_prefix_space, and add_bos_token false for 49152-token vocabularies
 * (small Granite / SmolLM models). Qwen2Model has neither. */
static dsq_status write_llama_rules(dsq_gguf_writer *w, const hf_files *f)
{
    if (config_is_qwen2(f)) return DSQ_OK;
    const cJSON *aps = jget(f->tcfg, "add_prefix_space");
    if (cJSON_IsBool(aps)) DSQ_TRY(dsq_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", cJSON_IsTrue(aps)));
    if (f->config && jid(jget(f->config, "vocab_size"), MAX_TOKENS + 1) == 49152)
        DSQ_TRY(dsq_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    return DSQ_OK;
}

static dsq_status hf_to_gguf(const hf_files *f, vocab *v, dsq_gguf_writer *w)
{
    DSQ_TRY(vocab_build(f, v));
    const char *pre = "default";
    if (v->kind == KIND_GPT2) {
        DSQ_TRY(match_pre(f, v, &pre));
        if (!pre)
            DSQ_LOGW("%s: the pre-tokenizer is not one dsquant knows; no tokenizer.ggml.pre written (llama.cpp then "
                     "uses its 'default' regexes, which may split text differently)",
                     f->tok_path);
    }
    DSQ_TRY(write_vocab(w, f, v, pre));
    special_vocab sv;
    special_vocab_load(&sv, f, v->n);
    DSQ_TRY(write_special(w, &sv));
    return write_llama_rules(w, f);
}

dsq_status dsq_tokenizer_hf_to_gguf(const char *dir, dsq_gguf_writer *w)
{
    hf_files f;
    vocab v;
    memset(&v, 0, sizeof v);
    dsq_status st = hf_files_load(dir, &f);
    if (st == DSQ_OK) st = hf_to_gguf(&f, &v, w);
    vocab_free(&v);
    hf_files_free(&f);
    return st;
}

/* ============================================== GGUF side: reading */

typedef struct gvocab {
    const dsq_gguf *g;
    vocab_kind kind;
    uint64_t n;
    const dsq_gguf_str *tok;
    const int32_t *type; /* NULL: every token NORMAL */
    const float *score;  /* NULL: every score 0 */
    const dsq_gguf_str *merges;
    uint64_t n_merges;
    const pre_row *row; /* gpt2 only */
    int64_t id[N_SPECIAL];
    int add_bos, add_eos; /* effective (llama.cpp's defaults when absent) */
    int has_add_bos, has_add_eos;
    int add_space_prefix; /* -1 absent */
} gvocab;

static int32_t gtype(const gvocab *v, uint64_t i) { return v->type ? v->type[i] : TT_NORMAL; }

/* The "[PAD<id>]" fillers the converter adds for ids the tokenizer lacks. */
static bool is_gap(const gvocab *v, uint64_t i)
{
    return gtype(v, i) == TT_UNUSED && is_pad_name(v->tok[i].ptr, (int64_t)i);
}

/* Whether a GGUF string can become a JSON string unchanged: well-formed
 * UTF-8 (cJSON copies bytes through, and Python's json, serde_json and
 * tokenizers reject anything else) without NUL bytes (cJSON would cut the
 * string there). Replacing bad bytes instead would change a token's text,
 * and two tokens could then read as one, so the conversion refuses. */
static bool is_text(const dsq_gguf_str *s)
{
    return s->len == strlen(s->ptr) && dsq_utf8_valid(s->ptr, (size_t)s->len);
}

static dsq_status g_str_arr(const dsq_gguf *g, const char *key, uint64_t *n, const dsq_gguf_str **out)
{
    const dsq_gguf_array *a = NULL;
    DSQ_TRY(dsq_gguf_get_arr(g, key, DSQ_GGUF_STRING, &a));
    *n = a->n;
    *out = a->data;
    for (uint64_t i = 0; i < a->n; i++)
        if (!is_text(&(*out)[i]))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: %s[%llu] is not valid UTF-8 text", g->path, key,
                            (unsigned long long)i);
    return DSQ_OK;
}

/* A string key that becomes JSON text (a chat template). */
static dsq_status g_text(const dsq_gguf *g, const char *key, const char **out)
{
    DSQ_TRY(dsq_gguf_get_str(g, key, out));
    if (!is_text(&dsq_gguf_get(g, key)->v.str))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not valid UTF-8 text", g->path, key);
    return DSQ_OK;
}

/* An optional per-token array of elem type t, n entries long. */
static dsq_status g_token_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype t, uint64_t n, const void **out)
{
    *out = NULL;
    if (!dsq_gguf_get(g, key)) return DSQ_OK;
    const dsq_gguf_array *a = NULL;
    DSQ_TRY(dsq_gguf_get_arr(g, key, t, &a));
    if (a->n != n)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s has %llu entries for %llu tokens", g->path, key,
                        (unsigned long long)a->n, (unsigned long long)n);
    *out = a->data;
    return DSQ_OK;
}

static dsq_status g_model(gvocab *v)
{
    const dsq_gguf *g = v->g;
    const char *model = NULL;
    if (dsq_gguf_get_str(g, "tokenizer.ggml.model", &model) != DSQ_OK)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no tokenizer.ggml.model", g->path);
    if (!strcmp(model, "gpt2"))
        v->kind = KIND_GPT2;
    else if (!strcmp(model, "llama"))
        v->kind = KIND_LLAMA;
    else
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: tokenizer.ggml.model \"%.32s\" is not supported (supported: gpt2, llama)", g->path, model);
    if (v->kind == KIND_LLAMA) return DSQ_OK;
    const char *pre = NULL;
    if (dsq_gguf_get(g, "tokenizer.ggml.pre")) DSQ_TRY(dsq_gguf_get_str(g, "tokenizer.ggml.pre", &pre));
    if (!pre || !pre[0]) {
        DSQ_LOGW("%s: no tokenizer.ggml.pre; writing llama.cpp's 'default' pre-tokenizer", g->path);
        pre = "default";
    }
    v->row = pre_row_by_name(pre);
    if (!v->row)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: tokenizer.ggml.pre \"%.64s\" has no Hugging Face pre-tokenizer in dsquant's table",
                        g->path, pre);
    return DSQ_OK;
}

static dsq_status g_flag(const dsq_gguf *g, const char *key, int *has, int *val)
{
    bool b = false;
    *has = dsq_gguf_get(g, key) != NULL;
    if (*has) {
        DSQ_TRY(dsq_gguf_get_bool(g, key, &b));
        *val = b;
    }
    return DSQ_OK;
}

/* Special ids and the add_* flags; absent flags take llama.cpp's defaults
 * (SentencePiece and llama-bpe add BOS, others nothing). */
static dsq_status g_specials(gvocab *v)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        v->id[k] = -1;
        uint64_t id;
        if (!g_special[k].id_key || !dsq_gguf_get(v->g, g_special[k].id_key)) continue;
        DSQ_TRY(dsq_gguf_get_u64(v->g, g_special[k].id_key, &id));
        if (id >= v->n) {
            DSQ_LOGW("%s: %s = %llu is out of range; ignored", v->g->path, g_special[k].id_key, (unsigned long long)id);
            continue;
        }
        v->id[k] = (int64_t)id;
        /* HF names special tokens by text and SpecialVocab looks them up
         * among the added tokens only; bos/eos also travel in config.json. */
        int32_t t = gtype(v, id);
        if (k != SP_BOS && k != SP_EOS && t != TT_CONTROL && t != TT_USER_DEFINED && t != TT_UNKNOWN)
            DSQ_LOGW("%s: %s token %llu is an ordinary token; the HF files name it, but converting them back will "
                     "not find its id",
                     v->g->path, g_special[k].typ, (unsigned long long)id);
    }
    v->add_bos = v->kind == KIND_LLAMA || (v->row && v->row->ignore_merges);
    v->add_eos = 0;
    DSQ_TRY(g_flag(v->g, "tokenizer.ggml.add_bos_token", &v->has_add_bos, &v->add_bos));
    DSQ_TRY(g_flag(v->g, "tokenizer.ggml.add_eos_token", &v->has_add_eos, &v->add_eos));
    int has = 0, aps = 1;
    DSQ_TRY(g_flag(v->g, "tokenizer.ggml.add_space_prefix", &has, &aps));
    v->add_space_prefix = has ? aps : -1;
    if (v->add_bos && v->id[SP_BOS] < 0) v->add_bos = 0;
    if (v->add_eos && v->id[SP_EOS] < 0) v->add_eos = 0;
    return DSQ_OK;
}

static dsq_status gvocab_load(const dsq_gguf *g, gvocab *v)
{
    memset(v, 0, sizeof *v);
    v->g = g;
    DSQ_TRY(g_model(v));
    DSQ_TRY(g_str_arr(g, "tokenizer.ggml.tokens", &v->n, &v->tok));
    if (v->n == 0 || v->n > MAX_TOKENS)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %llu tokens", g->path, (unsigned long long)v->n);
    DSQ_TRY(g_token_arr(g, "tokenizer.ggml.token_type", DSQ_GGUF_I32, v->n, (const void **)&v->type));
    DSQ_TRY(g_token_arr(g, "tokenizer.ggml.scores", DSQ_GGUF_F32, v->n, (const void **)&v->score));
    if (v->kind == KIND_GPT2) {
        if (!dsq_gguf_get(g, "tokenizer.ggml.merges"))
            return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges", g->path);
        DSQ_TRY(g_str_arr(g, "tokenizer.ggml.merges", &v->n_merges, &v->merges));
    }
    return g_specials(v);
}

/* ====================================== GGUF side: tokenizer.json pieces */

static cJSON *j_added_token(int64_t id, const char *content, bool special)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "id", (double)id) || !cJSON_AddStringToObject(o, "content", content) ||
        !cJSON_AddFalseToObject(o, "single_word") || !cJSON_AddFalseToObject(o, "lstrip") ||
        !cJSON_AddFalseToObject(o, "rstrip") || !cJSON_AddFalseToObject(o, "normalized") ||
        !cJSON_AddBoolToObject(o, "special", special)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* CONTROL, UNKNOWN and USER_DEFINED tokens: matched on the raw text, as
 * llama.cpp matches them (normalized false). */
static cJSON *j_added_tokens(const gvocab *v)
{
    cJSON *arr = cJSON_CreateArray();
    for (uint64_t i = 0; arr && i < v->n; i++) {
        int32_t t = gtype(v, i);
        if (t != TT_CONTROL && t != TT_UNKNOWN && t != TT_USER_DEFINED) continue;
        cJSON *o = j_added_token((int64_t)i, v->tok[i].ptr, t != TT_USER_DEFINED);
        if (!o) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *j_typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "type", type)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* {"type": "Replace", "pattern": {"String": from}, "content": to} */
static cJSON *j_replace(const char *from, const char *to)
{
    cJSON *o = j_typed("Replace"), *pat = cJSON_CreateObject();
    if (!o || !pat || !cJSON_AddStringToObject(pat, "String", from)) {
        cJSON_Delete(o);
        cJSON_Delete(pat);
        return NULL;
    }
    if (!add_obj(o, "pattern", pat) || !cJSON_AddStringToObject(o, "content", to)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A Sequence under listkey of the given parts (all must be non-NULL). */
static cJSON *j_sequence(const char *listkey, cJSON **parts, int n)
{
    cJSON *o = j_typed("Sequence"), *arr = cJSON_CreateArray();
    bool ok = o && arr;
    for (int i = 0; i < n; i++) {
        if (ok && parts[i])
            cJSON_AddItemToArray(arr, parts[i]);
        else {
            cJSON_Delete(parts[i]);
            ok = false;
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(arr);
        return NULL;
    }
    if (!add_obj(o, listkey, arr)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */

/* SentencePiece as transformers' legacy Llama tokenizer.json spells it:
 * prepend U+2581 (llama.cpp's add_space_prefix, also after each special
 * token), then spaces become U+2581. */
static cJSON *j_spm_normalizer(bool prefix)
{
    cJSON *parts[2];
    int n = 0;
    if (prefix) {
        parts[n] = j_typed("Prepend");
        if (parts[n] && !cJSON_AddStringToObject(parts[n], "prepend", SPM_SPACE)) {
            cJSON_Delete(parts[n]);
            parts[n] = NULL;
        }
        n++;
    }
    parts[n++] = j_replace(" ", SPM_SPACE);
    return j_sequence("normalizers", parts, n);
}

static cJSON *j_strip(void)
{
    cJSON *o = j_typed("Strip");
    if (o && (!cJSON_AddStringToObject(o, "content", " ") || !cJSON_AddNumberToObject(o, "start", 1) ||
              !cJSON_AddNumberToObject(o, "stop", 0))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_spm_decoder(bool prefix)
{
    cJSON *parts[4] = {j_replace(SPM_SPACE, " "), j_typed("ByteFallback"), j_typed("Fuse"), prefix ? j_strip() : NULL};
    return j_sequence("decoders", parts, prefix ? 4 : 3);
}

/* [{"SpecialToken": {"id": s, "type_id": t}}] style template pieces. */
static bool template_add(cJSON *arr, const char *kind, const char *id, int type_id)
{
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
    if (!o || !in || !cJSON_AddStringToObject(in, "id", id) || !cJSON_AddNumberToObject(in, "type_id", type_id)) {
        cJSON_Delete(o);
        cJSON_Delete(in);
        return false;
    }
    if (!add_obj(o, kind, in)) {
        cJSON_Delete(o);
        return false;
    }
    cJSON_AddItemToArray(arr, o);
    return true;
}

static bool template_special_entry(cJSON *specials, const char *tok, int64_t id)
{
    if (cJSON_GetObjectItemCaseSensitive(specials, tok)) return true;
    cJSON *o = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *toks = cJSON_CreateArray();
    cJSON *num = cJSON_CreateNumber((double)id), *str = cJSON_CreateString(tok);
    if (!o || !ids || !toks || !num || !str || !cJSON_AddStringToObject(o, "id", tok)) {
        cJSON_Delete(o);
        cJSON_Delete(ids);
        cJSON_Delete(toks);
        cJSON_Delete(num);
        cJSON_Delete(str);
        return false;
    }
    cJSON_AddItemToArray(ids, num);
    cJSON_AddItemToArray(toks, str);
    if (!add_obj(o, "ids", ids)) {
        cJSON_Delete(toks);
        cJSON_Delete(o);
        return false;
    }
    if (!add_obj(o, "tokens", toks)) {
        cJSON_Delete(o);
        return false;
    }
    return add_obj(specials, tok, o);
}

/* TemplateProcessing that adds BOS/EOS as llama.cpp would. The pair form
 * has no separator, so SpecialVocab reads no add_sep from it. */
static cJSON *j_template(const gvocab *v)
{
    const char *bos = v->add_bos ? v->tok[v->id[SP_BOS]].ptr : NULL;
    const char *eos = v->add_eos ? v->tok[v->id[SP_EOS]].ptr : NULL;
    cJSON *o = j_typed("TemplateProcessing"), *single = cJSON_CreateArray(), *pair = cJSON_CreateArray();
    cJSON *specials = cJSON_CreateObject();
    bool ok = o && single && pair && specials;
    ok = ok && (!bos || (template_add(single, "SpecialToken", bos, 0) && template_add(pair, "SpecialToken", bos, 0)));
    ok = ok && template_add(single, "Sequence", "A", 0) && template_add(pair, "Sequence", "A", 0) &&
         template_add(pair, "Sequence", "B", 1);
    ok = ok && (!eos || (template_add(single, "SpecialToken", eos, 0) && template_add(pair, "SpecialToken", eos, 1)));
    ok = ok && (!bos || template_special_entry(specials, bos, v->id[SP_BOS]));
    ok = ok && (!eos || template_special_entry(specials, eos, v->id[SP_EOS]));
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(single);
        cJSON_Delete(pair);
        cJSON_Delete(specials);
        return NULL;
    }
    bool added = add_obj(o, "single", single);
    if (!added) cJSON_Delete(pair);
    added = added && add_obj(o, "pair", pair);
    if (!added) cJSON_Delete(specials);
    if (!(added && add_obj(o, "special_tokens", specials))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_post_processor(const gvocab *v)
{
    if (v->add_bos || v->add_eos) return j_template(v);
    if (v->kind == KIND_LLAMA) return cJSON_CreateNull();
    cJSON *o = j_byte_level(true, false, true);
    return o;
}

static cJSON *j_decoder(const gvocab *v)
{
    if (v->kind == KIND_LLAMA) return j_spm_decoder(v->add_space_prefix != 0);
    return v->row->decoder_plain ? j_byte_level(false, false, false) : j_byte_level(true, true, true);
}

/* model.vocab: every token but the converter's "[PAD<id>]" fillers; a text
 * that repeats keeps its first id (a JSON object cannot hold both). */
static cJSON *j_vocab(const gvocab *v, dsq_strmap *seen)
{
    cJSON *o = cJSON_CreateObject();
    uint64_t dups = 0;
    for (uint64_t i = 0; o && i < v->n; i++) {
        if (is_gap(v, i)) continue;
        int64_t first;
        if (dsq_strmap_put(seen, v->tok[i].ptr, (size_t)v->tok[i].len, (int64_t)i, &first) != DSQ_OK) {
            cJSON_Delete(o);
            return NULL;
        }
        if (first >= 0) {
            dups++;
            continue;
        }
        if (!cJSON_AddNumberToObject(o, v->tok[i].ptr, (double)i)) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    if (dups)
        DSQ_LOGW("%s: %llu tokens repeat an earlier token's text; model.vocab keeps the first", v->g->path,
                 (unsigned long long)dups);
    return o;
}

/* ------------------------------------------- SentencePiece merges */

typedef struct spm_merge {
    int32_t left, right; /* vocab ids of the two parts */
    float score;         /* of the joined piece */
    uint32_t seq;        /* position before the sort: keeps the sort stable */
} spm_merge;

typedef struct merge_list {
    spm_merge *m;
    size_t n, cap;
} merge_list;

static bool merge_push(merge_list *l, spm_merge m)
{
    spm_merge *nm = dsq_grow(l->m, &l->cap, l->n + 1, sizeof *nm);
    if (!nm) return false;
    l->m = nm;
    l->m[l->n++] = m;
    return true;
}

static int cmp_local(const void *a, const void *b)
{
    const spm_merge *x = a, *y = b;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

static int cmp_score_desc(const void *a, const void *b)
{
    const spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* All splits of piece i whose halves are both pieces, sorted by the halves'
 * ids, appended to l. pieces maps a text to its last id (a Python dict
 * built in id order keeps the last). */
static bool spm_local_merges(const gvocab *v, const dsq_strmap *pieces, uint64_t i, merge_list *l)
{
    const char *s = v->tok[i].ptr;
    size_t len = (size_t)v->tok[i].len, start = l->n;
    int64_t last = dsq_strmap_get(pieces, s, len);
    float score = v->score ? v->score[last] : 0.0f;
    /* Pieces are well-formed (g_str_arr checked them), so every cut lands on a character boundary. */
    for (size_t cut = dsq_utf8_seq_len(s, len), k = cut; k > 0 && cut < len; cut += k) {
        int32_t a = (int32_t)dsq_strmap_get(pieces, s, cut), b = (int32_t)dsq_strmap_get(pieces, s + cut, len - cut);
        if (a >= 0 && b >= 0 && !merge_push(l, (spm_merge){a, b, score, 0})) return false;
        k = dsq_utf8_seq_len(s + cut, len - cut);
    }
    if (l->n > start) qsort(l->m + start, l->n - start, sizeof *l->m, cmp_local);
    return true;
}

/* transformers' SentencePieceExtractor: for each piece (first occurrence
 * order) every split into two pieces, then a stable sort by the joined
 * piece's score, highest first. */
static dsq_status spm_merges(const gvocab *v, merge_list *l)
{
    /* pieces maps a text to its last id (a Python dict built in id order):
     * filled from the end, since the first put stays. */
    dsq_strmap pieces = {0}, first = {0};
    dsq_status st = dsq_strmap_reserve(&pieces, (size_t)v->n);
    if (st == DSQ_OK) st = dsq_strmap_reserve(&first, (size_t)v->n);
    for (uint64_t i = v->n; st == DSQ_OK && i-- > 0;)
        if (!is_gap(v, i)) st = dsq_strmap_put(&pieces, v->tok[i].ptr, (size_t)v->tok[i].len, (int64_t)i, NULL);
    for (uint64_t i = 0; i < v->n && st == DSQ_OK; i++) {
        if (is_gap(v, i)) continue;
        int64_t seen;
        st = dsq_strmap_put(&first, v->tok[i].ptr, (size_t)v->tok[i].len, (int64_t)i, &seen);
        if (st != DSQ_OK || seen >= 0) continue;
        if (v->tok[i].len > 0 && !spm_local_merges(v, &pieces, i, l))
            st = dsq_fail(DSQ_ERR_NOMEM, "out of memory deriving merges");
    }
    for (size_t k = 0; k < l->n; k++) l->m[k].seq = (uint32_t)k;
    if (st == DSQ_OK && l->n) qsort(l->m, l->n, sizeof *l->m, cmp_score_desc);
    dsq_strmap_free(&pieces);
    dsq_strmap_free(&first);
    return st;
}

/* A merge as "a b", or as an [a, b] pair when a part holds a space. */
static cJSON *j_merge(const char *a, size_t alen, const char *b, size_t blen)
{
    if (memchr(a, ' ', alen) || memchr(b, ' ', blen)) {
        cJSON *arr = cJSON_CreateArray(), *x = NULL, *y = NULL;
        char *sa = strndup(a, alen), *sb = strndup(b, blen);
        if (sa && sb) {
            x = cJSON_CreateString(sa);
            y = cJSON_CreateString(sb);
        }
        free(sa);
        free(sb);
        if (!arr || !x || !y) {
            cJSON_Delete(arr);
            cJSON_Delete(x);
            cJSON_Delete(y);
            return NULL;
        }
        cJSON_AddItemToArray(arr, x);
        cJSON_AddItemToArray(arr, y);
        return arr;
    }
    char *s = malloc(alen + blen + 2);
    if (!s) return NULL;
    memcpy(s, a, alen);
    s[alen] = ' ';
    memcpy(s + alen + 1, b, blen);
    s[alen + blen + 1] = '\0';
    cJSON *o = cJSON_CreateString(s);
    free(s);
    return o;
}

static cJSON *j_merges(const gvocab *v)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    if (v->kind == KIND_GPT2) {
        for (uint64_t i = 0; i < v->n_merges; i++) {
            cJSON *s = cJSON_CreateString(v->merges[i].ptr);
            if (!s) goto fail;
            cJSON_AddItemToArray(arr, s);
        }
        return arr;
    }
    merge_list l = {0};
    if (spm_merges(v, &l) != DSQ_OK) {
        free(l.m);
        goto fail;
    }
    for (size_t k = 0; k < l.n; k++) {
        const dsq_gguf_str *a = &v->tok[l.m[k].left], *b = &v->tok[l.m[k].right];
        cJSON *m = j_merge(a->ptr, (size_t)a->len, b->ptr, (size_t)b->len);
        if (!m) {
            free(l.m);
            goto fail;
        }
        cJSON_AddItemToArray(arr, m);
    }
    free(l.m);
    return arr;
fail:
    cJSON_Delete(arr);
    return NULL;
}

static cJSON *j_model(const gvocab *v)
{
    dsq_strmap seen = {0};
    if (dsq_strmap_reserve(&seen, (size_t)v->n) != DSQ_OK) {
        dsq_strmap_free(&seen); /* a failed reserve may have grown the entries already */
        return NULL;
    }
    cJSON *o = j_typed("BPE");
    bool llama = v->kind == KIND_LLAMA;
    const char *unk = llama && v->id[SP_UNK] >= 0 ? v->tok[v->id[SP_UNK]].ptr : NULL;
    bool ok =
        o && cJSON_AddNullToObject(o, "dropout") &&
        (unk ? cJSON_AddStringToObject(o, "unk_token", unk) != NULL : cJSON_AddNullToObject(o, "unk_token") != NULL) &&
        cJSON_AddNullToObject(o, "continuing_subword_prefix") && cJSON_AddNullToObject(o, "end_of_word_suffix") &&
        cJSON_AddBoolToObject(o, "fuse_unk", llama) && cJSON_AddBoolToObject(o, "byte_fallback", llama) &&
        cJSON_AddBoolToObject(o, "ignore_merges", !llama && v->row->ignore_merges) &&
        add_obj(o, "vocab", j_vocab(v, &seen)) && add_obj(o, "merges", j_merges(v));
    dsq_strmap_free(&seen);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *j_tokenizer(const gvocab *v)
{
    cJSON *o = cJSON_CreateObject();
    bool llama = v->kind == KIND_LLAMA;
    bool ok = o && cJSON_AddStringToObject(o, "version", "1.0") && cJSON_AddNullToObject(o, "truncation") &&
              cJSON_AddNullToObject(o, "padding") && add_obj(o, "added_tokens", j_added_tokens(v)) &&
              add_obj(o, "normalizer", llama ? j_spm_normalizer(v->add_space_prefix != 0) : row_normalizer(v->row)) &&
              add_obj(o, "pre_tokenizer", llama ? cJSON_CreateNull() : v->row->build()) &&
              add_obj(o, "post_processor", j_post_processor(v)) && add_obj(o, "decoder", j_decoder(v)) &&
              add_obj(o, "model", j_model(v));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ============================ GGUF side: tokenizer_config.json and friends */

/* Appends {"name", "template"} to list; tmpl NULL: nothing to append. */
static dsq_status add_named_template(cJSON *list, const char *name, const char *tmpl)
{
    if (!tmpl) return DSQ_OK;
    cJSON *e = cJSON_CreateObject();
    bool ok = e && cJSON_AddStringToObject(e, "name", name) && cJSON_AddStringToObject(e, "template", tmpl);
    if (e) cJSON_AddItemToArray(list, e);
    return ok ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory for chat templates");
}

/* The template tokenizer.chat_templates names, or NULL when the file lacks
 * it: llama.cpp looks templates up by key and never reads that list, so such
 * a file loads there, and a warning (not a failed conversion) fits. */
static dsq_status named_template(const dsq_gguf *g, const char *name, const char **tmpl)
{
    char key[256];
    snprintf(key, sizeof key, "tokenizer.chat_template.%.200s", name);
    *tmpl = NULL;
    if (dsq_gguf_get(g, key)) return g_text(g, key, tmpl);
    DSQ_LOGW("%s: tokenizer.chat_templates names template \"%s\" but the file has no %s; left out", g->path, name, key);
    return DSQ_OK;
}

/* The chat template(s): a string, or transformers' list form when the GGUF
 * has named templates (tokenizer.chat_templates). NULL result and no error
 * when there is none. */
static dsq_status j_chat_template(const dsq_gguf *g, cJSON **out)
{
    *out = NULL;
    const char *dflt = NULL;
    if (dsq_gguf_get(g, "tokenizer.chat_template")) DSQ_TRY(g_text(g, "tokenizer.chat_template", &dflt));
    uint64_t n = 0;
    const dsq_gguf_str *names = NULL;
    if (dsq_gguf_get(g, "tokenizer.chat_templates")) DSQ_TRY(g_str_arr(g, "tokenizer.chat_templates", &n, &names));
    if (n == 0) {
        *out = dflt ? cJSON_CreateString(dflt) : NULL;
        return dflt && !*out ? dsq_fail(DSQ_ERR_NOMEM, "out of memory for the chat template") : DSQ_OK;
    }
    cJSON *list = cJSON_CreateArray();
    if (!list) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for chat templates");
    dsq_status st = add_named_template(list, "default", dflt);
    for (uint64_t i = 0; st == DSQ_OK && i < n; i++) {
        const char *tmpl;
        st = named_template(g, names[i].ptr, &tmpl);
        if (st == DSQ_OK) st = add_named_template(list, names[i].ptr, tmpl);
    }
    if (st != DSQ_OK) {
        cJSON_Delete(list);
        return st;
    }
    *out = list;
    return DSQ_OK;
}

static bool add_special_strings(cJSON *o, const gvocab *v)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        if (v->id[k] < 0) continue;
        char key[32];
        snprintf(key, sizeof key, "%s_token", g_special[k].typ);
        if (!cJSON_AddStringToObject(o, key, v->tok[v->id[k]].ptr)) return false;
    }
    return true;
}

static int64_t context_length(const dsq_gguf *g)
{
    const char *arch = NULL;
    char key[128];
    uint64_t n = 0;
    if (!dsq_gguf_find_str(g, "general.architecture", &arch)) return -1;
    snprintf(key, sizeof key, "%.64s.context_length", arch);
    if (!dsq_gguf_find_u64(g, key, &n)) return -1;
    return (int64_t)n;
}

/* add_* flags only when the GGUF has them, so that converting back gives
 * the same keys; the tokenizer.json post-processor carries the behaviour. */
static dsq_status j_tokenizer_config(const gvocab *v, cJSON **out)
{
    cJSON *chat = NULL;
    DSQ_TRY(j_chat_template(v->g, &chat));
    cJSON *o = cJSON_CreateObject();
    int64_t ctx = context_length(v->g);
    bool ok = o != NULL;
    if (ok && v->has_add_bos) ok = cJSON_AddBoolToObject(o, "add_bos_token", v->add_bos);
    if (ok && v->has_add_eos) ok = cJSON_AddBoolToObject(o, "add_eos_token", v->add_eos);
    if (ok && v->add_space_prefix >= 0) ok = cJSON_AddBoolToObject(o, "add_prefix_space", v->add_space_prefix);
    ok = ok && add_special_strings(o, v);
    if (ok && chat) {
        ok = add_obj(o, "chat_template", chat);
        chat = NULL;
    }
    ok = ok && cJSON_AddFalseToObject(o, "clean_up_tokenization_spaces");
    if (ok && ctx > 0) ok = cJSON_AddNumberToObject(o, "model_max_length", (double)ctx);
    ok = ok && cJSON_AddStringToObject(o, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON_Delete(chat);
    if (!ok) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory for tokenizer_config.json");
    }
    *out = o;
    return DSQ_OK;
}

static dsq_status write_json_file(const char *dir, const char *name, cJSON *o, bool pretty)
{
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, name));
    char *text = pretty ? cJSON_Print(o) : cJSON_PrintUnformatted(o);
    if (!text) return dsq_fail(DSQ_ERR_NOMEM, "out of memory writing %s", path);
    dsq_outfile *f = NULL;
    dsq_status st = dsq_outfile_open(path, true, &f);
    if (st == DSQ_OK) st = dsq_outfile_write(f, text, strlen(text));
    if (st == DSQ_OK) st = dsq_outfile_write(f, "\n", 1);
    free(text);
    if (st != DSQ_OK) {
        dsq_outfile_abort(f);
        return st;
    }
    return dsq_outfile_commit(f);
}

/* Every file is built before the first is written, so a GGUF that cannot
 * be converted leaves nothing in dir. */
static dsq_status write_hf_files(const gvocab *v, const char *dir)
{
    cJSON *cfg = NULL;
    DSQ_TRY(j_tokenizer_config(v, &cfg));
    cJSON *tok = j_tokenizer(v), *map = cJSON_CreateObject();
    dsq_status st = DSQ_OK;
    if (!tok) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory building tokenizer.json");
    else if (!map || !add_special_strings(map, v)) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory for special_tokens_map.json");
    if (st == DSQ_OK) st = write_json_file(dir, "tokenizer.json", tok, false);
    if (st == DSQ_OK) st = write_json_file(dir, "tokenizer_config.json", cfg, true);
    if (st == DSQ_OK) st = write_json_file(dir, "special_tokens_map.json", map, true);
    cJSON_Delete(tok);
    cJSON_Delete(cfg);
    cJSON_Delete(map);
    return st;
}

dsq_status dsq_tokenizer_gguf_to_hf(const dsq_gguf *g, const char *dir)
{
    gvocab v;
    DSQ_TRY(gvocab_load(g, &v));
    return write_hf_files(&v, dir);
}
