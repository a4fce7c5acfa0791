/* Chat templates by hand (runtime/chat.h). The formats follow the families'
 * published chat_template strings (SmolLM2/Qwen2.5 ChatML, Meta Llama 3/3.1,
 * Llama 2, Mistral v0.1, DeepSeek-R1), read for their output only. */
#include "runtime/chat.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/grow.h"
#include "core/json.h"

#define MAX_TEMPLATE (1u << 20)

const char *dsq_chat_format_name(dsq_chat_format f)
{
    switch (f) {
    case DSQ_CHAT_CHATML: return "chatml";
    case DSQ_CHAT_LLAMA3: return "llama3";
    case DSQ_CHAT_LLAMA2: return "llama2";
    case DSQ_CHAT_MISTRAL: return "mistral";
    case DSQ_CHAT_DEEPSEEK_R1: return "deepseek-r1";
    }
    return "?";
}

/* ---- finding the template ---- */

static dsq_status dup_text(const char *s, size_t n, const char *what, char **out)
{
    if (n > MAX_TEMPLATE) return dsq_fail(DSQ_ERR_FORMAT, "%s: chat template of %zu bytes is too large", what, n);
    char *c = malloc(n + 1);
    if (!c) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", what);
    memcpy(c, s, n);
    c[n] = 0;
    *out = c;
    return DSQ_OK;
}

/* A string, or the "default" entry of a [{name, template}] list. */
static const char *json_template(const cJSON *v)
{
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        const cJSON *name = cJSON_GetObjectItem(e, "name"), *t = cJSON_GetObjectItem(e, "template");
        if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(t)) return t->valuestring;
    }
    return NULL;
}

static dsq_status from_json_file(const char *dir, const char *file, char **out)
{
    char path[4096], *text;
    size_t len;
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, file));
    if (!dsq_exists(path)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no such file", path);
    DSQ_TRY(dsq_read_file(path, 16u << 20, &text, &len));
    dsq_status why;
    cJSON *j = dsq_json_parse(text, len, NULL, &why);
    free(text);
    if (!j && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    const char *t = j ? json_template(cJSON_GetObjectItem(j, "chat_template")) : NULL;
    dsq_status s = t ? dup_text(t, strlen(t), path, out) : dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no chat_template", path);
    cJSON_Delete(j);
    return s;
}

static dsq_status from_hf_dir(const char *dir, char **out)
{
    if (from_json_file(dir, "tokenizer_config.json", out) == DSQ_OK) return DSQ_OK;
    char path[4096];
    size_t len;
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "chat_template.jinja"));
    if (dsq_exists(path)) return dsq_read_file(path, MAX_TEMPLATE, out, &len);
    if (from_json_file(dir, "chat_template.json", out) == DSQ_OK) return DSQ_OK;
    return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no chat template (tokenizer_config.json, chat_template.jinja or "
                                       "chat_template.json)", dir);
}

dsq_status dsq_chat_template_text(const dsq_checkpoint *ck, char **out)
{
    *out = NULL;
    if (ck->kind == DSQ_CKPT_HF_DIR) return from_hf_dir(ck->path, out);
    if (ck->kind != DSQ_CKPT_GGUF) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: a lone safetensors file has no chat template", ck->path);
    const dsq_gguf_value *v = dsq_gguf_get(ck->gguf, "tokenizer.chat_template");
    if (!v || v->type != DSQ_GGUF_STRING)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no tokenizer.chat_template string", ck->path);
    if (memchr(v->v.str.ptr, 0, v->v.str.len))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tokenizer.chat_template holds a NUL byte", ck->path);
    return dup_text(v->v.str.ptr, v->v.str.len, ck->path, out);
}

/* ---- recognising it ---- */

/* The literal system prompt a ChatML template writes when the conversation
 * has none: the text after "<|im_start|>system" and a newline (real, or the
 * two characters \n of a Jinja string) up to "<|im_end|>", when it is plain
 * text (no quote, brace or '+', which would mean an expression). */
static dsq_status chatml_default_system(const char *t, char **out)
{
    static const char mark[] = "<|im_start|>system";
    *out = NULL;
    for (const char *p = strstr(t, mark); p; p = strstr(p + 1, mark)) {
        const char *s = p + sizeof mark - 1;
        if (*s == '\n') s++;
        else if (s[0] == '\\' && s[1] == 'n') s += 2;
        else continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e || e == s || strcspn(s, "'\"{}+") < (size_t)(e - s)) continue;
        char *r = malloc((size_t)(e - s) + 1), *w = r;
        if (!r) return dsq_fail(DSQ_ERR_NOMEM, "chat template: out of memory");
        for (const char *c = s; c < e; c++) {
            if (c[0] == '\\' && c + 1 < e && c[1] == 'n') *w++ = '\n', c++;
            else *w++ = *c;
        }
        *w = 0;
        *out = r;
        return DSQ_OK;
    }
    return DSQ_OK;
}

