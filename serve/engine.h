/* The serving engine: continuous batching over one context of P sequences
 * (runtime/forward.h dsq_forward_batch).
 *
 * One thread owns the context. Each step it admits waiting requests into
 * free slots (first come, first served), then runs one batched forward: a
 * row for every slot that is decoding, plus chunks of the prompts being
 * prefilled (at most `chunk` prompt rows a step, so a long prompt does not
 * stall the running streams). Finished and cancelled requests leave at the
 * step's end; their slot is free for the next step.
 *
 * A request's results go to its own event queue (tokens with their log
 * probabilities, then a finish reason), which the submitting thread reads
 * with dsq_srv_wait. Requests are reference-counted between the engine and
 * the submitter, so either side may finish first. */
#ifndef DSQ_SERVE_ENGINE_H
#define DSQ_SERVE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/forward.h"
#include "runtime/sampler.h"

/* OpenAI's and vLLM's limit on top log probabilities per token. */
#define DSQ_SRV_MAX_TOP 20

typedef struct dsq_srv dsq_srv;
typedef struct dsq_srv_req dsq_srv_req;

typedef enum dsq_srv_finish {
    DSQ_FINISH_NONE = 0, /* still running */
    DSQ_FINISH_STOP,     /* a stop token (EOS, the chat end token) */
    DSQ_FINISH_LENGTH,   /* max_tokens, or the context is full */
    DSQ_FINISH_CANCELLED,
    DSQ_FINISH_ERROR, /* the forward pass failed; dsq_srv_error says why */
} dsq_srv_finish;

/* One token of a request's output: an echoed prompt token or a generated one. */
typedef struct dsq_srv_tok {
    int32_t id;
    bool prompt;   /* an echoed prompt token */
    bool stop;     /* the stop token that ended generation (not part of the text) */
    float logprob; /* NaN where there is none (the first prompt token, or not asked) */
    int n_top;
    int32_t top_id[DSQ_SRV_MAX_TOP];
    float top_lp[DSQ_SRV_MAX_TOP];
} dsq_srv_tok;

typedef struct dsq_srv_params {
    int max_tokens; /* new tokens, >= 0 */
    dsq_sampler_params sp;
    float presence_penalty, frequency_penalty;
    bool ignore_eos;
    int logprobs;       /* < 0: none; else the chosen token's log probability and this many alternatives */
    bool echo_logprobs; /* the prompt's tokens with their log probabilities first */
    const int32_t *stop_ids;
    int n_stop_ids;
} dsq_srv_params;

typedef struct dsq_srv_opts {
    int n_slots;   /* sequences decoded together */
    int n_ctx;     /* positions per sequence */
    int max_queue; /* waiting requests beyond the slots; more are refused */
    int chunk;     /* prompt rows per step */
    int threads;
    /* prompt batches of the Q8_0-paired block types in int8 on rounded
     * activations (DSQ_MATMUL_INT8ACT); off, scores equal `dsquant ppl`'s */
    bool int8_act;
} dsq_srv_opts;

/* Counters and gauges for /metrics (serve/metrics.h), read under the engine's lock. */
typedef struct dsq_srv_counts {
    int running, waiting;
    int64_t prompt_tokens, generation_tokens, requests_finished[DSQ_FINISH_ERROR + 1];
    int64_t kv_used, kv_total; /* positions */
} dsq_srv_counts;

/* Latencies a request's life produces, reported to the observer below. */
typedef enum dsq_srv_timing { DSQ_TIMING_TTFT, DSQ_TIMING_ITL, DSQ_TIMING_E2E, DSQ_TIMING_COUNT } dsq_srv_timing;
typedef void (*dsq_srv_observe_fn)(void *user, dsq_srv_timing what, double seconds);

dsq_status dsq_srv_new(const dsq_model *m, const dsq_srv_opts *o, dsq_srv **out);
/* Latency observer, called from the engine thread (may be NULL). */
void dsq_srv_set_observer(dsq_srv *e, dsq_srv_observe_fn fn, void *user);
/* Stops the engine thread: running and waiting requests finish as
 * cancelled, later submissions are refused. The engine stays valid (other
 * threads may still hold requests or submit) until dsq_srv_free. */
void dsq_srv_shutdown(dsq_srv *e);
void dsq_srv_free(dsq_srv *e);
void dsq_srv_counts_get(dsq_srv *e, dsq_srv_counts *out);

/* Queues a request (the prompt and stop ids are copied). DSQ_ERR_ARG when the
 * prompt and max_tokens do not fit a sequence's context (the message names
 * them); DSQ_ERR_UNSUPPORTED when the queue is full (the HTTP layer answers
 * 429) or the engine is stopping (503). */
dsq_status dsq_srv_submit(dsq_srv *e, const int32_t *prompt, int n_prompt, const dsq_srv_params *p, dsq_srv_req **out);
/* Up to max events into out; blocks at most timeout_ms for the first one.
 * Returns the number copied; *fin becomes the finish reason once every event
 * has been read. */
int dsq_srv_wait(dsq_srv_req *r, dsq_srv_tok *out, int max, int timeout_ms, dsq_srv_finish *fin);
/* The error text of a DSQ_FINISH_ERROR request. */
const char *dsq_srv_error(const dsq_srv_req *r);
/* Asks the engine to drop the request at its next step. */
void dsq_srv_cancel(dsq_srv_req *r);
/* The submitter's reference; the request is freed when the engine is done too. */
void dsq_srv_release(dsq_srv_req *r);

#endif
