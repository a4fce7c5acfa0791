/* The library's only way to say anything: leveled messages to a sink.
 * Default sink writes "dsquant: message" to stderr; the CLI sets the level
 * from -v / -q. Progress lines use DSQ_LOG_INFO. */
#ifndef DSQ_CORE_LOG_H
#define DSQ_CORE_LOG_H

typedef enum dsq_log_level {
    DSQ_LOG_ERROR = 0,
    DSQ_LOG_WARN = 1,
    DSQ_LOG_INFO = 2,
    DSQ_LOG_DEBUG = 3,
} dsq_log_level;

typedef void (*dsq_log_sink)(dsq_log_level level, const char *msg, void *user);

void dsq_log_set_level(dsq_log_level level);
dsq_log_level dsq_log_get_level(void);
/* NULL restores the default stderr sink. */
void dsq_log_set_sink(dsq_log_sink sink, void *user);
void dsq_log(dsq_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DSQ_LOGE(...) dsq_log(DSQ_LOG_ERROR, __VA_ARGS__)
#define DSQ_LOGW(...) dsq_log(DSQ_LOG_WARN, __VA_ARGS__)
#define DSQ_LOGI(...) dsq_log(DSQ_LOG_INFO, __VA_ARGS__)
#define DSQ_LOGD(...) dsq_log(DSQ_LOG_DEBUG, __VA_ARGS__)

#endif
