/* `dsquant serve`: an OpenAI-compatible HTTP server over the serving engine
 * (serve/engine.h). serve/http.c owns the sockets (libmicrohttpd, one thread
 * per connection, each blocking on its request's token queue), checks the
 * API key and body limits and routes; serve/api_*.c turn JSON requests into
 * engine requests and engine tokens into OpenAI's and vLLM's response shapes
 * (serve/api.h). */
#ifndef DSQ_SERVE_SERVER_H
#define DSQ_SERVE_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/chat.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"
#include "serve/engine.h"
#include "serve/metrics.h"

typedef struct dsq_serve_opts {
    const char *model_path;
    const char *host;
    int port;
    const char *served_name; /* NULL: the model path */
    int n_ctx, parallel, max_queue, threads, chunk;
    const char *api_key;       /* NULL: no key */
    const char *chat_template; /* "auto" or a family name */
    bool strict_model;         /* refuse requests naming another model */
    bool int8_act;             /* dsq_srv_opts.int8_act */
    size_t max_body;           /* bytes */
    double request_timeout;    /* seconds to deliver a whole request (0: the default, 30) */
} dsq_serve_opts;

typedef struct dsq_server dsq_server;

/* Listens (a port in use fails here, naming it); the model is not loaded yet
 * (/health answers 503). */
dsq_status dsq_server_start(const dsq_serve_opts *o, dsq_server **out);
/* Loads the model, its tokenizer and chat template, and starts the engine;
 * /health answers 200 after it. */
dsq_status dsq_server_load(dsq_server *sv);
/* The port actually bound (the one asked, or the kernel's choice for 0). */
int dsq_server_port(const dsq_server *sv);
/* Refuses new requests (503) and waits up to grace_s seconds for those in
 * flight; then stops the engine (requests still running end as cancelled)
 * and the listener. */
void dsq_server_stop(dsq_server *sv, double grace_s);
void dsq_server_free(dsq_server *sv);

#endif
