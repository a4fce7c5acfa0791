/* Chat templates: a template text (the model's tokenizer.chat_template) and
 * a conversation, from one input split on DSQ_FZ_SEP: the template, then
 * messages as "role\x1fcontent" parts. Detection, rendering with and without
 * the generation prompt, and the same conversation through each family by
 * name. */
#include <stdlib.h>
#include <string.h>

#include "runtime/chat.h"
#include "tests/fuzz/fuzz.h"

#define MAX_MSG 8

static void render(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n)
{
    for (int gen = 0; gen < 2; gen++) {
        char *out = NULL;
        if (dsq_fz_ok(dsq_chat_render(t, m, n, gen, &out), "dsq_chat_render")) {
            if (!out) dsq_fz_die("rendered NULL");
            free(out);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_fz_part part[MAX_MSG + 1];
    size_t np = dsq_fz_split(data, size, part, MAX_MSG + 1);
    char *strs[2 * MAX_MSG + 1] = {0};
    strs[0] = strndup((const char *)part[0].p, part[0].n);
    dsq_chat_msg msgs[MAX_MSG];
    size_t n = 0;
    for (size_t i = 1; i < np; i++, n++) {
        const char *p = (const char *)part[i].p;
        const char *us = memchr(p, 0x1f, part[i].n);
        size_t rl = us ? (size_t)(us - p) : part[i].n;
        strs[2 * n + 1] = strndup(p, rl);
        strs[2 * n + 2] = us ? strndup(us + 1, part[i].n - rl - 1) : strdup("");
        msgs[n] = (dsq_chat_msg){strs[2 * n + 1], strs[2 * n + 2]};
    }
    dsq_chat_template t;
    if (dsq_fz_ok(dsq_chat_detect(strs[0], &t), "dsq_chat_detect")) {
        render(&t, msgs, n);
        dsq_chat_template_free(&t);
    }
    static const char *const fam[] = {"chatml", "llama3", "llama2", "mistral", "deepseek-r1"};
    if (n) {
        const char *name = fam[(unsigned char)msgs[0].role[0] % 5];
        if (!dsq_fz_ok(dsq_chat_by_name(name, &t), "dsq_chat_by_name")) dsq_fz_die("family %s refused", name);
        render(&t, msgs, n);
        dsq_chat_template_free(&t);
    }
    for (size_t i = 0; i < 2 * MAX_MSG + 1; i++) free(strs[i]);
    return 0;
}
