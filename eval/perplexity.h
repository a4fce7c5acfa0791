/* Perplexity of a model over a token stream, by one of two protocols:
 *
 *  LLAMACPP: llama-perplexity's (tools/perplexity/perplexity.cpp). The whole
 *    text is tokenized with the model's add_bos; it is cut into chunks of ctx
 *    tokens (at least 2 chunks must fit); the first token of each chunk is
 *    replaced by BOS when the tokenizer adds BOS; each chunk is evaluated from
 *    an empty cache and the tokens of its second half are scored (positions
 *    ctx/2 .. ctx-2 predict the next token). PPL = exp(mean NLL); the +/- is
 *    perplexity.cpp's: ppl * sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1)).
 *  HF: the AWQ/GPTQ papers' evaluation: the text ("\n\n".join of the dataset
 *    rows) tokenized once; non-overlapping windows of ctx tokens, each from an
 *    empty cache, every token but the window's first scored; PPL =
 *    exp(NLL averaged over all scored tokens). The +/- is computed the same way.
 *
 * NLL per token follows perplexity.cpp's log_softmax (float max, double sum
 * of expf). */
#ifndef DSQ_EVAL_PERPLEXITY_H
#define DSQ_EVAL_PERPLEXITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/forward.h"
#include "runtime/tokenizer.h"

typedef enum dsq_ppl_protocol {
    DSQ_PPL_LLAMACPP = 0,
    DSQ_PPL_HF = 1,
} dsq_ppl_protocol;

const char *dsq_ppl_protocol_name(dsq_ppl_protocol p);
/* "llamacpp" / "hf"; DSQ_ERR_ARG naming the choices otherwise. */
dsq_status dsq_ppl_protocol_from_name(const char *name, dsq_ppl_protocol *out);

typedef struct dsq_ppl_progress {
    int chunk, n_chunks;  /* chunks done, of all */
    int64_t n_scored;
    double ppl;           /* running */
    double tokens_per_s;  /* tokens evaluated (not only scored) per second so far */
    double eta_s;
} dsq_ppl_progress;

typedef void (*dsq_ppl_progress_fn)(void *user, const dsq_ppl_progress *p);

typedef struct dsq_ppl_opts {
    dsq_ppl_protocol protocol;
    int ctx;    /* tokens per chunk/window; the dsq_ctx must hold at least this many */
    int chunks; /* <= 0: as many as the text has */
    int batch;  /* tokens per forward call; <= 0 or > ctx: ctx */
    bool add_bos;  /* LLAMACPP: put BOS first in each chunk (set from the tokenizer by dsq_ppl_text) */
    int32_t bos;
    dsq_ppl_progress_fn progress; /* may be NULL */
    void *user;
} dsq_ppl_opts;

typedef struct dsq_ppl_result {
    double ppl, ppl_err;
    double nll_mean;
    int64_t n_scored;
    int64_t n_tokens; /* in the tokenized text */
    int n_chunks;
    double seconds;
    double tokens_per_s;
} dsq_ppl_result;

/* Defaults: LLAMACPP, ctx 512, all chunks, batch = ctx. */
void dsq_ppl_opts_default(dsq_ppl_opts *o);

dsq_status dsq_ppl_tokens(dsq_ctx *c, const int32_t *tokens, int64_t n_tokens, const dsq_ppl_opts *o,
                          dsq_ppl_result *r);

/* Tokenizes text (with the tokenizer's own BOS/EOS rule, as both protocols
 * do; perplexity.cpp refuses a tokenizer that adds EOS, and so do we), takes
 * add_bos/bos from the tokenizer, then runs dsq_ppl_tokens. */
dsq_status dsq_ppl_text(dsq_ctx *c, const dsq_tokenizer *tok, const char *text, size_t len, const dsq_ppl_opts *o,
                        dsq_ppl_result *r);

#endif
