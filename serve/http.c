/* The HTTP side of `dsquant serve` on libmicrohttpd (Debian's
 * libmicrohttpd-dev): one thread per connection, so a handler may block on
 * its request's tokens. Bodies are collected up to the limit (413 past it),
 * the API key is compared in constant time, routes dispatch to serve/api_*.c,
 * and streamed replies go out chunked as server-sent events. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "serve/api.h"
#include "serve/deadline.h"

/* Seconds a connection may stay silent (a non-streamed request waiting in
 * a long queue is silent until its answer). Delivering a request has its
 * own, shorter deadline (serve/deadline.h). */
#define IDLE_TIMEOUT_S 600
#define REQUEST_TIMEOUT_S 30.0

/* ---- replies ---- */

void dsq_reply_json(dsq_reply *r, int status, cJSON *j)
{
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) {
        r->status = 500;
        r->body =
            strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":500}}");
        r->len = r->body ? strlen(r->body) : 0;
        r->content_type = "application/json";
        return;
    }
    r->status = status;
    r->body = text;
    r->len = strlen(text);
    r->content_type = "application/json";
}

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status < 500 ? "invalid_request_error" : "server_error";
    }
}

void dsq_reply_error(dsq_reply *r, int status, const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    if (e) {
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", error_type(status));
        if (param)
            cJSON_AddStringToObject(e, "param", param);
        else
            cJSON_AddNullToObject(e, "param");
        cJSON_AddNumberToObject(e, "code", status);
    }
    DSQ_LOGD("serve: %d %s", status, msg);
    dsq_reply_json(r, status, j);
}

bool dsq_peer_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ---- connections ---- */

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
} conn;

static bool key_matches(const char *want, const char *got)
{
    if (!got) return false;
    size_t a = strlen(want), b = strlen(got);
    unsigned char d = (unsigned char)(a != b);
    /* every byte of the longer string is looked at, whatever matched before */
    for (size_t i = 0, n = a > b ? a : b; i < n; i++)
        d |= (unsigned char)((i < a ? want[i] : 0) ^ (i < b ? got[i] : 0));
    return d == 0;
}

static bool authorized(dsq_server *sv, struct MHD_Connection *c)
{
    if (!sv->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    return key_matches(sv->o.api_key, h + 7);
}

static void handle_health(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    (void)q;
    if (atomic_load(&sv->ready) && !atomic_load(&sv->draining))
        dsq_reply_json(r, 200, cJSON_CreateObject());
    else
        dsq_reply_error(r, 503, NULL, atomic_load(&sv->draining) ? "shutting down" : "the model is loading");
}

static void handle_metrics(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    (void)q;
    dsq_srv_counts c = {0};
    if (sv->eng) dsq_srv_counts_get(sv->eng, &c);
    size_t len = 0;
    char *text = dsq_metrics_render(sv->metrics, &c, &len);
    if (!text) return dsq_reply_error(r, 500, NULL, "out of memory");
    r->status = 200;
    r->body = text;
    r->len = len;
    r->content_type = "text/plain; version=0.0.4";
}

static void handle_models(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    (void)q;
    dsq_api_models(sv, r);
}

static void handle_tokenizer_info(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    (void)q;
    dsq_api_tokenizer_info(sv, r);
}

static void handle_completions(dsq_server *sv, const dsq_http_req *q, dsq_reply *r)
{
    dsq_api_completions(sv, q, false, r);
}

static void handle_chat(dsq_server *sv, const dsq_http_req *q, dsq_reply *r) { dsq_api_completions(sv, q, true, r); }

/* The routes: open ones answer before the model is loaded and without the API key. */
static const struct route {
    const char *method, *path;
    bool open;
    void (*fn)(dsq_server *sv, const dsq_http_req *q, dsq_reply *r);
} g_routes[] = {
    {"GET", "/health", true, handle_health},
    {"GET", "/metrics", true, handle_metrics},
    {"GET", "/v1/models", false, handle_models},
    {"GET", "/tokenizer_info", false, handle_tokenizer_info},
    {"POST", "/v1/completions", false, handle_completions},
    {"POST", "/v1/chat/completions", false, handle_chat},
    {"POST", "/tokenize", false, dsq_api_tokenize},
    {"POST", "/detokenize", false, dsq_api_detokenize},
};

/* Routes a complete request. */
static void route(dsq_server *sv, struct MHD_Connection *c, const dsq_http_req *q, dsq_reply *r)
{
    const struct route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof g_routes / sizeof g_routes[0]; i++) {
        if (strcmp(q->path, g_routes[i].path)) continue;
        path_known = true;
        if (!strcmp(q->method, g_routes[i].method)) rt = &g_routes[i];
    }
    if (!path_known) return dsq_reply_error(r, 404, NULL, "no route %s %s", q->method, q->path);
    if (!rt) return dsq_reply_error(r, 405, NULL, "%s does not take %s", q->path, q->method);
    if (rt->open) return rt->fn(sv, q, r);
    if (!authorized(sv, c)) return dsq_reply_error(r, 401, NULL, "a valid API key is required (Authorization: Bearer)");
    if (atomic_load(&sv->draining) || !atomic_load(&sv->ready)) {
        r->retry_after = 5;
        return dsq_reply_error(r, 503, NULL,
                               atomic_load(&sv->draining) ? "the server is shutting down" : "the model is loading");
    }
    rt->fn(sv, q, r);
}

