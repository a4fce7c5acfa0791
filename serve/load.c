/* Loading what `dsquant serve` serves: the model (any file or folder the
 * runtime reads), its tokenizer, its chat template (detected, or named with
 * --chat-template), and the engine with its P sequences of n_ctx positions. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "serve/api.h"

static dsq_status load_chat(dsq_server *sv)
{
    char *text = NULL;
    dsq_status s = dsq_chat_template_text(sv->m->ckpt, &text);
    if (s != DSQ_OK && s != DSQ_ERR_NOT_FOUND) return s;
    sv->chat_text = text;
    if (strcmp(sv->o.chat_template, "auto")) {
        DSQ_TRY(dsq_chat_by_name(sv->o.chat_template, &sv->chat));
    } else if (!text) {
        DSQ_LOGW("serve: the model has no chat template; /v1/chat/completions needs --chat-template NAME");
        return DSQ_OK;
    } else if (dsq_chat_detect(text, &sv->chat) != DSQ_OK) {
        DSQ_LOGW("serve: %s; /v1/chat/completions needs --chat-template NAME", dsq_errmsg());
        return DSQ_OK;
    }
    sv->has_chat = true;
    DSQ_LOGI("serve: chat template %s", dsq_chat_format_name(sv->chat.format));
    return DSQ_OK;
}

dsq_status dsq_server_load(dsq_server *sv)
{
    const dsq_serve_opts *o = &sv->o;
    DSQ_TRY(dsq_model_open(o->model_path, &sv->m));
    DSQ_TRY(dsq_tokenizer_load(o->model_path, &sv->tok));
    DSQ_TRY(load_chat(sv));
    int64_t max = sv->m->arch.max_position_embeddings;
    if (sv->o.n_ctx <= 0) sv->o.n_ctx = max > 0 && max < 2048 ? (int)max : 2048;
    if (max > 0 && sv->o.n_ctx > max)
        return dsq_fail(DSQ_ERR_ARG, "--ctx %d exceeds the model's %lld positions", sv->o.n_ctx, (long long)max);
    DSQ_TRY(dsq_model_pack_int8(sv->m)); /* decode steps on Q8_0 weights read the packed copy */
    dsq_srv_opts eo = {o->parallel, sv->o.n_ctx, o->max_queue, o->chunk, o->threads, o->int8_act};
    DSQ_TRY(dsq_srv_new(sv->m, &eo, &sv->eng));
    dsq_srv_set_observer(sv->eng, dsq_metrics_observe, sv->metrics);
    atomic_store(&sv->ready, 1);
    return DSQ_OK;
}
