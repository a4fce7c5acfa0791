/* The model and tokenizer endpoints in vLLM's shapes: GET /v1/models,
 * POST /tokenize (a prompt, or chat messages through the template),
 * POST /detokenize, GET /tokenizer_info (what lm-eval's remote tokenizer
 * reads), and the chat messages -> prompt ids step the completions share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/utf8.h"
#include "serve/api.h"

void dsq_api_models(dsq_server *sv, dsq_reply *r)
{
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", sv->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)sv->created);
    cJSON_AddStringToObject(m, "owned_by", "dsquant");
    cJSON_AddStringToObject(m, "root", sv->o.model_path);
    cJSON_AddNumberToObject(m, "max_model_len", sv->o.n_ctx);
    cJSON_AddItemToArray(data, m);
    dsq_reply_json(r, 200, o);
}

/* Message content: a string, or text parts [{type: "text", text}] joined. */
static bool content_text(const cJSON *c, int i, char **out, dsq_reply *r)
{
    if (!c || cJSON_IsNull(c)) return (*out = strdup("")) != NULL;
    if (cJSON_IsString(c)) return (*out = strdup(c->valuestring)) != NULL;
    if (!cJSON_IsArray(c))
        return dsq_reply_error(r, 400, "messages", "messages[%d].content must be a string or a list of text parts", i),
               false;
    char *s = NULL;
    size_t len = 0, cap = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"),
                    *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            free(s);
            return dsq_reply_error(r, 400, "messages", "messages[%d].content: only text parts are supported", i), false;
        }
        size_t n = strlen(text->valuestring);
        char *q = dsq_grow(s, &cap, len + n + 1, 1);
        if (!q) return free(s), false;
        s = q;
        memcpy(s + len, text->valuestring, n + 1);
        len += n;
    }
    *out = s ? s : strdup("");
    return *out != NULL;
}

bool dsq_api_chat_prompt(dsq_server *sv, const cJSON *msgs, dsq_tokens *ids, int32_t *end_id, dsq_reply *r)
{
    memset(ids, 0, sizeof *ids);
    if (!sv->has_chat)
        return dsq_reply_error(r, 400, "messages",
                               "this model has no chat template we render; start the server with "
                               "--chat-template chatml|llama3|llama2|mistral|deepseek-r1"),
               false;
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
    if (n <= 0) return dsq_reply_error(r, 400, "messages", "messages must be a non-empty list"), false;
    dsq_chat_msg *m = calloc((size_t)n, sizeof *m);
    char **texts = calloc((size_t)n, sizeof *texts);
    bool ok = m && texts;
    if (!ok) dsq_reply_error(r, 500, NULL, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(msgs, i), *role = cJSON_GetObjectItemCaseSensitive(x, "role");
        if (!cJSON_IsObject(x) || !cJSON_IsString(role)) {
            ok = (dsq_reply_error(r, 400, "messages", "messages[%d] needs a string role", i), false);
            break;
        }
        const char *ro = role->valuestring;
        if (!strcmp(ro, "developer")) ro = "system"; /* OpenAI's newer name for it */
        if (strcmp(ro, "system") && strcmp(ro, "user") && strcmp(ro, "assistant")) {
            ok = (dsq_reply_error(r, 400, "messages", "messages[%d].role \"%s\" is not system, user or assistant", i,
                                  role->valuestring),
                  false);
            break;
        }
        ok = content_text(cJSON_GetObjectItemCaseSensitive(x, "content"), i, &texts[i], r);
        m[i] = (dsq_chat_msg){ro, texts[i]};
    }
    if (ok && dsq_chat_tokens(&sv->chat, sv->tok, m, (size_t)n, ids, end_id) != DSQ_OK) {
        ok = false;
        dsq_reply_error(r, 400, "messages", "%s", dsq_errmsg());
    }
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(m);
    if (!ok) dsq_tokens_free(ids);
    return ok;
}

