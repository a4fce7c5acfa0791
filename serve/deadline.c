/* The request deadline (serve/deadline.h): a table of open connections and
 * a thread that looks at it four times a second. */
#include "serve/deadline.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

enum { DSQ_DEADLINE_SLOTS = 4096 };

struct dsq_deadline_slot {
    int fd;
    bool used, answering, cut;
    double since; /* when the current request phase began */
};

struct dsq_deadline {
    double timeout_s;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t th;
    bool stop;
    long expired;
    dsq_deadline_slot slot[DSQ_DEADLINE_SLOTS];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *watch(void *arg)
{
    dsq_deadline *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop) {
        double t = now_s();
        for (int i = 0; i < DSQ_DEADLINE_SLOTS; i++) {
            dsq_deadline_slot *s = &d->slot[i];
            if (!s->used || s->answering || s->cut || t - s->since < d->timeout_s) continue;
            /* the connection's thread sees the end of its socket and closes it */
            shutdown(s->fd, SHUT_RDWR);
            s->cut = true;
            d->expired++;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&d->wake, &d->lock, &ts);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

dsq_status dsq_deadline_start(double timeout_s, dsq_deadline **out)
{
    *out = NULL;
    dsq_deadline *d = calloc(1, sizeof *d);
    if (!d) return dsq_fail(DSQ_ERR_NOMEM, "serve: out of memory");
    d->timeout_s = timeout_s;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    if (pthread_create(&d->th, NULL, watch, d) != 0) {
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return dsq_fail(DSQ_ERR_IO, "serve: cannot start the request-deadline thread");
    }
    *out = d;
    return DSQ_OK;
}

void dsq_deadline_stop(dsq_deadline *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->th, NULL);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

dsq_deadline_slot *dsq_deadline_open(dsq_deadline *d, int fd)
{
    dsq_deadline_slot *got = NULL;
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < DSQ_DEADLINE_SLOTS && !got; i++) {
        if (d->slot[i].used) continue;
        got = &d->slot[i];
        *got = (dsq_deadline_slot){.fd = fd, .used = true, .since = now_s()};
    }
    pthread_mutex_unlock(&d->lock);
    return got;
}

void dsq_deadline_answering(dsq_deadline *d, dsq_deadline_slot *s)
{
    if (!s) return;
    pthread_mutex_lock(&d->lock);
    s->answering = true;
    pthread_mutex_unlock(&d->lock);
}

void dsq_deadline_reading(dsq_deadline *d, dsq_deadline_slot *s)
{
    if (!s) return;
    pthread_mutex_lock(&d->lock);
    s->answering = false;
    s->since = now_s();
    pthread_mutex_unlock(&d->lock);
}

void dsq_deadline_close(dsq_deadline *d, dsq_deadline_slot *s)
{
    if (!s) return;
    pthread_mutex_lock(&d->lock);
    s->used = false;
    pthread_mutex_unlock(&d->lock);
}

long dsq_deadline_expired(const dsq_deadline *d)
{
    dsq_deadline *m = (dsq_deadline *)d;
    pthread_mutex_lock(&m->lock);
    long n = m->expired;
    pthread_mutex_unlock(&m->lock);
    return n;
}
