/* Choosing the next token, and the decode loop that drives it.
 *
 * Sampling follows the order of llama.cpp's default sampler chain
 * (common/sampling.cpp, src/llama-sampling.cpp): top-k, then top-p over the
 * softmax of what is left (the smallest prefix whose probability reaches p,
 * at least one token), then the temperature, then a draw from the softmax.
 * Candidates are ordered by logit, ties by lower id, so results do not
 * depend on a sort's stability. The draw uses our own generator
 * (xoshiro256** seeded through splitmix64): the same seed gives the same
 * tokens on every machine, but not llama.cpp's tokens (it uses std::mt19937).
 * temp <= 0 is greedy: the highest logit, lowest id on ties. */
#ifndef DSQ_RUNTIME_SAMPLER_H
#define DSQ_RUNTIME_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/forward.h"
#include "runtime/tokenizer.h"

typedef struct dsq_sampler_params {
    float temp;    /* <= 0: greedy (default 0) */
    int top_k;     /* <= 0: off */
    float top_p;   /* >= 1: off */
    uint64_t seed;
} dsq_sampler_params;

void dsq_sampler_params_default(dsq_sampler_params *p);

typedef struct dsq_sampler dsq_sampler;

dsq_status dsq_sampler_new(const dsq_sampler_params *p, int64_t n_vocab, dsq_sampler **out);
void dsq_sampler_free(dsq_sampler *s);
/* The next token from one row of n_vocab logits. */
int32_t dsq_sampler_sample(dsq_sampler *s, const float *logits);
/* Index of the largest value, the lowest on ties. */
int32_t dsq_argmax(const float *x, int64_t n);

/* ---- decoding ---- */

/* Called with each new token (never with a stop token); an error stops the loop. */
typedef dsq_status (*dsq_gen_token_fn)(void *user, int32_t token);

typedef struct dsq_gen_opts {
    int n_predict;          /* at most this many new tokens; < 0: until a stop token or the context is full */
    const int32_t *stop;    /* tokens that end generation (EOS, the chat end token) */
    size_t n_stop;
    dsq_gen_token_fn on_token; /* may be NULL */
    void *user;
    /* Every forward call covers at least DSQ_LINEAR_GEMV_MAX_TOKENS + 1
     * positions (a window ending at the newest token, padded after it when
     * the sequence is shorter), so every product, the head included, takes
     * the F32-activation GEMM path: what transformers computes, not the
     * decode path's activations rounded to the weight type's vec_dot type
     * (llama.cpp's). Much slower (every step runs the GEMM path, which turns all
     * of W into F32, over 8 rows); the padding positions'
     * cache entries are rewritten before any real token attends to them. */
    bool f32_activations;
} dsq_gen_opts;

typedef struct dsq_gen_stats {
    int n_prompt, n_gen;
    double prompt_s, gen_s; /* prefill time, time for the generated tokens */
    bool stopped;           /* ended on a stop token */
} dsq_gen_stats;

/* Runs the prompt from an empty cache, then samples one token at a time,
 * appending each to out (stop tokens excluded). */
dsq_status dsq_generate(dsq_ctx *c, dsq_sampler *s, const int32_t *prompt, int n_prompt, const dsq_gen_opts *o,
                        dsq_tokens *out, dsq_gen_stats *st);

/* ---- streaming text ---- */

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8
 * sequence (what can be printed now; the rest waits for the next piece).
 * Bytes that cannot start or continue a sequence count as complete. */
size_t dsq_utf8_complete(const char *s, size_t n);

#endif
