/* The server the HTTP harnesses talk to: `dsquant serve` in this process,
 * on a loopback port, over the tiny model (tests/fuzz/fuzz.h). */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/server.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/util_server.h"

static dsq_server *g_sv;
static int g_port;

static void stop(void)
{
    dsq_server_stop(g_sv, 2);
    dsq_server_free(g_sv);
}

void dsq_fz_server_start(void)
{
    static char model[600];
    snprintf(model, sizeof model, "%s/serve-model.gguf", dsq_fz_dir());
    if (dsq_fz_tiny_gguf(model, "gpt2", "smollm", true) != DSQ_OK) {
        fprintf(stderr, "dsq-fuzz: tiny model: %s\n", dsq_errmsg());
        exit(2);
    }
    dsq_serve_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_name = "tiny";
    o.n_ctx = 64; /* every request ends within 64 tokens of a 2-layer model */
    o.parallel = 2;
    o.max_queue = 4;
    o.threads = 1;
    o.chunk = 32;
    o.chat_template = "auto";
    o.max_body = 1u << 16;
    if (dsq_server_start(&o, &g_sv) != DSQ_OK || dsq_server_load(g_sv) != DSQ_OK) {
        fprintf(stderr, "dsq-fuzz: server: %s\n", dsq_errmsg());
        exit(2);
    }
    g_port = dsq_server_port(g_sv);
    atexit(stop);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* connect(), finished even when a signal (libFuzzer's timer) interrupts it. */
static bool connect_now(int fd, const struct sockaddr_in *a)
{
    if (connect(fd, (const struct sockaddr *)a, sizeof *a) == 0) return true;
    if (errno != EINTR && errno != EINPROGRESS) return false;
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        int k = poll(&p, 1, 10000);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
            errno = err;
            return false;
        }
        return true;
    }
}

int dsq_fz_exchange(const void *req, size_t n, bool half_close, char *resp, size_t cap, double timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* closed with a reset: hundreds of connections a second must not use up
     * the ephemeral ports in TIME_WAIT */
    struct linger lg = {1, 0};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (fd < 0 || !connect_now(fd, &a)) {
        perror("dsq-fuzz: connect");
        exit(2);
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = send(fd, (const char *)req + done, n - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue; /* libFuzzer's timer signal */
        if (w <= 0) break;                     /* the server may close early on a bad request */
        done += (size_t)w;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    size_t got = 0;
    int rc = -1;
    double t0 = now();
    for (;;) {
        double left = timeout_s - (now() - t0);
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        char tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = 0;
            break;
        }
        size_t k = (size_t)r < cap - 1 - got ? (size_t)r : cap - 1 - got;
        memcpy(resp + got, tmp, k);
        got += k;
    }
    resp[got] = 0;
    close(fd);
    return rc < 0 ? -1 : (int)got;
}

int dsq_fz_status_of(const char *resp)
{
    /* exactly "HTTP/1.x DDD ": a status line, not digits that merely follow */
    if (strncmp(resp, "HTTP/1.", 7) || !isdigit((unsigned char)resp[7]) || resp[8] != ' ') return -1;
    const char *d = resp + 9;
    if (!isdigit((unsigned char)d[0]) || !isdigit((unsigned char)d[1]) || !isdigit((unsigned char)d[2]) || d[3] != ' ')
        return -1;
    return (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
}