dsq_status dsq_chat_detect(const char *tmpl, dsq_chat_template *out)
{
    memset(out, 0, sizeof *out);
    if (strstr(tmpl, "<|im_start|>")) {
        out->format = DSQ_CHAT_CHATML;
        return chatml_default_system(tmpl, &out->default_system);
    }
    if (strstr(tmpl, "<|start_header_id|>")) {
        out->format = DSQ_CHAT_LLAMA3;
        out->dated_system = strstr(tmpl, "Cutting Knowledge Date") != NULL;
        out->bos = "<|begin_of_text|>";
        return DSQ_OK;
    }
    if (strstr(tmpl, "<\xef\xbd\x9cUser\xef\xbd\x9c>")) { /* <｜User｜> */
        out->format = DSQ_CHAT_DEEPSEEK_R1;
        out->think = strstr(tmpl, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>") != NULL;
        out->bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
        out->eos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
        return DSQ_OK;
    }
    if (strstr(tmpl, "[INST]")) {
        out->format = strstr(tmpl, "<<SYS>>") ? DSQ_CHAT_LLAMA2 : DSQ_CHAT_MISTRAL;
        out->bos = "<s>";
        out->eos = "</s>";
        return DSQ_OK;
    }
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "chat template not recognised (we render ChatML, Llama 3, Llama 2/Mistral "
                                         "[INST] and DeepSeek-R1 by hand and do not run Jinja)");
}

void dsq_chat_template_free(dsq_chat_template *t)
{
    free(t->default_system);
    memset(t, 0, sizeof *t);
}

const char *dsq_chat_end_text(const dsq_chat_template *t)
{
    switch (t->format) {
    case DSQ_CHAT_CHATML: return "<|im_end|>";
    case DSQ_CHAT_LLAMA3: return "<|eot_id|>";
    case DSQ_CHAT_DEEPSEEK_R1:
    case DSQ_CHAT_LLAMA2:
    case DSQ_CHAT_MISTRAL: return t->eos;
    }
    return "";
}

/* ---- rendering ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    char *p = n < SIZE_MAX - 1 - b->n ? dsq_grow(b->p, &b->cap, b->n + n + 1, 1) : NULL;
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void put(sbuf *b, const char *s)
{
    if (s) put_n(b, s, strlen(s));
}

/* Jinja's trim / Python's strip: leading and trailing whitespace. */
static void put_trimmed(sbuf *b, const char *s)
{
    const char *ws = " \t\n\r\v\f";
    s += strspn(s, ws);
    size_t n = strlen(s);
    while (n && strchr(ws, s[n - 1])) n--;
    put_n(b, s, n);
}

static bool is_role(const dsq_chat_msg *m, const char *r) { return !strcmp(m->role, r); }

