/* Private to tests/fuzz/: the in-process server of the HTTP harnesses. */
#ifndef DSQ_TESTS_FUZZ_UTIL_SERVER_H
#define DSQ_TESTS_FUZZ_UTIL_SERVER_H

#include <stdbool.h>
#include <stddef.h>

/* Starts `dsquant serve` on 127.0.0.1 (a free port) over the tiny model,
 * stopped at exit. Exits the process when it cannot. */
void dsq_fz_server_start(void);

/* Sends req on a new connection (then shuts down the writing half when
 * half_close), reads until the server closes or timeout_s passes. The
 * response (cut to cap - 1 bytes, NUL-terminated) is in resp. Returns its
 * length, or -1 when the server had not closed within timeout_s. */
int dsq_fz_exchange(const void *req, size_t n, bool half_close, char *resp, size_t cap, double timeout_s);

/* The status code of an HTTP response, -1 when it does not start like one. */
int dsq_fz_status_of(const char *resp);

#endif
