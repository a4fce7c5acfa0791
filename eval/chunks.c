#include "eval/chunks.h"

#include <stdlib.h>
#include <string.h>

int dsq_chunk_count(int64_t n_tokens, int ctx, int want, int64_t max)
{
    int64_t all = n_tokens / ctx;
    if (all > max) all = max;
    return want > 0 && want < all ? want : (int)all;
}

dsq_status dsq_chunk_iter_init(dsq_chunk_iter *it, const int32_t *tokens, int ctx, int n_chunks, int32_t bos)
{
    *it = (dsq_chunk_iter){tokens, ctx, n_chunks, bos, 0, malloc((size_t)ctx * sizeof(int32_t))};
    return it->buf ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory for a chunk of %d tokens", ctx);
}

bool dsq_chunk_next(dsq_chunk_iter *it, const int32_t **chunk, const int32_t **orig)
{
    if (it->next >= it->n_chunks) return false;
    const int32_t *src = it->tokens + (size_t)it->next * (size_t)it->ctx;
    memcpy(it->buf, src, (size_t)it->ctx * sizeof *it->buf);
    if (it->bos >= 0) it->buf[0] = it->bos;
    it->next++;
    *chunk = it->buf;
    if (orig) *orig = src;
    return true;
}

void dsq_chunk_iter_free(dsq_chunk_iter *it)
{
    free(it->buf);
    it->buf = NULL;
}

dsq_status dsq_chunk_forward(dsq_ctx *c, const int32_t *chunk, const dsq_chunk_pass *p)
{
    int64_t vocab = dsq_ctx_model(c)->vocab;
    for (int b0 = 0; b0 < p->ctx; b0 += p->batch) {
        int nb = p->ctx - b0 < p->batch ? p->ctx - b0 : p->batch;
        int from = p->first > b0 ? p->first : b0;
        int to = b0 + nb - 1 < p->last ? b0 + nb - 1 : p->last;
        if (from > to) {
            /* No wanted logits here: skip the output head. */
            DSQ_TRY(dsq_forward_range(c, chunk + b0, nb, b0, nb - 1, NULL));
            continue;
        }
        float *dst = p->keep ? p->logits + (size_t)(from - p->first) * (size_t)vocab : p->logits;
        DSQ_TRY(dsq_forward_range(c, chunk + b0, nb, b0, from - b0, dst));
        if (p->on_rows) DSQ_TRY(p->on_rows(p->user, from, to - from + 1, dst));
    }
    return DSQ_OK;
}
