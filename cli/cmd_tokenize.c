/* dsquant tokenize: text -> token ids (or ids -> text) with a model's tokenizer. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/fileio.h"
#include "core/grow.h"
#include "core/status.h"
#include "core/utf8.h"
#include "datasets/registry.h"
#include "runtime/tokenizer.h"

static const char g_usage[] = "usage: dsquant tokenize MODEL_OR_GGUF [--text T | --file F] [--sep S] [--json]\n"
                              "                        [--decode] [--add-special] [--parse-special]\n"
                              "\n"
                              "Tokenizes text with the tokenizer of a GGUF file or of a Hugging Face folder\n"
                              "(tokenizer.json) and prints the token ids, one line per input text. The text\n"
                              "comes from --text, --file or standard input, taken as is (a final newline is\n"
                              "part of it).\n"
                              "\n"
                              "options:\n"
                              "  --text T          the text to tokenize\n"
                              "  --file F          read the text from file F (.zst: decompressed)\n"
                              "  --sep S           the input holds several texts separated by S\n"
                              "  --json            print each result as JSON (an array of ids, or a string)\n"
                              "  --decode          the input holds token ids (one sequence per line, or per\n"
                              "                    --sep piece; any non-digit characters separate ids);\n"
                              "                    print the text of each sequence on its own line\n"
                              "  --add-special     add BOS/EOS as the tokenizer's metadata says (with\n"
                              "                    --decode: drop them)\n"
                              "  --parse-special   text of control tokens becomes those tokens (with\n"
                              "                    --decode: print control tokens as their text)\n"
                              "  -h, --help        this text\n";

#define MAX_INPUT ((size_t)1 << 30)

typedef struct opts {
    const char *model, *text, *file, *sep;
    bool json, decode, add_special, parse_special;
} opts;

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        int exit_now = 0;
        const char *a = argv[i];
        if (dsq_cli_common_opt(argc, argv, &i, g_usage, &exit_now)) {
            if (exit_now) return 0;
            continue;
        }
        bool takes_value = !strcmp(a, "--text") || !strcmp(a, "--file") || !strcmp(a, "--sep");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "dsquant: error: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--text"))
            o->text = argv[++i];
        else if (!strcmp(a, "--file"))
            o->file = argv[++i];
        else if (!strcmp(a, "--sep"))
            o->sep = argv[++i];
        else if (!strcmp(a, "--json"))
            o->json = true;
        else if (!strcmp(a, "--decode"))
            o->decode = true;
        else if (!strcmp(a, "--add-special"))
            o->add_special = true;
        else if (!strcmp(a, "--parse-special"))
            o->parse_special = true;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dsquant: error: unknown option %s\n%s", a, g_usage);
            return 2;
        } else if (!o->model)
            o->model = a;
        else {
            fprintf(stderr, "dsquant: error: unexpected argument %s\n%s", a, g_usage);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "dsquant: error: tokenize needs MODEL_OR_GGUF\n%s", g_usage);
        return 2;
    }
    if (o->text && o->file) {
        fprintf(stderr, "dsquant: error: give --text or --file, not both\n");
        return 2;
    }
    if (o->sep && !o->sep[0]) {
        fprintf(stderr, "dsquant: error: --sep must not be empty\n");
        return 2;
    }
    return -1;
}

static dsq_status read_stdin(char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "stdin: out of memory");
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_INPUT) {
                free(buf);
                return dsq_fail(DSQ_ERR_ARG, "stdin: more than %zu bytes", MAX_INPUT);
            }
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return dsq_fail(DSQ_ERR_NOMEM, "stdin: out of memory");
            }
            buf = p;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, stdin);
        n += k;
        if (k == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return dsq_fail_errno(DSQ_ERR_IO, "stdin");
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DSQ_OK;
}

static dsq_status read_input(const opts *o, char **out, size_t *len)
{
    if (o->text) {
        *len = strlen(o->text);
        *out = strdup(o->text);
        return *out ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    }
    size_t fl = o->file ? strlen(o->file) : 0;
    if (fl > 4 && !strcmp(o->file + fl - 4, ".zst")) return dsq_text_read(o->file, out, len); /* decompressed */
    if (o->file) return dsq_read_file(o->file, MAX_INPUT, out, len);
    return read_stdin(out, len);
}