/* ---- streamed bodies ---- */

typedef struct stream_ctx {
    dsq_stream s;
    dsq_server *sv;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *x = cls;
    ssize_t n = x->s.next(x->s.st, buf, max);
    if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    return n;
}

static void stream_free(void *cls)
{
    stream_ctx *x = cls;
    x->s.done(x->s.st);
    atomic_fetch_sub(&x->sv->in_flight, 1);
    free(x);
}

static enum MHD_Result send_reply(dsq_server *sv, struct MHD_Connection *c, dsq_reply *r)
{
    struct MHD_Response *resp = NULL;
    if (r->stream.next) {
        stream_ctx *x = malloc(sizeof *x);
        if (x) {
            *x = (stream_ctx){r->stream, sv};
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, x, stream_free);
            if (!resp) free(x);
        }
        if (!resp) {
            r->stream.done(r->stream.st);
            atomic_fetch_sub(&sv->in_flight, 1);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body ? r->body : (char *)"", MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            return MHD_NO;
        }
        r->body = NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                r->content_type ? r->content_type : "application/json");
    }
    if (r->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static dsq_deadline_slot *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode why)
{
    dsq_server *sv = cls;
    if (why == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? dsq_deadline_open(sv->deadline, ci->connect_fd) : NULL;
    } else {
        dsq_deadline_close(sv->deadline, *socket_context);
        *socket_context = NULL;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    dsq_server *sv = cls;
    conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > sv->o.max_body) k->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_large && k->len + *upload_size > sv->o.max_body) k->too_large = true;
        if (!k->too_large && k->len + *upload_size + 1 > k->cap) {
            size_t cap = k->cap ? k->cap : 4096;
            while (cap < k->len + *upload_size + 1) cap *= 2;
            char *b = realloc(k->body, cap);
            if (!b) return MHD_NO;
            k->body = b, k->cap = cap;
        }
        if (!k->too_large) {
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
            k->body[k->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    dsq_deadline_answering(sv->deadline, slot_of(c));
    dsq_reply r = {0};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    char path[512];
    snprintf(path, sizeof path, "%s", url);
    char *qm = strchr(path, '?');
    if (qm) *qm = 0;
    dsq_http_req q = {method, path, k->body ? k->body : "", k->len, ci ? ci->connect_fd : -1};
    atomic_fetch_add(&sv->in_flight, 1);
    if (k->too_large)
        dsq_reply_error(&r, 413, NULL, "the request body is over %zu bytes", sv->o.max_body);
    else
        route(sv, c, &q, &r);
    DSQ_LOGD("serve: %s %s -> %d", method, path, r.status);
    enum MHD_Result ok = send_reply(sv, c, &r);
    if (!r.stream.next) atomic_fetch_sub(&sv->in_flight, 1);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    (void)why;
    dsq_server *sv = cls;
    dsq_deadline_reading(sv->deadline, slot_of(c)); /* a kept-alive connection's next request */
    conn *k = *con_cls;
    if (!k) return;
    free(k->body);
    free(k);
    *con_cls = NULL;
}

/* ---- life cycle ---- */

static dsq_status listen_on(dsq_server *sv)
{
    char port[16];
    snprintf(port, sizeof port, "%d", sv->o.port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(sv->o.host, port, &hints, &ai);
    if (rc) return dsq_fail(DSQ_ERR_ARG, "--host %s: %s", sv->o.host, gai_strerror(rc));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 256)) {
        dsq_status s = dsq_fail_errno(DSQ_ERR_IO, "cannot listen on %s:%d", sv->o.host, sv->o.port);
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return s;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    sv->port = sv->o.port;
    if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
        sv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                  : ((struct sockaddr_in *)&ss)->sin_port);
    sv->listen_fd = fd;
    return DSQ_OK;
}

