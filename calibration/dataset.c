/* Calibration text and random windows (calibration/dataset.h). */
#include "calibration/dataset.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"
#include "core/log.h"
#include "datasets/registry.h"

static const struct {
    const char *name, *file;
} g_builtin[] = {
    {"tinyshakespeare", "tinyshakespeare.txt"},
    {"gutenberg", "gutenberg-nltk/austen-emma.txt"},
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Tries dir/file and dir/file.zst; true when one exists (path receives it). */
static bool try_dir(const char *dir, const char *file, char *path, size_t cap)
{
    if (!dir || !*dir) return false;
    snprintf(path, cap, "%s/%s", dir, file);
    if (dsq_exists(path)) return true;
    snprintf(path, cap, "%s/%s.zst", dir, file);
    return dsq_exists(path);
}

/* The folders datasets/registry.h searches, in its order. */
static dsq_status find_builtin(const char *name, const char *file, char *path, size_t cap)
{
    char dir[4096];
    const char *data = getenv("DSQ_DATA"), *shared = getenv("DSQ_SHARED_DIR"), *cache = getenv("DSQ_CACHE");
    const char *home = getenv("HOME");
    if (try_dir(data, file, path, cap)) return DSQ_OK;
    if (shared && *shared) {
        snprintf(dir, sizeof dir, "%s/datasets", shared);
        if (try_dir(dir, file, path, cap)) return DSQ_OK;
    }
    if (try_dir("../shared/datasets", file, path, cap)) return DSQ_OK;
    if (cache && *cache) snprintf(dir, sizeof dir, "%s/datasets", cache);
    else snprintf(dir, sizeof dir, "%s/.cache/dsquant/datasets", home ? home : ".");
    if (try_dir(dir, file, path, cap)) return DSQ_OK;
    return dsq_fail(DSQ_ERR_NOT_FOUND,
                    "calibration set %s: %s(.zst) not found in $DSQ_DATA, $DSQ_SHARED_DIR/datasets, "
                    "../shared/datasets or %s",
                    name, file, dir);
}

/* JSON lines: the "text" field of every line, joined with "\n\n". */
static dsq_status jsonl_join(const char *path, char *raw, size_t len, char **text, size_t *out_len)
{
    char *out = malloc(len + 1);
    if (!out) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    size_t n = 0, line_no = 0;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && raw[e] != '\n') e++;
        line_no++;
        bool blank = true;
        for (size_t k = i; k < e; k++) blank = blank && (raw[k] == ' ' || raw[k] == '\t' || raw[k] == '\r');
        if (!blank) {
            dsq_status why = DSQ_OK;
            cJSON *j = dsq_json_parse(raw + i, e - i, NULL, &why);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
            if (!j && why == DSQ_ERR_NOMEM) {
                free(out);
                return dsq_fail(DSQ_ERR_NOMEM, "%s: line %zu: out of memory", path, line_no);
            }
            if (!cJSON_IsString(t)) {
                cJSON_Delete(j);
                free(out);
                return dsq_fail(DSQ_ERR_FORMAT, "%s: line %zu is not a JSON object with a string \"text\"", path,
                                line_no);
            }
            size_t tl = strlen(t->valuestring);
            /* the joined text never outgrows the file: each line's JSON is longer than its text + 2 */
            if (n && n + 2 + tl <= len) memcpy(out + n, "\n\n", 2), n += 2;
            if (n + tl <= len) memcpy(out + n, t->valuestring, tl), n += tl;
            cJSON_Delete(j);
        }
        i = e + 1;
    }
    out[n] = '\0';
    *text = out;
    *out_len = n;
    return DSQ_OK;
}

