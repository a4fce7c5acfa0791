/* Status codes and the error message that goes with them.
 *
 * Every library function that can fail returns a dsq_status. On failure it
 * records one line (naming the file, tensor or field at fault) with dsq_fail();
 * the caller reads it with dsq_errmsg(). The message is thread-local, like errno,
 * so worker threads cannot clobber each other's reports. The library never
 * prints and never exits: the CLI turns a status into one line and exit 1. */
#ifndef DSQ_CORE_STATUS_H
#define DSQ_CORE_STATUS_H

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

/* Propagate a failure without adding context. */
#define DSQ_TRY(expr)                                                                              \
    do {                                                                                           \
        dsq_status dsq_try_s_ = (expr);                                                            \
        if (dsq_try_s_ != DSQ_OK) return dsq_try_s_;                                               \
    } while (0)

#endif
