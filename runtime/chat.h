/* Chat templates, written by hand in C for the families we run. We do not
 * run Jinja: the model's tokenizer.chat_template (GGUF) or chat_template
 * (tokenizer_config.json / chat_template.jinja) is only searched for marker
 * substrings that tell the family, and for the few literals a family's
 * templates vary in (ChatML's default system prompt, Llama 3.1's date
 * header, DeepSeek-R1's "<think>" opener):
 *
 *   CHATML    "<|im_start|>": SmolLM2, Qwen2/2.5.
 *             <|im_start|>{role}\n{content}<|im_end|>\n ... then <|im_start|>assistant\n;
 *             when the first message is not a system one and the template
 *             carries a literal system prompt for that case (SmolLM2, Qwen2.5),
 *             it is inserted first.
 *   LLAMA3    "<|start_header_id|>": {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
 *             ... then the assistant header. With "Cutting Knowledge Date" in
 *             the template (3.1+), a system turn "Cutting Knowledge Date:
 *             December 2023\nToday Date: 26 Jul 2024\n\n{system}" always
 *             comes first (the templates' default date; 3.2's would use today).
 *   LLAMA2    "[INST]" and "<<SYS>>": {bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} {eos} ...
 *   MISTRAL   "[INST]" without "<<SYS>>": {bos}[INST] {user} [/INST]{assistant}{eos} ...,
 *             a system message prepended to the first user message with "\n\n".
 *   DEEPSEEK_R1 "<｜User｜>": DeepSeek-R1 and its Qwen/Llama distills:
 *             {bos}{system}<｜User｜>{user}<｜Assistant｜>{assistant after any </think>}<｜end▁of▁sentence｜>
 *             ... then <｜Assistant｜> (+ "<think>\n" when the template has it).
 *
 * Tool calls, multimodal content and template-specific error checks are not
 * reproduced. */
#ifndef DSQ_RUNTIME_CHAT_H
#define DSQ_RUNTIME_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "formats/checkpoint.h"
#include "runtime/tokenizer.h"

typedef enum dsq_chat_format {
    DSQ_CHAT_CHATML = 1,
    DSQ_CHAT_LLAMA3,
    DSQ_CHAT_LLAMA2,
    DSQ_CHAT_MISTRAL,
    DSQ_CHAT_DEEPSEEK_R1,
} dsq_chat_format;

typedef struct dsq_chat_msg {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} dsq_chat_msg;

typedef struct dsq_chat_template {
    dsq_chat_format format;
    char *default_system; /* CHATML: inserted when the first message is not a system one; or NULL */
    bool dated_system;    /* LLAMA3: the 3.1 knowledge-date system turn */
    bool think;           /* DEEPSEEK_R1: "<think>\n" after the generation prompt */
    const char *bos, *eos; /* texts the template writes for bos_token / eos_token */
} dsq_chat_template;

/* The chat template text of a model (malloc'd), or DSQ_ERR_NOT_FOUND. */
dsq_status dsq_chat_template_text(const dsq_checkpoint *ck, char **out);

/* Recognises the family from the template's markers; DSQ_ERR_UNSUPPORTED
 * (naming the families known) when none matches. */
dsq_status dsq_chat_detect(const char *tmpl, dsq_chat_template *out);
void dsq_chat_template_free(dsq_chat_template *t);
const char *dsq_chat_format_name(dsq_chat_format f);

/* The prompt text for msgs (malloc'd). Roles other than system/user/assistant
 * are DSQ_ERR_ARG. */
dsq_status dsq_chat_render(const dsq_chat_template *t, const dsq_chat_msg *msgs, size_t n, bool add_generation_prompt,
                           char **out);

/* A family by name (chatml, llama3, llama2, mistral, deepseek-r1), for
 * models whose template is missing or not recognised; DSQ_ERR_ARG naming the
 * families for any other name. */
dsq_status dsq_chat_by_name(const char *name, dsq_chat_template *out);

/* The prompt ids of msgs with the generation prompt: rendered, tokenized
 * with special tokens parsed, and the tokenizer's BOS first when it adds
 * one and the template did not write it. *end_id: the end-of-turn token, or
 * -1 when the vocabulary lacks it. */
dsq_status dsq_chat_tokens(const dsq_chat_template *t, const dsq_tokenizer *tok, const dsq_chat_msg *msgs, size_t n,
                           dsq_tokens *ids, int32_t *end_id);

/* Text of the token that ends an assistant turn ("<|im_end|>", "<|eot_id|>", ...). */
const char *dsq_chat_end_text(const dsq_chat_template *t);

#endif
