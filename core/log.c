#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static dsq_log_level g_level = DSQ_LOG_INFO;
static dsq_log_sink g_sink;
static void *g_sink_user;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const g_prefix[] = {"error: ", "warning: ", "", ""};

void dsq_log_set_level(dsq_log_level level) { g_level = level; }
dsq_log_level dsq_log_get_level(void) { return g_level; }

void dsq_log_set_sink(dsq_log_sink sink, void *user)
{
    pthread_mutex_lock(&g_lock);
    g_sink = sink;
    g_sink_user = user;
    pthread_mutex_unlock(&g_lock);
}

void dsq_log(dsq_log_level level, const char *fmt, ...)
{
    if (level > g_level) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_lock);
    if (g_sink)
        g_sink(level, buf, g_sink_user);
    else
        fprintf(stderr, "dsquant: %s%s\n", g_prefix[level], buf);
    pthread_mutex_unlock(&g_lock);
}
