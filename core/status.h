/* Status codes and the error message that goes with them.
 *
 * Every library function that can fail returns a dsq_status. On failure it
 * records one line (naming the file, tensor or field at fault) with dsq_fail();
 * the caller reads it with dsq_errmsg(). The message is thread-local, like errno,
 * so worker threads cannot clobber each other's reports. The library never
 * prints and never exits: the CLI turns a status into one line and exit 1. */
#ifndef DSQ_CORE_STATUS_H
#define DSQ_CORE_STATUS_H

#include <stdbool.h>

typedef enum dsq_status {
    DSQ_OK = 0,
    DSQ_ERR_IO,          /* open/read/write/fsync/rename failed (errno text included) */
    DSQ_ERR_NOMEM,       /* allocation failed */
    DSQ_ERR_FORMAT,      /* a file is malformed or hostile */
    DSQ_ERR_UNSUPPORTED, /* well-formed, but a type/architecture/option we do not handle */
    DSQ_ERR_ARG,         /* a caller or user argument is invalid */
    DSQ_ERR_NOT_FOUND,   /* a file, tensor or key that must exist does not */
    DSQ_ERR_NUMERIC,     /* NaN/Inf or another numeric failure in data */
    DSQ_ERR_EXISTS,      /* the output exists and may not be replaced */
    DSQ_ERR_INTERNAL,    /* a bug: an invariant did not hold */
    /* Not an error: a hook (forward-pass, token or chunk callback) returns it to
     * end a pass early. It records no message; the loop that calls the hook
     * stops and returns it unchanged (DSQ_TRY passes it through like any other
     * code), and the caller that installed the hook, having asked for the stop,
     * treats it as success. It is last so the error codes keep their values. */
    DSQ_STOP,
    DSQ_STATUS_COUNT
} dsq_status;

/* Short stable name of a code, e.g. "format error". */
const char *dsq_status_name(dsq_status s);

/* Records a message (printf-style) for the calling thread and returns code,
 * so call sites read: `return dsq_fail(DSQ_ERR_FORMAT, "%s: bad magic", path);` */
dsq_status dsq_fail(dsq_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like dsq_fail, appending ": strerror(errno)". */
dsq_status dsq_fail_errno(dsq_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with more context ("tensor x: " + old message)
 * and returns code unchanged. */
dsq_status dsq_fail_context(dsq_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last message ("" if none). Valid until the next dsq_fail. */
const char *dsq_errmsg(void);
void dsq_clear_error(void);

/* True for the codes that are failures: everything but DSQ_OK and DSQ_STOP. */
static inline bool dsq_is_error(dsq_status s) { return s != DSQ_OK && s != DSQ_STOP; }

/* Propagate a failure (or a DSQ_STOP) without adding context. */
#define DSQ_TRY(expr)                                                                              \
    do {                                                                                           \
        dsq_status dsq_try_s_ = (expr);                                                            \
        if (dsq_try_s_ != DSQ_OK) return dsq_try_s_;                                               \
    } while (0)

/* Propagate a failure, prefixing its message with printf-style context
 * (dsq_fail_context), e.g. DSQ_TRY_CTX(load(t), "tensor %s", name).
 * DSQ_STOP passes through untouched: it carries no message to prefix. */
#define DSQ_TRY_CTX(expr, ...)                                                                     \
    do {                                                                                           \
        dsq_status dsq_try_s_ = (expr);                                                            \
        if (dsq_try_s_ == DSQ_STOP) return dsq_try_s_;                                             \
        if (dsq_try_s_ != DSQ_OK) return dsq_fail_context(dsq_try_s_, __VA_ARGS__);                \
    } while (0)

#endif
