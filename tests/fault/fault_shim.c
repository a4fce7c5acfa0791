/* An LD_PRELOAD library that makes file I/O fail the ways disks and
 * network file systems do, for tests/test_fault.c. Driven by the
 * environment of the process it is loaded into:
 *
 *   DSQ_FAULT_WRITE_LIMIT=N   regular files take N bytes in all, then every
 *                             write fails with ENOSPC (the write that
 *                             crosses N is cut short first): a disk that
 *                             fills up during the job.
 *   DSQ_FAULT_COUNT=PATH      at exit, the bytes written to regular files
 *                             go to PATH (to place the limits above).
 *   DSQ_FAULT_READ=short      read() of a regular file returns at most a
 *                             few bytes per call (network file systems).
 *   DSQ_FAULT_READ=eio:N      read() of regular files fails with EIO once
 *                             N bytes have been read.
 *   DSQ_FAULT_MMAP=eio        mmap of a file fails (EIO): an input that
 *                             cannot be mapped.
 *   DSQ_FAULT_TRUNCATE=PATH   right after PATH is mapped, it is cut to half
 *                             its size: an input truncated while mapped (the
 *                             header still reads; the second half's pages
 *                             are gone, and touching them raises SIGBUS).
 *   DSQ_FAULT_WRITE_DELAY_US=U every write sleeps U microseconds first (so
 *                             a test can kill a long write at any point).
 *
 * Only descriptors of regular files are touched (never stdout, stderr,
 * pipes or sockets). Test code, not the product: it is built beside the
 * tests and loaded by them alone. */
#include <stdbool.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static atomic_ullong g_written, g_read;
static atomic_int g_truncated;

static bool regular(int fd)
{
    struct stat st;
    return fd > 2 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static long long env_ll(const char *name, long long dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoll(v) : dflt;
}

/* After a successful mapping of fd: truncates it when it is DSQ_FAULT_TRUNCATE's file. */
static void maybe_truncate(int fd)
{
    const char *path = getenv("DSQ_FAULT_TRUNCATE");
    struct stat a, b;
    if (!path || atomic_load(&g_truncated) || fstat(fd, &a) != 0 || stat(path, &b) != 0) return;
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino || atomic_exchange(&g_truncated, 1)) return;
    (void)truncate(path, b.st_size / 2);
}

/* How many of n bytes a write may take now: n, fewer, or -1 (ENOSPC). */
static ssize_t allowance(int fd, size_t n)
{
    if (!regular(fd)) return (ssize_t)n;
    long long us = env_ll("DSQ_FAULT_WRITE_DELAY_US", 0);
    if (us > 0) nanosleep(&(struct timespec){us / 1000000, (us % 1000000) * 1000}, NULL);
    long long limit = env_ll("DSQ_FAULT_WRITE_LIMIT", -1);
    unsigned long long done = atomic_load(&g_written);
    if (limit < 0 || done + n <= (unsigned long long)limit) return (ssize_t)n;
    if (done >= (unsigned long long)limit) {
        errno = ENOSPC;
        return -1;
    }
    return (ssize_t)((unsigned long long)limit - done);
}

static void wrote(int fd, ssize_t w)
{
    if (w > 0 && regular(fd)) atomic_fetch_add(&g_written, (unsigned long long)w);

}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t k = allowance(fd, n);
    if (k < 0) return -1;
    ssize_t w = real(fd, buf, (size_t)k);
    wrote(fd, w);
    return w;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    ssize_t k = allowance(fd, n);
    if (k < 0) return -1;
    ssize_t w = real(fd, buf, (size_t)k, off);
    wrote(fd, w);
    return w;
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    static ssize_t (*real)(int, const struct iovec *, int);
    if (!real) real = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    size_t n = 0;
    for (int i = 0; i < cnt; i++) n += iov[i].iov_len;
    ssize_t k = allowance(fd, n);
    if (k < 0) return -1;
    if ((size_t)k < n) return write(fd, iov[0].iov_base, iov[0].iov_len < (size_t)k ? iov[0].iov_len : (size_t)k);
    ssize_t w = real(fd, iov, cnt);
    wrote(fd, w);
    return w;
}

ssize_t read(int fd, void *buf, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real) real = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    const char *mode = getenv("DSQ_FAULT_READ");
    if (!mode || !regular(fd)) return real(fd, buf, n);
    if (!strcmp(mode, "short") && n > 3) n = 1 + (size_t)(atomic_load(&g_read) % 3);
    if (!strncmp(mode, "eio:", 4) && atomic_load(&g_read) + n > (unsigned long long)atoll(mode + 4)) {
        errno = EIO;
        return -1;
    }
    ssize_t r = real(fd, buf, n);
    if (r > 0) atomic_fetch_add(&g_read, (unsigned long long)r);
    return r;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static void *(*real)(void *, size_t, int, int, int, off_t);
    if (!real) real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    const char *mode = getenv("DSQ_FAULT_MMAP");
    if (mode && !strcmp(mode, "eio") && fd >= 0 && regular(fd)) {
        errno = EIO;
        return MAP_FAILED;
    }
    void *p = real(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && fd >= 0) maybe_truncate(fd);
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}

__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("DSQ_FAULT_COUNT");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%llu\n", (unsigned long long)atomic_load(&g_written));
    fclose(f);
}
