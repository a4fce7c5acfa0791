#include "core/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { DSQ_ERRMSG_CAP = 1024 };
static _Thread_local char g_errmsg[DSQ_ERRMSG_CAP];

static const char *const g_names[DSQ_STATUS_COUNT] = {
    [DSQ_OK] = "ok",
    [DSQ_ERR_IO] = "I/O error",
    [DSQ_ERR_NOMEM] = "out of memory",
    [DSQ_ERR_FORMAT] = "format error",
    [DSQ_ERR_UNSUPPORTED] = "unsupported",
    [DSQ_ERR_ARG] = "invalid argument",
    [DSQ_ERR_NOT_FOUND] = "not found",
    [DSQ_ERR_NUMERIC] = "numeric error",
    [DSQ_ERR_EXISTS] = "already exists",
    [DSQ_ERR_INTERNAL] = "internal error",
    [DSQ_STOP] = "stopped",
};

/* A message names what a file or a request holds (a tensor name, a key, a
 * role), and those bytes are hostile: a newline would split the one-line
 * error, an escape sequence would reach the user's terminal. Control bytes
 * become \n, \t, \r or \xNN; the rest (UTF-8 included) is kept. */
static void escape_controls(void)
{
    char out[DSQ_ERRMSG_CAP];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)g_errmsg; *p && o + 1 < sizeof out; p++) {
        if (*p >= 0x20 && *p != 0x7f) {
            out[o++] = (char)*p;
            continue;
        }
        char esc[5];
        int n = *p == '\n' ? snprintf(esc, sizeof esc, "\\n")
                : *p == '\t' ? snprintf(esc, sizeof esc, "\\t")
                : *p == '\r' ? snprintf(esc, sizeof esc, "\\r")
                              : snprintf(esc, sizeof esc, "\\x%02x", *p);
        if (o + (size_t)n + 1 > sizeof out) break;
        memcpy(out + o, esc, (size_t)n);
        o += (size_t)n;
    }
    out[o] = '\0';
    memcpy(g_errmsg, out, o + 1);
}

const char *dsq_status_name(dsq_status s)
{
    if ((unsigned)s >= DSQ_STATUS_COUNT) return "unknown status";
    return g_names[s];
}

dsq_status dsq_fail(dsq_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    escape_controls();
    return code;
}

dsq_status dsq_fail_errno(dsq_status code, const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof g_errmsg)
        snprintf(g_errmsg + n, sizeof g_errmsg - (size_t)n, ": %s", strerror(err));
    escape_controls();
    return code;
}

dsq_status dsq_fail_context(dsq_status code, const char *fmt, ...)
{
    char old[DSQ_ERRMSG_CAP];
    memcpy(old, g_errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    /* Append ": <old message>", truncating silently: the head of a message matters most. */
    size_t used = n < 0 ? 0 : ((size_t)n < sizeof g_errmsg ? (size_t)n : sizeof g_errmsg - 1);
    const char *parts[2] = {": ", old};
    for (int k = 0; k < 2; k++) {
        size_t len = strnlen(parts[k], sizeof old);
        size_t room = sizeof g_errmsg - 1 - used;
        if (len > room) len = room;
        memcpy(g_errmsg + used, parts[k], len);
        used += len;
    }
    g_errmsg[used] = '\0';
    escape_controls();
    return code;
}

const char *dsq_errmsg(void) { return g_errmsg; }

void dsq_clear_error(void) { g_errmsg[0] = '\0'; }
