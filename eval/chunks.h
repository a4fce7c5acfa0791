/* The token stream cut into chunks the way llama-perplexity, its KL-divergence
 * mode and llama-imatrix all do: chunk i is tokens [i*ctx, (i+1)*ctx), with
 * BOS put in place of its first token when the tokenizer adds BOS, each run
 * from an empty cache in forward calls of `batch` tokens, the logits of a
 * range of positions kept. */
#ifndef DSQ_EVAL_CHUNKS_H
#define DSQ_EVAL_CHUNKS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/forward.h"

/* How many chunks to run: want when 0 < want < what the text holds (and
 * max allows), else all of them (n_tokens / ctx, at most max). */
int dsq_chunk_count(int64_t n_tokens, int ctx, int want, int64_t max);

typedef struct dsq_chunk_iter {
    const int32_t *tokens;
    int ctx, n_chunks;
    int32_t bos; /* < 0: the first token stays */
    int next;    /* index of the chunk dsq_chunk_next gives */
    int32_t *buf;
} dsq_chunk_iter;

dsq_status dsq_chunk_iter_init(dsq_chunk_iter *it, const int32_t *tokens, int ctx, int n_chunks, int32_t bos);
/* The next chunk's tokens (BOS first) in *chunk, and the stream's own tokens
 * for it in *orig (the targets); false after the last. */
bool dsq_chunk_next(dsq_chunk_iter *it, const int32_t **chunk, const int32_t **orig);
void dsq_chunk_iter_free(dsq_chunk_iter *it);

/* Told the logits of positions [pos, pos + n) of the chunk after each forward call. */
typedef dsq_status (*dsq_chunk_rows_fn)(void *user, int pos, int n, const float *logits);

typedef struct dsq_chunk_pass {
    int ctx, batch;
    int first, last; /* positions whose logits are wanted (none when last < first) */
    /* keep false: one batch of rows, reused by every call (min(batch,
     * ctx - first) x vocab); keep true: position p's row at p - first, so
     * the chunk's whole range is there at the end (ctx - first rows). */
    float *logits;
    bool keep;
    dsq_chunk_rows_fn on_rows; /* may be NULL */
    void *user;
} dsq_chunk_pass;

/* Runs one chunk through c (the caller starts it from an empty cache: each
 * call's positions begin at 0, so the cache is overwritten). */
dsq_status dsq_chunk_forward(dsq_ctx *c, const int32_t *chunk, const dsq_chunk_pass *p);

#endif
