/* Private to serve/: a completion request's parameters, parsed and checked
 * (serve/api_request.c). */
#ifndef DSQ_SERVE_API_REQUEST_H
#define DSQ_SERVE_API_REQUEST_H

#include "serve/api.h"

#define DSQ_API_MAX_STOP 256

typedef struct dsq_api_params {
    dsq_srv_params sp; /* max_tokens and the stop ids are set per prompt */
    int max_tokens;    /* < 0: to the end of the context */
    bool echo, stream, include_usage;
    bool ids_as_tokens;                 /* vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N" */
    const char *stop[DSQ_API_MAX_STOP]; /* stop strings (into the parsed body) */
    int n_stop;
} dsq_api_params;

/* Every sampling and output field of body; false after a 400 naming the field. */
bool dsq_api_parse_params(const cJSON *body, bool chat, dsq_api_params *p, dsq_reply *r);

#endif
