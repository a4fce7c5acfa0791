/* Negative log-likelihood of next tokens from logits, and its running sums,
 * as llama-perplexity computes them (perplexity.cpp's log_softmax: float
 * max, double sum of expf), for perplexity and the imatrix run's ppl. (The
 * KL-divergence scorer, eval/kld.c, keeps its own: perplexity.cpp computes
 * that NLL in float, next to the KLD, and we follow it.) */
#ifndef DSQ_EVAL_NLL_H
#define DSQ_EVAL_NLL_H

#include <stdint.h>

/* -log softmax(logits)[tok] over a row of vocab logits. */
double dsq_token_nll(const float *logits, int64_t vocab, int32_t tok);

typedef struct dsq_nll_acc {
    double nll, nll2; /* sums of NLL and NLL^2 */
    int64_t count;
} dsq_nll_acc;

/* Adds rows of logits (row r predicts targets[r]), scored in parallel. */
void dsq_nll_acc_rows(dsq_nll_acc *a, const float *logits, int64_t vocab, const int32_t *targets, int rows);

/* exp(mean NLL), and perplexity.cpp's +/-: ppl * sqrt(var / (count - 1)),
 * 0 when that is undefined. Both 0 for an empty accumulator. */
void dsq_nll_acc_ppl(const dsq_nll_acc *a, double *ppl, double *ppl_err);

#endif