static void print_ids(const dsq_tokens *v, bool json)
{
    if (json) putchar('[');
    for (size_t i = 0; i < v->n; i++) printf(i ? (json ? ",%d" : " %d") : "%d", v->ids[i]);
    puts(json ? "]" : "");
}

static dsq_status encode_one(const dsq_tokenizer *t, const opts *o, const char *s, size_t n, dsq_tokens *v)
{
    v->n = 0;
    DSQ_TRY(dsq_tokenizer_encode(t, s, n, o->add_special, o->parse_special, v));
    print_ids(v, o->json);
    return DSQ_OK;
}

/* Ids in s[0..n): runs of digits (with an optional leading '-'). */
static dsq_status parse_ids(const char *s, size_t n, dsq_tokens *v)
{
    v->n = 0;
    for (size_t i = 0; i < n;) {
        bool neg = s[i] == '-' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9';
        if (!neg && !(s[i] >= '0' && s[i] <= '9')) {
            i++;
            continue;
        }
        size_t j = i + (neg ? 1 : 0);
        long long x = 0;
        for (; j < n && s[j] >= '0' && s[j] <= '9'; j++) {
            x = x * 10 + (s[j] - '0');
            if (x > INT32_MAX) x = (long long)INT32_MAX + 1; /* clamp: reported as out of range */
        }
        long long id = neg ? -x : x;
        if (id > INT32_MAX || id < INT32_MIN) id = INT32_MIN;
        int32_t *p = dsq_grow(v->ids, &v->cap, v->n + 1, sizeof *p);
        if (!p) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        v->ids = p;
        v->ids[v->n++] = (int32_t)id;
        i = j;
    }
    return DSQ_OK;
}

static dsq_status decode_one(const dsq_tokenizer *t, const opts *o, const char *s, size_t n, dsq_tokens *v)
{
    DSQ_TRY(parse_ids(s, n, v));
    unsigned flags = (o->parse_special ? DSQ_DECODE_SPECIAL : 0) | (o->add_special ? DSQ_DECODE_REMOVE_SPECIAL : 0);
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_tokenizer_decode(t, v->ids, v->n, flags, &text, &len));
    if (o->json) {
        /* Ids can cut a character in two; JSON output must still parse. */
        char *shown = dsq_utf8_repair(text, len);
        cJSON *js = shown ? cJSON_CreateString(shown) : NULL;
        free(shown);
        char *p = js ? cJSON_PrintUnformatted(js) : NULL;
        cJSON_Delete(js);
        if (!p) {
            free(text);
            return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
        }
        puts(p);
        cJSON_free(p);
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    free(text);
    return DSQ_OK;
}

/* Runs fn on each piece of the input: split at sep, or (decode only) at newlines. */
static dsq_status for_each_piece(const dsq_tokenizer *t, const opts *o, const char *in, size_t len)
{
    const char *sep = o->sep ? o->sep : (o->decode ? "\n" : NULL);
    dsq_tokens v = {0};
    dsq_status st = DSQ_OK;
    if (!sep) {
        st = encode_one(t, o, in, len, &v);
        dsq_tokens_free(&v);
        return st;
    }
    size_t sl = strlen(sep), pos = 0;
    for (;;) {
        const char *hit = memmem(in + pos, len - pos, sep, sl);
        size_t end = hit ? (size_t)(hit - in) : len;
        /* A trailing separator does not start one more (empty) sequence of ids. */
        if (!hit && end == pos && o->decode && pos > 0) break;
        st = o->decode ? decode_one(t, o, in + pos, end - pos, &v) : encode_one(t, o, in + pos, end - pos, &v);
        if (st != DSQ_OK || !hit) break;
        pos = end + sl;
    }
    dsq_tokens_free(&v);
    return st;
}

int dsq_cmd_tokenize(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    dsq_tokenizer *t = NULL;
    if (dsq_tokenizer_load(o.model, &t) != DSQ_OK) return dsq_cli_fail();
    char *in = NULL;
    size_t len = 0;
    dsq_status st = read_input(&o, &in, &len);
    if (st == DSQ_OK) st = for_each_piece(t, &o, in, len);
    free(in);
    dsq_tokenizer_free(t);
    if (st != DSQ_OK) return dsq_cli_fail();
    if (fflush(stdout) != 0) {
        dsq_fail_errno(DSQ_ERR_IO, "stdout");
        return dsq_cli_fail();
    }
    return 0;
}
