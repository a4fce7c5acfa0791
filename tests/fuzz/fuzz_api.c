/* Every JSON request body of the server's API: byte 0 picks the endpoint,
 * the rest is the body, sent as a well-formed request so that the fuzzer's
 * effort goes into the JSON. Every answer must be complete and carry a
 * status the API defines for a client's request (2xx, 400, 404, 413, 429),
 * never a 5xx; an error body must be OpenAI's {"error": {...}} shape. */
#include <stdio.h>
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
    static const struct {
        const char *method, *path;
    } ep[] = {
        {"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"}, {"POST", "/tokenize"},
        {"POST", "/detokenize"},     {"GET", "/v1/models"},            {"GET", "/tokenizer_info"},
    };
    static char req[(1 << 16) + 512], resp[1 << 20];
    if (size < 1 || size > (1u << 16)) return 0;
    int e = data[0] % 6;
    int h = snprintf(req, 512,
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     ep[e].method, ep[e].path, size - 1);
    memcpy(req + h, data + 1, size - 1);
    int n = dsq_fz_exchange(req, (size_t)h + size - 1, false, resp, sizeof resp, 60);
    if (n < 0) dsq_fz_die("no complete answer within 60 s");
    int code = dsq_fz_status_of(resp);
    if (code < 0) dsq_fz_die("not an HTTP answer: %.80s", resp);
    if (code >= 500 || (code >= 300 && code != 400 && code != 404 && code != 413 && code != 429))
        dsq_fz_die("status %d for %s %s: %.300s", code, ep[e].method, ep[e].path, strstr(resp, "\r\n\r\n"));
    if (code >= 400 && !strstr(resp, "{\"error\":"))
        dsq_fz_die("a %d without an error object: %.300s", code, resp);
    return 0;
}
