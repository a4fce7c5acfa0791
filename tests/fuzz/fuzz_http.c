/* The server's HTTP handling from the socket: arbitrary bytes as a request
 * (request line, headers, chunked or sized bodies, several requests on one
 * connection), then the writing half closed. The server must answer with a
 * status below 500 (or libmicrohttpd's 501/505 for a method or version it
 * does not speak) or close, and close within the timeout once the client
 * has nothing more to say; it must go on answering /health after every
 * input (it has not wedged or died). */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char resp[1 << 16];
    if (size > (1u << 16)) return 0;
    int n = dsq_fz_exchange(data, size, true, resp, sizeof resp, 20);
    if (n < 0) dsq_fz_die("the server kept a half-closed connection open for 20 s");
    for (const char *p = resp; (p = strstr(p, "HTTP/1.")); p++) {
        int code = dsq_fz_status_of(p);
        /* libmicrohttpd's own answers to protocol errors: 501 (method), 505 (version) */
        if (code >= 500 && code != 501 && code != 503 && code != 505) dsq_fz_die("status %d for a client's bytes", code);
    }
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    n = dsq_fz_exchange(health, sizeof health - 1, false, resp, sizeof resp, 20);
    if (n < 0 || dsq_fz_status_of(resp) != 200) dsq_fz_die("/health does not answer 200 after the input: %.80s", resp);
    return 0;
}
