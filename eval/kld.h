/* KL divergence of a quantized model from its base, as llama-perplexity's
 * --kl-divergence computes it (tools/perplexity/perplexity.cpp, functions
 * kl_divergence and log_softmax with a kl_divergence_result):
 *
 *  - the text is tokenized once (with the base tokenizer's BOS rule; EOS-adding
 *    tokenizers are refused), cut into chunks of ctx tokens, BOS replacing the
 *    first token of each chunk when the tokenizer adds BOS, every chunk
 *    evaluated from an empty cache;
 *  - the positions ctx/2 .. ctx-2 of each chunk are scored (each predicts the
 *    next token), as for perplexity;
 *  - the base model's log-softmax is stored as 16-bit log-probs with the
 *    exact NLL of the correct token (eval/kld_file.h), in memory or in a
 *    file, and every statistic reads the base through that representation,
 *    as llama.cpp does (except the base NLL, exact here): a run that saves
 *    the base and a later one that reads it give the same numbers;
 *  - per position: KLD = sum over tokens with base log-prob > -16 of
 *    p_base * (log p_base - log p_quant); same-top = argmax of both agree
 *    (first index on ties); dp = p_quant(correct) - p_base(correct); NLL of
 *    the correct token for both models.
 *
 * Statistics (dsq_kld_result): llama.cpp's, with its uncertainty estimates:
 * mean +/- sqrt((E[x^2] - E[x]^2) / (n - 1)) (0 for n <= 10), PPL of both
 * models and their correlation, ln(PPL(Q)/PPL(base)) with the covariance
 * term, PPL ratio and difference, KLD quantiles (llama.cpp's linear
 * interpolation between sorted values), dp quantiles, RMS dp, same-top
 * fraction +/- sqrt(p(1-p)/(n-1)). */
#ifndef DSQ_EVAL_KLD_H
#define DSQ_EVAL_KLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/forward.h"
#include "runtime/tokenizer.h"

/* Quantiles reported, as fractions: KLD max, 99.9%, 99%, 95%, 90%, median,
 * 10%, 5%, 1%, 0.1%, min; dp the same with 75% and 25% added. */
#define DSQ_KLD_NQ 11
#define DSQ_KLD_DP_NQ 13
extern const double dsq_kld_quantiles[DSQ_KLD_NQ];
extern const double dsq_kld_dp_quantiles[DSQ_KLD_DP_NQ];

typedef struct dsq_kld_result {
    int64_t count; /* positions scored */
    int n_chunks, ctx;
    double ppl, ppl_err;           /* the quantized model */
    double ppl_base, ppl_base_err; /* the base, from its stored log-probs */
    double cor;                    /* correlation of the two models' NLLs */
    double ln_ratio, ln_ratio_err; /* mean ln(PPL(Q)/PPL(base)) */
    double ratio, ratio_err;       /* PPL(Q)/PPL(base) */
    double diff, diff_err;         /* PPL(Q)-PPL(base) */
    double kld, kld_err;
    double kld_q[DSQ_KLD_NQ];      /* at dsq_kld_quantiles */
    double dp, dp_err;             /* mean p_quant - p_base of the correct token */
    double dp_q[DSQ_KLD_DP_NQ];    /* at dsq_kld_dp_quantiles */
    double dp_rms, dp_rms_err;
    double same_top, same_top_err; /* fraction, 0..1 */
    bool has_quantiles;            /* false in progress reports */
    double seconds;
} dsq_kld_result;

/* ---- statistics over rows ---- */
typedef struct dsq_kld_acc dsq_kld_acc;
dsq_status dsq_kld_acc_new(dsq_kld_acc **out);
void dsq_kld_acc_free(dsq_kld_acc *a);
/* Scores n positions: base_rows are n packed rows (dsq_kld_pack_row, one
 * dsq_kld_row_bytes(vocab) apart), logits the quantized model's n x vocab,
 * targets[i] the correct next token of position i. */
dsq_status dsq_kld_acc_add(dsq_kld_acc *a, const uint8_t *base_rows, const float *logits, int64_t vocab,
                           const int32_t *targets, int n);
/* The statistics so far; quantiles only when with_quantiles (it sorts). */
dsq_status dsq_kld_acc_result(const dsq_kld_acc *a, bool with_quantiles, dsq_kld_result *r);

/* ---- runs ---- */
typedef struct dsq_kld_progress {
    int chunk, n_chunks;
    const dsq_kld_result *r; /* running, no quantiles; NULL when only saving the base */
    double tokens_per_s, eta_s;
} dsq_kld_progress;

typedef void (*dsq_kld_progress_fn)(void *user, const dsq_kld_progress *p);

typedef struct dsq_kld_opts {
    int ctx;    /* tokens per chunk; 0 with a base file: the file's */
    int chunks; /* <= 0: all */
    int batch;  /* tokens per forward call; <= 0 or > ctx: ctx */
    int32_t bos; /* put first in each chunk; -1: none (set by dsq_kld_tokenize) */
    const char *save_path; /* dsq_kld_compute: also write the base log-probs here */
    bool overwrite;
    dsq_kld_progress_fn progress;
    void *user;
} dsq_kld_opts;

void dsq_kld_opts_default(dsq_kld_opts *o);

/* Tokenizes the text as llama-perplexity does and sets o->bos from the
 * tokenizer (-1 when it adds none). */
dsq_status dsq_kld_tokenize(const dsq_tokenizer *tok, const char *text, size_t len, dsq_kld_opts *o, dsq_tokens *out);

/* Runs base (and quant, unless NULL) over the chunks of tokens. With
 * o->save_path the base log-probs are written there (required when quant is
 * NULL). r may be NULL when quant is NULL. */
dsq_status dsq_kld_compute(dsq_ctx *base, dsq_ctx *quant, const int32_t *tokens, int64_t n_tokens,
                           const dsq_kld_opts *o, dsq_kld_result *r);

/* Reads the base log-probs from a file made by dsq_kld_compute and runs
 * quant over the same tokens. Fails, saying what differs, when the file's
 * vocabulary is not quant's, o->ctx is neither 0 nor the file's, o->bos is
 * not the file's, or (when check_tokens is given) the file's tokens are not
 * check_tokens' first ones. */
dsq_status dsq_kld_from_file(const char *path, dsq_ctx *quant, const int32_t *check_tokens, int64_t n_check,
                             const dsq_kld_opts *o, dsq_kld_result *r);

#endif