void dsq_api_tokenize(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    cJSON *b = NULL;
    dsq_tokens ids = {0};
    if (!dsq_api_parse_body(q, r, &b) || !dsq_api_check_model(sv, b, r)) return cJSON_Delete(b);
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(b, "prompt"),
                *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(b, "add_special_tokens");
    if (add && !cJSON_IsNull(add) && !cJSON_IsBool(add)) {
        cJSON_Delete(b);
        return dsq_reply_error(r, 400, "add_special_tokens", "add_special_tokens must be true or false");
    }
    bool ok;
    if (cJSON_IsString(prompt)) {
        ok = dsq_tokenizer_encode(sv->tok, prompt->valuestring, strlen(prompt->valuestring),
                                  !add || !cJSON_IsFalse(add), true, &ids) == DSQ_OK;
        if (!ok) dsq_reply_error(r, 400, "prompt", "cannot tokenize the prompt: %s", dsq_errmsg());
    } else if (msgs) {
        int32_t end;
        ok = dsq_api_chat_prompt(sv, msgs, &ids, &end, r);
    } else {
        ok = (dsq_reply_error(r, 400, "prompt", "prompt must be a string (or give messages)"), false);
    }
    cJSON_Delete(b);
    if (!ok) return dsq_tokens_free(&ids);
    cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < ids.n; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ids.ids[i]));
    cJSON_AddNumberToObject(o, "count", (double)ids.n);
    cJSON_AddNumberToObject(o, "max_model_len", sv->o.n_ctx);
    cJSON_AddNullToObject(o, "token_strs");
    dsq_tokens_free(&ids);
    dsq_reply_json(r, 200, o);
}

void dsq_api_detokenize(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    cJSON *b = NULL;
    if (!dsq_api_parse_body(q, r, &b) || !dsq_api_check_model(sv, b, r)) return cJSON_Delete(b);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "tokens"), *x;
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    bool ok = n >= 0 && (n == 0 || ids);
    if (!ok) dsq_reply_error(r, 400, "tokens", "tokens must be a list of token ids");
    int k = 0;
    const cJSON *list = ok ? t : NULL;
    cJSON_ArrayForEach(x, list)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= (double)dsq_tokenizer_n_vocab(sv->tok)) {
            ok = (dsq_reply_error(r, 400, "tokens", "tokens[%d] is not a token id of this vocabulary", k), false);
            break;
        }
        ids[k++] = (int32_t)x->valuedouble;
    }
    char *text = NULL;
    size_t len = 0;
    if (ok && dsq_tokenizer_decode(sv->tok, ids, (size_t)k, 0, &text, &len) != DSQ_OK)
        ok = (dsq_reply_error(r, 400, "tokens", "%s", dsq_errmsg()), false);
    free(ids);
    cJSON_Delete(b);
    if (!ok) return free(text);
    char *fixed = dsq_utf8_repair(text, len);
    free(text);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", fixed ? fixed : "");
    free(fixed);
    dsq_reply_json(r, 200, o);
}

static void add_token_text(cJSON *o, const char *key, const dsq_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? dsq_tokenizer_piece(tok, id, true, &n) : NULL;
    char *s = p ? dsq_utf8_repair(p, n) : NULL;
    if (s)
        cJSON_AddStringToObject(o, key, s);
    else
        cJSON_AddNullToObject(o, key);
    free(s);
}

void dsq_api_tokenizer_info(dsq_server *sv, dsq_reply *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tokenizer_class", "dsquant");
    add_token_text(o, "bos_token", sv->tok, dsq_tokenizer_bos(sv->tok));
    add_token_text(o, "eos_token", sv->tok, dsq_tokenizer_eos(sv->tok));
    cJSON_AddNullToObject(o, "pad_token");
    cJSON_AddBoolToObject(o, "add_bos_token", dsq_tokenizer_add_bos(sv->tok));
    cJSON_AddNumberToObject(o, "model_max_length", sv->o.n_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", dsq_tokenizer_n_vocab(sv->tok));
    if (sv->chat_text)
        cJSON_AddStringToObject(o, "chat_template", sv->chat_text);
    else
        cJSON_AddNullToObject(o, "chat_template");
    dsq_reply_json(r, 200, o);
}