dsq_status dsq_server_start(const dsq_serve_opts *o, dsq_server **out)
{
    *out = NULL;
    dsq_server *sv = calloc(1, sizeof *sv);
    if (!sv) return dsq_fail(DSQ_ERR_NOMEM, "serve: out of memory");
    sv->o = *o;
    sv->listen_fd = -1;
    sv->created = (long long)time(NULL);
    sv->name = strdup(o->served_name ? o->served_name : o->model_path);
    sv->metrics = sv->name ? dsq_metrics_new(sv->name) : NULL;
    dsq_status s = sv->metrics ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "serve: out of memory");
    if (s == DSQ_OK) s = listen_on(sv);
    if (s == DSQ_OK)
        s = dsq_deadline_start(o->request_timeout > 0 ? o->request_timeout : REQUEST_TIMEOUT_S, &sv->deadline);
    if (s == DSQ_OK) {
        unsigned limit = (unsigned)(2 * (o->parallel + o->max_queue) + 32);
        sv->daemon =
            MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0, NULL,
                             NULL, on_request, sv, MHD_OPTION_LISTEN_SOCKET, sv->listen_fd, MHD_OPTION_CONNECTION_LIMIT,
                             limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_NOTIFY_CONNECTION,
                             on_connection, sv, MHD_OPTION_END);
        if (!sv->daemon) s = dsq_fail(DSQ_ERR_IO, "cannot start the HTTP server on %s:%d", o->host, o->port);
    }
    if (s != DSQ_OK) {
        dsq_server_free(sv);
        return s;
    }
    *out = sv;
    return DSQ_OK;
}

int dsq_server_port(const dsq_server *sv) { return sv->port; }

void dsq_server_stop(dsq_server *sv, double grace_s)
{
    atomic_store(&sv->draining, 1);
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (double waited = 0; atomic_load(&sv->in_flight) > 0 && waited < grace_s; waited += 0.02) nanosleep(&ts, NULL);
    dsq_srv_shutdown(sv->eng); /* what still runs ends as cancelled; late submissions are refused */
    /* joins every connection thread: their streams end once their requests are cancelled */
    if (sv->daemon) MHD_stop_daemon(sv->daemon);
    sv->daemon = NULL;
}

void dsq_server_free(dsq_server *sv)
{
    if (!sv) return;
    if (sv->daemon) MHD_stop_daemon(sv->daemon);
    dsq_deadline_stop(sv->deadline);
    if (sv->eng) dsq_srv_free(sv->eng);
    if (sv->listen_fd >= 0) close(sv->listen_fd);
    dsq_metrics_free(sv->metrics);
    dsq_chat_template_free(&sv->chat);
    free(sv->chat_text);
    dsq_tokenizer_free(sv->tok);
    dsq_model_close(sv->m);
    free(sv->name);
    free(sv);
}