dsq_status dsq_calib_text(const char *source, char *path, size_t cap, char **text, size_t *len)
{
    if (!source) source = DSQ_CALIB_DEFAULT;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < sizeof g_builtin / sizeof g_builtin[0]; i++)
        if (!strcmp(source, g_builtin[i].name)) {
            DSQ_TRY(find_builtin(source, g_builtin[i].file, path, cap));
            return dsq_text_read(path, text, len);
        }
    if (dsq_dataset_known(source)) {
        DSQ_LOGW("calibrating on %s, which is also an evaluation text: perplexity on it will be optimistic", source);
        return dsq_dataset_load(source, DSQ_TEXT_HF_JOIN, path, cap, text, len);
    }
    if (!dsq_exists(source))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "--calib %s: not a file nor a calibration set (tinyshakespeare, gutenberg, "
                                           "or a registered dataset such as wikitext2)",
                        source);
    snprintf(path, cap, "%s", source);
    char *raw = NULL;
    size_t n = 0;
    DSQ_TRY(dsq_text_read(source, &raw, &n));
    if (!ends_with(source, ".jsonl") && !ends_with(source, ".jsonl.zst")) {
        *text = raw;
        *len = n;
        return DSQ_OK;
    }
    dsq_status s = jsonl_join(source, raw, n, text, len);
    free(raw);
    return s;
}

/* xorshift64*: small, fast, and the same on every platform. */
static uint64_t next_rand(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return x * 0x2545F4914F6CDD1DULL;
}

dsq_status dsq_calib_sample(const int32_t *ids, int64_t n_tokens, const dsq_calib_opts *o, dsq_calib_set *out)
{
    memset(out, 0, sizeof *out);
    if (o->n_samples <= 0 || o->seqlen <= 1)
        return dsq_fail(DSQ_ERR_ARG, "calibration: %d samples of %d tokens: both must be positive (seqlen >= 2)",
                        o->n_samples, o->seqlen);
    if (n_tokens < (int64_t)o->seqlen + 1)
        return dsq_fail(DSQ_ERR_ARG,
                        "calibration text has %lld tokens, too short for windows of %d tokens (needs at least %d)",
                        (long long)n_tokens, o->seqlen, o->seqlen + 1);
    out->tokens = malloc((size_t)o->n_samples * (size_t)o->seqlen * sizeof *out->tokens);
    out->starts = malloc((size_t)o->n_samples * sizeof *out->starts);
    if (!out->tokens || !out->starts) {
        dsq_calib_free(out);
        return dsq_fail(DSQ_ERR_NOMEM, "calibration: out of memory for %d x %d tokens", o->n_samples, o->seqlen);
    }
    uint64_t st = o->seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (!st) st = 1;
    uint64_t span = (uint64_t)(n_tokens - o->seqlen) + 1;
    for (int i = 0; i < o->n_samples; i++) {
        int64_t start = (int64_t)(next_rand(&st) % span);
        out->starts[i] = start;
        memcpy(out->tokens + (size_t)i * (size_t)o->seqlen, ids + start, (size_t)o->seqlen * sizeof *ids);
    }
    out->n_samples = o->n_samples;
    out->seqlen = o->seqlen;
    out->n_text_tokens = n_tokens;
    return DSQ_OK;
}

dsq_status dsq_calib_load(const dsq_calib_opts *o, const dsq_tokenizer *tok, dsq_calib_set *out)
{
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    dsq_tokens ids = {0};
    memset(out, 0, sizeof *out);
    dsq_status s = dsq_calib_text(o->source, path, sizeof path, &text, &len);
    if (s == DSQ_OK) s = dsq_tokenizer_encode(tok, text, len, true, false, &ids);
    free(text);
    if (s == DSQ_OK) {
        s = dsq_calib_sample(ids.ids, (int64_t)ids.n, o, out);
        if (s != DSQ_OK) s = dsq_fail_context(s, "%s", path);
    }
    if (s == DSQ_OK) snprintf(out->path, sizeof out->path, "%s", path);
    dsq_tokens_free(&ids);
    return s;
}

void dsq_calib_free(dsq_calib_set *s)
{
    free(s->tokens);
    free(s->starts);
    s->tokens = NULL;
    s->starts = NULL;
}
