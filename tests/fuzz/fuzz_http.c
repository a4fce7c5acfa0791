/* The server's HTTP handling from the socket: arbitrary bytes as a request
 * (request line, headers, chunked or sized bodies, several requests on one
 * connection), then the writing half closed. The server must answer with a
 * status below 500 (or libmicrohttpd's 501/505 for a method or version it
 * does not speak) or close, and close within the timeout once the client
 * has nothing more to say; it must go on answering /health after every
 * input (it has not wedged or died). */
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/util_server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    dsq_fz_quiet();
    dsq_fz_server_start();
    return 0;
}

/* The header named name ("\r\nName:") of the reply at p whose headers end at h, or NULL. */
static const char *header(const char *p, const char *h, const char *name)
{
    const char *f = strstr(p, name);
    return f && f < h ? f + strlen(name) : NULL;
}

/* The reply after the one at p (headers and Content-Length bytes), or NULL
 * when p's reply ends the connection (Connection: close, or no length) or
 * is cut short. After a closing reply nothing is a reply: libmicrohttpd
 * 0.9.75 sends the header block of its own 400 for a malformed
 * Content-Length twice before the body, on a connection it then closes. */
static const char *next_reply(const char *p, const char *end)
{
    const char *h = strstr(p, "\r\n\r\n");
    if (!h || header(p, h, "\r\nConnection: close")) return NULL;
    const char *cl = header(p, h, "\r\nContent-Length:");
    if (!cl) return NULL;
    long len = strtol(cl, NULL, 10);
    if (len < 0 || len > end - (h + 4)) return NULL;
    return h + 4 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char resp[1 << 16];
    if (size > (1u << 16)) return 0;
    int n = dsq_fz_exchange(data, size, true, resp, sizeof resp, 20);
    if (n < 0) dsq_fz_die("the server kept a half-closed connection open for 20 s");
    /* Replies are walked one by one (status line, headers, Content-Length
     * bytes of body): "HTTP/1." inside a body is the client's own bytes
     * quoted in an error message, not a status. */
    for (const char *p = resp; p && *p;) {
        int code = dsq_fz_status_of(p);
        if (code < 0) dsq_fz_die("a reply does not start with a status line: %.40s", p);
        /* libmicrohttpd's own answers to protocol errors: 501 (method), 505 (version) */
        if (code >= 500 && code != 501 && code != 503 && code != 505)
            dsq_fz_die("status %d for a client's bytes: %.40s", code, p);
        p = next_reply(p, resp + n);
    }
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    n = dsq_fz_exchange(health, sizeof health - 1, false, resp, sizeof resp, 20);
    if (n < 0 || dsq_fz_status_of(resp) != 200) dsq_fz_die("/health does not answer 200 after the input: %.80s", resp);
    return 0;
}
