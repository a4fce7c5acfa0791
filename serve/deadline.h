/* Private to serve/: the request deadline. A client has --request-timeout
 * seconds from opening a connection (or from its last answer, on a kept-
 * alive one) to deliver a whole request; one that dribbles its headers or
 * body slower than that is cut off (its socket shut down), so slow clients
 * cannot hold the connection threads. While a request is being answered
 * no deadline runs: a long non-streamed generation is silent legitimately. */
#ifndef DSQ_SERVE_DEADLINE_H
#define DSQ_SERVE_DEADLINE_H

#include "core/status.h"

typedef struct dsq_deadline dsq_deadline;
typedef struct dsq_deadline_slot dsq_deadline_slot;

/* Starts the watchdog thread. */
dsq_status dsq_deadline_start(double timeout_s, dsq_deadline **out);
/* Stops and frees it (NULL is a no-op); slots still open are forgotten. */
void dsq_deadline_stop(dsq_deadline *d);

/* A connection on socket fd opened: its clock starts. NULL when the table
 * is full (that connection then has only libmicrohttpd's idle timeout). */
dsq_deadline_slot *dsq_deadline_open(dsq_deadline *d, int fd);
/* Its request arrived whole: no deadline while it is answered. */
void dsq_deadline_answering(dsq_deadline *d, dsq_deadline_slot *s);
/* Its answer is done: the clock restarts for the next request. */
void dsq_deadline_reading(dsq_deadline *d, dsq_deadline_slot *s);
/* The connection closed. */
void dsq_deadline_close(dsq_deadline *d, dsq_deadline_slot *s);
/* How many connections the deadline has cut off so far. */
long dsq_deadline_expired(const dsq_deadline *d);

#endif