static void render_chatml(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n, bool gen, sbuf *b)
{
    if (n && !is_role(&m[0], "system") && t->default_system) {
        put(b, "<|im_start|>system\n");
        put(b, t->default_system);
        put(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        put(b, "<|im_start|>");
        put(b, m[i].role);
        put(b, "\n");
        put(b, m[i].content);
        put(b, "<|im_end|>\n");
    }
    if (gen) put(b, "<|im_start|>assistant\n");
}

static void llama3_turn(sbuf *b, const char *role, const char *content)
{
    put(b, "<|start_header_id|>");
    put(b, role);
    put(b, "<|end_header_id|>\n\n");
    put_trimmed(b, content);
    put(b, "<|eot_id|>");
}

static void render_llama3(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n, bool gen, sbuf *b)
{
    put(b, t->bos);
    size_t i = 0;
    if (t->dated_system) {
        put(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        put(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n && is_role(&m[0], "system")) put_trimmed(b, m[i++].content);
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) llama3_turn(b, m[i].role, m[i].content);
    if (gen) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 and Mistral: [INST] turns; a system message goes into the first one. */
static void render_inst(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n, sbuf *b)
{
    bool llama2 = t->format == DSQ_CHAT_LLAMA2;
    const char *sys = n && is_role(&m[0], "system") ? m[0].content : NULL;
    if (!llama2) put(b, t->bos);
    for (size_t i = sys ? 1 : 0, first = 1; i < n; i++) {
        if (is_role(&m[i], "user")) {
            if (llama2) put(b, t->bos);
            put(b, "[INST] ");
            if (first && sys && llama2) {
                put(b, "<<SYS>>\n");
                put(b, sys);
                put(b, "\n<</SYS>>\n\n");
            } else if (first && sys) {
                put(b, sys);
                put(b, "\n\n");
            }
            if (llama2) put_trimmed(b, m[i].content);
            else put(b, m[i].content);
            put(b, " [/INST]");
            first = 0;
        } else {
            if (llama2) {
                put(b, " ");
                put_trimmed(b, m[i].content);
                put(b, " ");
            } else {
                put(b, m[i].content);
            }
            put(b, t->eos);
        }
    }
}

static void render_r1(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n, bool gen, sbuf *b)
{
    put(b, t->bos);
    const char *sys = NULL; /* the last system message, as the template's namespace keeps it */
    for (size_t i = 0; i < n; i++)
        if (is_role(&m[i], "system")) sys = m[i].content;
    put(b, sys);
    for (size_t i = 0; i < n; i++) {
        if (is_role(&m[i], "user")) {
            put(b, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
            put(b, m[i].content);
        } else if (is_role(&m[i], "assistant")) {
            const char *c = m[i].content, *th = strstr(c, "</think>"), *nx;
            while (th && (nx = strstr(th + 1, "</think>"))) th = nx;
            put(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
            put(b, th ? th + strlen("</think>") : c);
            put(b, t->eos);
        }
    }
    if (gen) put(b, t->think ? "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n" : "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
}

dsq_status dsq_chat_render(const dsq_chat_template *t, const dsq_chat_msg *msgs, size_t n, bool add_generation_prompt,
                           char **out)
{
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content ||
            !(is_role(&msgs[i], "system") || is_role(&msgs[i], "user") || is_role(&msgs[i], "assistant")))
            return dsq_fail(DSQ_ERR_ARG, "chat message %zu: role \"%.32s\" is not system, user or assistant", i,
                            msgs[i].role ? msgs[i].role : "(none)");
    sbuf b = {0};
    put(&b, "");
    switch (t->format) {
    case DSQ_CHAT_CHATML: render_chatml(t, msgs, n, add_generation_prompt, &b); break;
    case DSQ_CHAT_LLAMA3: render_llama3(t, msgs, n, add_generation_prompt, &b); break;
    case DSQ_CHAT_LLAMA2:
    case DSQ_CHAT_MISTRAL: render_inst(t, msgs, n, &b); break;
    case DSQ_CHAT_DEEPSEEK_R1: render_r1(t, msgs, n, add_generation_prompt, &b); break;
    default: free(b.p); return dsq_fail(DSQ_ERR_ARG, "chat template: unknown format %d", (int)t->format);
    }
    if (b.oom) {
        free(b.p);
        return dsq_fail(DSQ_ERR_NOMEM, "chat template: out of memory");
    }
    *out = b.p;
    return DSQ_OK;
}

dsq_status dsq_chat_by_name(const char *name, dsq_chat_template *out)
{
    static const struct {
        const char *name, *markers;
    } known[] = {{"chatml", "<|im_start|>"},
                 {"llama3", "<|start_header_id|>"},
                 {"llama2", "[INST] <<SYS>>"},
                 {"mistral", "[INST]"},
                 {"deepseek-r1", "<\xef\xbd\x9cUser\xef\xbd\x9c>"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i].name)) return dsq_chat_detect(known[i].markers, out);
    return dsq_fail(DSQ_ERR_ARG, "unknown chat template \"%s\" (chatml, llama3, llama2, mistral, deepseek-r1)", name);
}

dsq_status dsq_chat_tokens(const dsq_chat_template *t, const dsq_tokenizer *tok, const dsq_chat_msg *msgs, size_t n,
                           dsq_tokens *ids, int32_t *end_id)
{
    char *text = NULL;
    DSQ_TRY(dsq_chat_render(t, msgs, n, true, &text));
    dsq_status s = dsq_tokenizer_encode(tok, text, strlen(text), false, true, ids);
    free(text);
    int32_t bos = dsq_tokenizer_bos(tok);
    if (s == DSQ_OK && dsq_tokenizer_add_bos(tok) && bos >= 0 && (ids->n == 0 || ids->ids[0] != bos)) {
        int32_t *p = realloc(ids->ids, (ids->n + 1) * sizeof *p);
        if (!p) return dsq_fail(DSQ_ERR_NOMEM, "chat: out of memory");
        memmove(p + 1, p, ids->n * sizeof *p);
        p[0] = bos;
        ids->ids = p, ids->n++, ids->cap = ids->n;
    }
    const char *end = dsq_chat_end_text(t);
    *end_id = end ? dsq_tokenizer_find(tok, end, strlen(end)) : -1;
    return s;
}
