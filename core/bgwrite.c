#include "core/bgwrite.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dsq_bgwrite {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled on every change of pending or quit */
    dsq_bgwrite_fn fn;
    void *user;
    const void *buf;
    uint64_t n;
    bool pending, quit;
    dsq_status st; /* the first failure; later writes are skipped */
    char msg[1024]; /* the failure's message, as long as status.c keeps them */
};

static void *writer_main(void *arg)
{
    dsq_bgwrite *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->pending && !b->quit) pthread_cond_wait(&b->cv, &b->mu);
        if (!b->pending) break;
        const void *buf = b->buf;
        uint64_t n = b->n;
        bool failed = b->st != DSQ_OK;
        pthread_mutex_unlock(&b->mu);
        dsq_status st = failed ? DSQ_OK : b->fn(b->user, buf, n);
        pthread_mutex_lock(&b->mu);
        if (st != DSQ_OK) {
            b->st = st;
            snprintf(b->msg, sizeof b->msg, "%s", dsq_errmsg());
        }
        b->pending = false;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

dsq_status dsq_bgwrite_start(dsq_bgwrite **out, dsq_bgwrite_fn fn, void *user)
{
    *out = NULL;
    dsq_bgwrite *b = calloc(1, sizeof *b);
    if (!b) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for the writer thread");
    b->fn = fn;
    b->user = user;
    if (pthread_mutex_init(&b->mu, NULL)) {
        free(b);
        return dsq_fail(DSQ_ERR_NOMEM, "cannot create the writer thread's lock");
    }
    if (pthread_cond_init(&b->cv, NULL)) {
        pthread_mutex_destroy(&b->mu);
        free(b);
        return dsq_fail(DSQ_ERR_NOMEM, "cannot create the writer thread's condition");
    }
    /* A thread fails to start for want of memory or a thread slot (EAGAIN). */
    if (pthread_create(&b->thread, NULL, writer_main, b)) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return dsq_fail(DSQ_ERR_NOMEM, "cannot start the writer thread: out of resources");
    }
    *out = b;
    return DSQ_OK;
}

/* With the lock held: until nothing is pending; then the recorded status. */
static dsq_status drain_locked(dsq_bgwrite *b)
{
    while (b->pending) pthread_cond_wait(&b->cv, &b->mu);
    return b->st;
}

static dsq_status reraise(const dsq_bgwrite *b, dsq_status st)
{
    return st == DSQ_OK ? DSQ_OK : dsq_fail(st, "%s", b->msg);
}

dsq_status dsq_bgwrite_submit(dsq_bgwrite *b, const void *buf, uint64_t n)
{
    pthread_mutex_lock(&b->mu);
    dsq_status st = drain_locked(b);
    if (st == DSQ_OK) {
        b->buf = buf;
        b->n = n;
        b->pending = true;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return reraise(b, st);
}

dsq_status dsq_bgwrite_wait(dsq_bgwrite *b)
{
    pthread_mutex_lock(&b->mu);
    dsq_status st = drain_locked(b);
    pthread_mutex_unlock(&b->mu);
    return reraise(b, st);
}

void dsq_bgwrite_stop(dsq_bgwrite *b)
{
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    drain_locked(b);
    b->quit = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}
