/* Private to serve/: what the HTTP layer and the endpoint handlers share. */
#ifndef DSQ_SERVE_API_H
#define DSQ_SERVE_API_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "serve/server.h"

struct dsq_server {
    dsq_serve_opts o;
    char *name; /* served model name */
    atomic_int ready, draining, in_flight;
    dsq_model *m;
    dsq_tokenizer *tok;
    dsq_chat_template chat;
    bool has_chat;
    char *chat_text; /* the model's template text, for /tokenizer_info (or NULL) */
    dsq_srv *eng;
    dsq_metrics *metrics;
    void *daemon; /* struct MHD_Daemon */
    struct dsq_deadline *deadline; /* serve/deadline.h */
    int listen_fd, port;
    long long created;
};

/* A streamed body: next() blocks until it has bytes for buf (returns how
 * many), returns 0 at the end and -1 when the client is gone or on error;
 * done() frees the state. */
typedef struct dsq_stream {
    ssize_t (*next)(void *st, char *buf, size_t max);
    void (*done)(void *st);
    void *st;
} dsq_stream;

/* What a handler answers: a whole body, or a stream (SSE). */
typedef struct dsq_reply {
    int status;
    char *body; /* malloc'd */
    size_t len;
    const char *content_type;
    int retry_after;   /* seconds, with 429/503; 0: none */
    dsq_stream stream; /* stream.next set: streamed as text/event-stream */
} dsq_reply;

/* The request a handler sees. */
typedef struct dsq_http_req {
    const char *method, *path;
    const char *body;
    size_t len;
    int fd; /* the client's socket, to notice a client that has gone */
} dsq_http_req;

/* {"error": {message, type, param, code}} with status; param may be NULL. */
void dsq_reply_error(dsq_reply *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A JSON body from j (consumed). */
void dsq_reply_json(dsq_reply *r, int status, cJSON *j);
/* Whether the client closed its end. */
bool dsq_peer_gone(int fd);

/* Endpoint handlers (serve/api_*.c). */
void dsq_api_completions(dsq_server *sv, const dsq_http_req *q, bool chat, dsq_reply *r);
void dsq_api_models(dsq_server *sv, dsq_reply *r);
void dsq_api_tokenize(dsq_server *sv, const dsq_http_req *q, dsq_reply *r);
void dsq_api_detokenize(dsq_server *sv, const dsq_http_req *q, dsq_reply *r);
void dsq_api_tokenizer_info(dsq_server *sv, dsq_reply *r);

/* Parsing helpers shared by the handlers: each answers false after writing a
 * 400 naming the field. */
bool dsq_api_parse_body(const dsq_http_req *q, dsq_reply *r, cJSON **out);
bool dsq_api_check_model(dsq_server *sv, const cJSON *body, dsq_reply *r);
/* messages -> prompt ids through the chat template (ids zeroed first). */
bool dsq_api_chat_prompt(dsq_server *sv, const cJSON *msgs, dsq_tokens *ids, int32_t *end_id, dsq_reply *r);

#endif
