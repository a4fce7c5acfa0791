/* Importance matrices as llama-imatrix computes them (examples/imatrix/
 * imatrix.cpp at llama.cpp c392e509, IMatrixCollector::collect_imatrix and
 * compute_imatrix), through the forward pass's linear hook:
 *
 *  - every matrix product of a decoder layer (GGUF names blk.N.attn_q.weight,
 *    attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down) accumulates, per
 *    input column j, the sum over tokens of x_j^2 and the token count.
 *    attn_q/k/v multiply the same input and each gets its own entry, as in
 *    llama.cpp (three mul_mats). output.weight is not collected (llama-imatrix
 *    skips it unless --process-output) and token_embd is a lookup, not a product;
 *  - MoE layers (DeepSeek-V2/V3): the router (ffn_gate_inp) and the shared
 *    experts (ffn_*_shexp) are plain products; the routed experts of one
 *    linear are one entry for the stacked tensor llama.cpp multiplies with
 *    MUL_MAT_ID (blk.N.ffn_gate_exps.weight): n_expert x in values, expert e's
 *    columns the mean over the tokens routed to it, ncall one per forward
 *    call; an entry with an expert no token reached is left out with a
 *    warning (llama-imatrix's save_imatrix skips entries with partial data).
 *    kv_b multiplied in its absorbed form from a GGUF's split attn_k_b /
 *    attn_v_b gets no entry (those tensors are quantized without one, as
 *    llama-quantize does for a tensor the file does not name); from an HF
 *    folder it is attn_kv_b, its input the normalized latent;
 *  - llama.cpp's callback ignores plain products over fewer than 16 rows (never
 *    the experts' MUL_MAT_ID); so do we;
 *  - ncall counts the calls that were collected, one per forward call (llama.cpp:
 *    one per mul_mat, i.e. per micro-batch: with the default n_ubatch 512 and
 *    ctx <= 512 that is one per chunk); the file's last_chunk is the largest ncall;
 *  - the text is tokenized with the model's BOS rule and cut into chunks of ctx
 *    tokens (at least 2 chunks' worth needed), BOS replacing each chunk's first
 *    token when the tokenizer adds BOS, each chunk run from an empty cache; all
 *    ctx tokens of a chunk are collected; the perplexity of the second halves is
 *    reported as llama-imatrix does;
 *  - the written value is mean x^2 (sum / count) times ncall (formats/imatrix.h).
 * Sums are kept in double (llama.cpp: float), so long runs lose nothing to
 * rounding. */
#ifndef DSQ_EVAL_IMATRIX_COLLECT_H
#define DSQ_EVAL_IMATRIX_COLLECT_H

#include <stdint.h>

#include "core/status.h"
#include "formats/imatrix.h"
#include "runtime/forward.h"
#include "runtime/tokenizer.h"

/* Products over fewer rows are not collected (llama.cpp's rule). */
#define DSQ_IMATRIX_MIN_ROWS 16

typedef struct dsq_imatrix_collector dsq_imatrix_collector;

dsq_status dsq_imatrix_collector_new(const dsq_model *m, dsq_imatrix_collector **out);
void dsq_imatrix_collector_free(dsq_imatrix_collector *c);

/* The dsq_linear_hook_fn to install with user = the collector. Fails with
 * DSQ_ERR_NUMERIC naming the tensor on a non-finite sum. */
dsq_status dsq_imatrix_collect_hook(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in);

/* The largest ncall of any entry. */
int32_t dsq_imatrix_collector_calls(const dsq_imatrix_collector *c);

/* What was collected, as an imatrix (entries with data only; trailer
 * last_chunk = the largest ncall, dataset as given, may be NULL). Fails when
 * nothing was collected. */
dsq_status dsq_imatrix_collector_result(const dsq_imatrix_collector *c, const char *dataset, dsq_imatrix **out);

typedef struct dsq_imatrix_progress {
    int chunk, n_chunks;
    double ppl; /* running, second halves */
    double tokens_per_s, eta_s;
} dsq_imatrix_progress;

typedef void (*dsq_imatrix_progress_fn)(void *user, const dsq_imatrix_progress *p);

typedef struct dsq_imatrix_opts {
    int ctx;     /* tokens per chunk (default 512) */
    int chunks;  /* <= 0: all */
    int batch;   /* tokens per forward call (default 512, llama.cpp's n_ubatch); <= 0 or > ctx: ctx */
    int32_t bos; /* put first in each chunk; -1: none (dsq_imatrix_tokenize sets it) */
    bool no_ppl; /* skip the perplexity (and the output head) */
    dsq_imatrix_progress_fn progress;
    void *user;
} dsq_imatrix_opts;

typedef struct dsq_imatrix_run_result {
    int n_chunks;
    int64_t n_tokens; /* evaluated */
    double ppl, ppl_err;
    double seconds;
} dsq_imatrix_run_result;

void dsq_imatrix_opts_default(dsq_imatrix_opts *o);

/* Tokenizes as llama-imatrix does (add_special; EOS-adding tokenizers refused)
 * and sets o->bos. */
dsq_status dsq_imatrix_tokenize(const dsq_tokenizer *tok, const char *text, size_t len, dsq_imatrix_opts *o,
                                dsq_tokens *out);

/* Runs the chunks of tokens through c with col's hook installed (the
 * context's hooks are restored to none afterwards). */
dsq_status dsq_imatrix_run(dsq_ctx *c, dsq_imatrix_collector *col, const int32_t *tokens, int64_t n_tokens,
                           const dsq_imatrix_opts *o, dsq_imatrix_run_result *r);

#endif
