#include "core/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- registry of open inputs, so that no output can replace one ---- */

enum { DSQ_MAX_OPEN_INPUTS = 1024 };
static struct {
    dev_t dev;
    ino_t ino;
    const uint8_t *data; /* the mapping, for dsq_mmap_owner */
    size_t size;
    const char *path;
} g_inputs[DSQ_MAX_OPEN_INPUTS];
static int g_n_inputs;
static pthread_mutex_t g_inputs_lock = PTHREAD_MUTEX_INITIALIZER;

static bool inputs_add(const struct stat *st, const dsq_mmap *m)
{
    bool ok = false;
    pthread_mutex_lock(&g_inputs_lock);
    if (g_n_inputs < DSQ_MAX_OPEN_INPUTS) {
        g_inputs[g_n_inputs].dev = st->st_dev;
        g_inputs[g_n_inputs].ino = st->st_ino;
        g_inputs[g_n_inputs].data = m->data;
        g_inputs[g_n_inputs].size = m->size;
        g_inputs[g_n_inputs].path = m->path;
        g_n_inputs++;
        ok = true;
    }
    pthread_mutex_unlock(&g_inputs_lock);
    return ok;
}

static void inputs_remove(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&g_inputs_lock);
    for (int i = 0; i < g_n_inputs; i++) {
        if (g_inputs[i].dev == dev && g_inputs[i].ino == ino) {
            g_inputs[i] = g_inputs[--g_n_inputs];
            break;
        }
    }
    pthread_mutex_unlock(&g_inputs_lock);
}

bool dsq_path_is_open_input(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return false;
    bool found = false;
    pthread_mutex_lock(&g_inputs_lock);
    for (int i = 0; i < g_n_inputs && !found; i++)
        found = g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino;
    pthread_mutex_unlock(&g_inputs_lock);
    return found;
}

const char *dsq_mmap_owner(const void *addr)
{
    /* From a signal handler: never wait for the lock (the faulting thread
     * may hold it); a registry read unlocked is good enough to name a file. */
    bool locked = pthread_mutex_trylock(&g_inputs_lock) == 0;
    const char *path = NULL;
    const uint8_t *a = addr;
    for (int i = 0; i < g_n_inputs && !path; i++)
        if (g_inputs[i].data && a >= g_inputs[i].data && a < g_inputs[i].data + g_inputs[i].size)
            path = g_inputs[i].path;
    if (locked) pthread_mutex_unlock(&g_inputs_lock);
    return path;
}

/* ---- registry of temporaries, removed by dsq_remove_temporaries ---- */

enum { DSQ_MAX_TEMPS = 256 };
static struct {
    const char *path; /* the object's own tmp_path buffer */
    bool dir;
} g_temps[DSQ_MAX_TEMPS];
static int g_n_temps;
static pthread_mutex_t g_temps_lock = PTHREAD_MUTEX_INITIALIZER;

/* Not registering (a full table) only means a fatal signal leaves that temporary behind. */
static void temps_add(const char *path, bool dir)
{
    pthread_mutex_lock(&g_temps_lock);
    if (g_n_temps < DSQ_MAX_TEMPS) {
        g_temps[g_n_temps].path = path;
        g_temps[g_n_temps].dir = dir;
        g_n_temps++;
    }
    pthread_mutex_unlock(&g_temps_lock);
}

static void temps_remove(const char *path)
{
    pthread_mutex_lock(&g_temps_lock);
    for (int i = 0; i < g_n_temps; i++) {
        if (g_temps[i].path == path) {
            g_temps[i] = g_temps[--g_n_temps];
            break;
        }
    }
    pthread_mutex_unlock(&g_temps_lock);
}

/* Empties a flat temporary folder with async-signal-safe calls only
 * (getdents64, unlinkat, rmdir): no opendir, which allocates. */
static void remove_dir_now(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096];
        for (long n; (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
            for (long off = 0; off < n;) {
                struct {
                    uint64_t ino;
                    int64_t off;
                    unsigned short reclen;
                    unsigned char type;
                    char name[];
                } *e = (void *)(buf + off);
                if (strcmp(e->name, ".") && strcmp(e->name, "..")) (void)unlinkat(fd, e->name, 0);
                off += e->reclen;
            }
        }
        close(fd);
    }
    (void)rmdir(path);
}

void dsq_remove_temporaries(void)
{
    bool locked = pthread_mutex_trylock(&g_temps_lock) == 0;
    for (int i = 0; i < g_n_temps; i++) {
        if (g_temps[i].dir) remove_dir_now(g_temps[i].path);
        else (void)unlink(g_temps[i].path);
    }
    if (locked) pthread_mutex_unlock(&g_temps_lock);
}

/* ---- inputs ---- */

dsq_status dsq_mmap_open(const char *path, dsq_mmap *m)
{
    memset(m, 0, sizeof *m);
    /* O_NONBLOCK: opening a FIFO must not hang; non-regular files are refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dsq_fail_errno(errno == ENOENT ? DSQ_ERR_NOT_FOUND : DSQ_ERR_IO, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dsq_fail(DSQ_ERR_IO, "%s: not a regular file", path);
    }
    m->path = strdup(path);
    if (!m->path) {
        close(fd);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            free(m->path);
            m->path = NULL;
            return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot map", path);
        }
        m->data = p;
    }
    close(fd);
    m->dev = (uint64_t)st.st_dev;
    m->ino = (uint64_t)st.st_ino;
    if (!inputs_add(&st, m)) {
        dsq_mmap_close(m);
        return dsq_fail(DSQ_ERR_IO, "%s: more than %d inputs open at once", path, DSQ_MAX_OPEN_INPUTS);
    }
    return DSQ_OK;
}

void dsq_mmap_close(dsq_mmap *m)
{
    if (!m || !m->path) return;
    inputs_remove((dev_t)m->dev, (ino_t)m->ino);
    if (m->data) munmap((void *)m->data, m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

dsq_status dsq_read_file(const char *path, size_t max_size, char **out, size_t *out_len)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang us */
    if (fd < 0) return dsq_fail_errno(errno == ENOENT ? DSQ_ERR_NOT_FOUND : DSQ_ERR_IO, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dsq_fail(DSQ_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_size) {
        close(fd);
        return dsq_fail(DSQ_ERR_FORMAT, "%s: file is %lld bytes, more than the %zu allowed", path,
                        (long long)st.st_size, max_size);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    }
    /* read() may return fewer bytes than asked (network file systems, signals) */
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            dsq_status s = r < 0 ? dsq_fail_errno(DSQ_ERR_IO, "%s: read failed", path)
                                 : dsq_fail(DSQ_ERR_IO, "%s: the file shrank while it was read (%zu of %zu bytes)",
                                            path, got, n);
            free(buf);
            close(fd);
            return s;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (out_len) *out_len = n;
    return DSQ_OK;
}

/* ---- paths ---- */

bool dsq_path_join_fits(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = (dir && dir[0]) ? snprintf(buf, cap, "%s/%s", dir, name) : snprintf(buf, cap, "%s", name);
    return n >= 0 && (size_t)n < cap;
}

dsq_status dsq_path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    if (!dsq_path_join_fits(buf, cap, dir, name)) return dsq_fail(DSQ_ERR_ARG, "%s/%s: path too long", dir, name);
    return DSQ_OK;
}

bool dsq_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool dsq_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Splits path into its folder ("." when none) and base name. */
static dsq_status split_path(const char *path, char *dir, char *base, size_t cap)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "out/" names "out" */
    if (len == 0 || len >= cap) return dsq_fail(DSQ_ERR_ARG, "%s: invalid output path", path);
    const char *slash = NULL;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/') slash = path + i;
    if (!slash) {
        strcpy(dir, ".");
        memcpy(base, path, len);
        base[len] = '\0';
    } else {
        size_t dl = (size_t)(slash - path);
        if (dl == 0) dl = 1; /* "/name" */
        memcpy(dir, path, dl);
        dir[dl] = '\0';
        size_t bl = len - (size_t)(slash - path) - 1;
        memcpy(base, slash + 1, bl);
        base[bl] = '\0';
    }
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        return dsq_fail(DSQ_ERR_ARG, "%s: invalid output path", path);
    return DSQ_OK;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* ---- atomic output file ---- */

enum { DSQ_OUT_BUF = 4 << 20, DSQ_DIRECT_BUF = 64 << 20, DSQ_DIRECT_ALIGN = 4096 };

struct dsq_outfile {
    int fd;
    char final_path[PATH_MAX];
    char tmp_path[PATH_MAX];
    char dir[PATH_MAX];
    uint8_t *buf;
    size_t buf_len;
    uint64_t pos;  /* logical size written so far */
    uint64_t disk; /* bytes handed to the file descriptor */
    bool direct;   /* dsq_outfile_set_direct: whole aligned blocks go out with O_DIRECT */
    bool fd_direct; /* O_DIRECT is set on fd now */
    /* direct mode writes a full buffer from a thread of its own while the
     * caller fills the other one (the fd is not touched until it is joined) */
    uint8_t *spare;
    pthread_t th;
    bool in_flight;
    struct dsq_direct_job {
        int fd;
        const uint8_t *p;
        size_t n;
        int err;       /* errno of a failed write, 0 */
        bool refused;  /* O_DIRECT refused (EINVAL): written through the page cache */
    } job;
};

dsq_status dsq_outfile_open(const char *path, bool overwrite, dsq_outfile **out)
{
    *out = NULL;
    size_t plen = strlen(path);
    if (plen == 0 || path[plen - 1] == '/') return dsq_fail(DSQ_ERR_ARG, "%s: output file path names a folder", path);
    if (dsq_path_is_open_input(path))
        return dsq_fail(DSQ_ERR_ARG, "%s: output would overwrite an input file", path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return dsq_fail(DSQ_ERR_EXISTS, "%s: output path is a folder", path);
        if (!overwrite) return dsq_fail(DSQ_ERR_EXISTS, "%s: output exists (use --force to replace it)", path);
    }
    dsq_outfile *f = calloc(1, sizeof *f);
    if (!f) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    char base[PATH_MAX];
    dsq_status s = split_path(path, f->dir, base, sizeof base);
    if (s != DSQ_OK) {
        free(f);
        return s;
    }
    if (!dsq_is_dir(f->dir)) {
        s = dsq_fail(DSQ_ERR_NOT_FOUND, "%s: output folder %s does not exist", path, f->dir);
        free(f);
        return s;
    }
    snprintf(f->final_path, sizeof f->final_path, "%s", path);
    int n = snprintf(f->tmp_path, sizeof f->tmp_path, "%s/.%s.tmp-XXXXXX", f->dir, base);
    if (n < 0 || (size_t)n >= sizeof f->tmp_path) {
        free(f);
        return dsq_fail(DSQ_ERR_ARG, "%s: path too long", path);
    }
    f->fd = mkostemp(f->tmp_path, O_CLOEXEC);
    if (f->fd < 0) {
        dsq_status e = dsq_fail_errno(DSQ_ERR_IO, "%s: cannot create a temporary file in %s", path, f->dir);
        free(f);
        return e;
    }
    (void)fchmod(f->fd, 0644);
    temps_add(f->tmp_path, false);
    *out = f;
    return DSQ_OK;
}

static dsq_status write_all(dsq_outfile *f, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return dsq_fail_errno(DSQ_ERR_IO, "%s: write failed", f->final_path);
        }
        p += w;
        n -= (size_t)w;
    }
    return DSQ_OK;
}

static dsq_status write_all(dsq_outfile *f, const uint8_t *p, size_t n);

/* O_DIRECT on fd or off; false when the file system refuses it (tmpfs). */
static bool set_fd_direct(dsq_outfile *f, bool on)
{
    if (f->fd_direct == on) return true;
    int fl = fcntl(f->fd, F_GETFL);
    if (fl < 0 || fcntl(f->fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) != 0) return false;
    f->fd_direct = on;
    return true;
}

static void *direct_job_run(void *arg)
{
    struct dsq_direct_job *j = arg;
    const uint8_t *p = j->p;
    size_t n = j->n;
    while (n > 0) {
        ssize_t w = write(j->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && !j->refused) { /* the file system has no O_DIRECT after all */
            int fl = fcntl(j->fd, F_GETFL);
            if (fl >= 0 && fcntl(j->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                j->refused = true;
                continue;
            }
        }
        if (w < 0) {
            j->err = errno;
            return NULL;
        }
        p += w;
        n -= (size_t)w;
    }
    return NULL;
}

/* The finished job's outcome. */
static dsq_status job_result(dsq_outfile *f)
{
    if (f->job.refused) f->direct = f->fd_direct = false;
    if (f->job.err) {
        errno = f->job.err;
        return dsq_fail_errno(DSQ_ERR_IO, "%s: write failed", f->final_path);
    }
    return DSQ_OK;
}

/* Waits for the write in flight; its failure is reported here. */
static dsq_status join_job(dsq_outfile *f)
{
    if (!f->in_flight) return DSQ_OK;
    pthread_join(f->th, NULL);
    f->in_flight = false;
    return job_result(f);
}

/* The same without a word: for a file being dropped after another failure. */
static void join_quiet(dsq_outfile *f)
{
    if (f->in_flight) pthread_join(f->th, NULL);
    f->in_flight = false;
}

/* The whole aligned blocks at the start of the buffer go out with O_DIRECT
 * from a thread while the buffers swap; returns how many bytes left the
 * buffer. A file system that refuses O_DIRECT turns direct mode off. */
static dsq_status flush_direct(dsq_outfile *f, size_t *done)
{
    *done = 0;
    size_t n = f->buf_len & ~(size_t)(DSQ_DIRECT_ALIGN - 1);
    if (n == 0 || f->disk % DSQ_DIRECT_ALIGN) return DSQ_OK;
    DSQ_TRY(join_job(f));
    if (!f->direct) return DSQ_OK;
    if (!f->spare && !(f->spare = aligned_alloc(DSQ_DIRECT_ALIGN, DSQ_DIRECT_BUF)))
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", f->final_path);
    if (!set_fd_direct(f, true)) {
        f->direct = false;
        return DSQ_OK;
    }
    f->job = (struct dsq_direct_job){f->fd, f->buf, n, 0, false};
    if (pthread_create(&f->th, NULL, direct_job_run, &f->job) == 0) {
        f->in_flight = true;
    } else {
        direct_job_run(&f->job); /* no thread: the same write, here */
        DSQ_TRY(job_result(f));
    }
    /* the caller goes on in the other buffer; the rest of this one moves there */
    uint8_t *busy = f->buf;
    f->buf = f->spare, f->spare = busy;
    memcpy(f->buf, busy + n, f->buf_len - n);
    f->buf_len -= n;
    f->disk += n;
    *done = n;
    return DSQ_OK;
}

/* Bytes from the front of the buffer through the page cache (the rest moves up). */
static dsq_status flush_front(dsq_outfile *f, size_t k)
{
    DSQ_TRY(join_job(f));
    if (f->fd_direct && !set_fd_direct(f, false))
        return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot leave direct I/O", f->final_path);
    DSQ_TRY(write_all(f, f->buf, k));
    f->disk += k;
    memmove(f->buf, f->buf + k, f->buf_len - k);
    f->buf_len -= k;
    return DSQ_OK;
}

/* Everything buffered to the file; all: the last partial block too (through
 * the page cache) and the write in flight finished, else what is left stays
 * buffered for the next direct write. An unaligned file offset is first
 * brought to a block boundary. */
static dsq_status flush_some(dsq_outfile *f, bool all)
{
    if (f->buf_len && f->direct && f->disk % DSQ_DIRECT_ALIGN) {
        size_t k = DSQ_DIRECT_ALIGN - (size_t)(f->disk % DSQ_DIRECT_ALIGN);
        DSQ_TRY(flush_front(f, k < f->buf_len ? k : f->buf_len));
    }
    size_t done = 0;
    if (f->buf_len && f->direct) DSQ_TRY(flush_direct(f, &done));
    if (f->buf_len && (all || !f->direct)) DSQ_TRY(flush_front(f, f->buf_len));
    if (all) DSQ_TRY(join_job(f));
    /* pwrite and the next buffered writes need the page cache path back */
    if (all && f->fd_direct && !set_fd_direct(f, false))
        return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot leave direct I/O", f->final_path);
    return DSQ_OK;
}

static dsq_status flush_buf(dsq_outfile *f) { return flush_some(f, true); }

void dsq_outfile_set_direct(dsq_outfile *f, bool on) { f->direct = on; }

/* Direct mode: every byte passes through the aligned buffer. */
static dsq_status write_direct(dsq_outfile *f, const uint8_t *p, size_t n)
{
    if (!f->buf && !(f->buf = aligned_alloc(DSQ_DIRECT_ALIGN, DSQ_DIRECT_BUF)))
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", f->final_path);
    f->pos += n;
    while (n > 0) {
        size_t k = DSQ_DIRECT_BUF - f->buf_len < n ? DSQ_DIRECT_BUF - f->buf_len : n;
        memcpy(f->buf + f->buf_len, p, k);
        f->buf_len += k, p += k, n -= k;
        if (f->buf_len == DSQ_DIRECT_BUF) DSQ_TRY(flush_some(f, false));
    }
    return DSQ_OK;
}

dsq_status dsq_outfile_reserve(dsq_outfile *f, size_t min, size_t max, uint8_t **p, size_t *got)
{
    size_t cap = f->direct ? DSQ_DIRECT_BUF : DSQ_OUT_BUF;
    *p = NULL, *got = 0;
    if (min > cap - DSQ_DIRECT_ALIGN) return DSQ_OK; /* too big for the buffer: the caller writes */
    if (!f->buf) {
        f->buf = f->direct ? aligned_alloc(DSQ_DIRECT_ALIGN, DSQ_DIRECT_BUF) : malloc(DSQ_OUT_BUF);
        if (!f->buf) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", f->final_path);
    }
    if (cap - f->buf_len < min) DSQ_TRY(flush_some(f, false));
    if (cap - f->buf_len < min) return DSQ_OK; /* direct mode switched off on the way */
    *p = f->buf + f->buf_len;
    *got = cap - f->buf_len < max ? cap - f->buf_len : max;
    return DSQ_OK;
}

dsq_status dsq_outfile_produced(dsq_outfile *f, size_t n)
{
    size_t cap = f->direct ? DSQ_DIRECT_BUF : DSQ_OUT_BUF;
    f->buf_len += n;
    f->pos += n;
    return f->buf_len >= cap ? flush_some(f, false) : DSQ_OK;
}

dsq_status dsq_outfile_write(dsq_outfile *f, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    if (f->direct) return write_direct(f, p, n);
    if (!f->buf && n < DSQ_OUT_BUF) {
        f->buf = malloc(DSQ_OUT_BUF);
        if (!f->buf) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", f->final_path);
    }
    f->pos += n;
    if (f->buf && f->buf_len + n <= DSQ_OUT_BUF) {
        if (n) memcpy(f->buf + f->buf_len, p, n);
        f->buf_len += n;
        return DSQ_OK;
    }
    DSQ_TRY(flush_buf(f));
    if (n >= DSQ_OUT_BUF || !f->buf) { /* big tensors go straight through */
        f->disk += n;
        return write_all(f, p, n);
    }
    memcpy(f->buf, p, n);
    f->buf_len = n;
    return DSQ_OK;
}

dsq_status dsq_outfile_write_zeros(dsq_outfile *f, size_t n)
{
    static const uint8_t zeros[4096];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        DSQ_TRY(dsq_outfile_write(f, zeros, k));
        n -= k;
    }
    return DSQ_OK;
}

dsq_status dsq_outfile_align(dsq_outfile *f, size_t align)
{
    if (align == 0) return dsq_fail(DSQ_ERR_ARG, "%s: alignment 0", f->final_path);
    size_t rem = (size_t)(f->pos % align);
    return rem ? dsq_outfile_write_zeros(f, align - rem) : DSQ_OK;
}

uint64_t dsq_outfile_tell(const dsq_outfile *f) { return f->pos; }

dsq_status dsq_outfile_suspend(dsq_outfile *f)
{
    dsq_status s = flush_buf(f);
    free(f->buf);
    f->buf = NULL;
    return s;
}
const char *dsq_outfile_path(const dsq_outfile *f) { return f->final_path; }

dsq_status dsq_outfile_pwrite(dsq_outfile *f, const void *buf, size_t n, uint64_t offset)
{
    if (n > f->pos || offset > f->pos - n)
        return dsq_fail(DSQ_ERR_INTERNAL, "%s: pwrite past the end", f->final_path);
    DSQ_TRY(flush_buf(f));
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = pwrite(f->fd, p, n, (off_t)offset);
        if (w < 0) {
            if (errno == EINTR) continue;
            return dsq_fail_errno(DSQ_ERR_IO, "%s: write failed", f->final_path);
        }
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return DSQ_OK;
}

static void outfile_free(dsq_outfile *f)
{
    temps_remove(f->tmp_path);
    join_quiet(f);
    free(f->spare);
    if (f->fd >= 0) close(f->fd);
    free(f->buf);
    free(f);
}

dsq_status dsq_outfile_commit(dsq_outfile *f)
{
    dsq_status s = flush_buf(f);
    join_quiet(f); /* after a failed flush, before the fd goes */
    if (s == DSQ_OK && fsync(f->fd) != 0) s = dsq_fail_errno(DSQ_ERR_IO, "%s: fsync failed", f->final_path);
    if (close(f->fd) != 0 && s == DSQ_OK) s = dsq_fail_errno(DSQ_ERR_IO, "%s: close failed", f->final_path);
    f->fd = -1;
    if (s == DSQ_OK && dsq_path_is_open_input(f->final_path))
        s = dsq_fail(DSQ_ERR_ARG, "%s: output would overwrite an input file", f->final_path);
    if (s == DSQ_OK && rename(f->tmp_path, f->final_path) != 0)
        s = dsq_fail_errno(DSQ_ERR_IO, "%s: rename from %s failed", f->final_path, f->tmp_path);
    if (s != DSQ_OK) {
        unlink(f->tmp_path);
    } else {
        fsync_dir(f->dir);
    }
    outfile_free(f);
    return s;
}

void dsq_outfile_abort(dsq_outfile *f)
{
    if (!f) return;
    join_quiet(f); /* before the fd goes */
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    unlink(f->tmp_path);
    outfile_free(f);
}

/* ---- atomic output folder ---- */

struct dsq_outdir {
    char final_path[PATH_MAX];
    char tmp_path[PATH_MAX];
    char parent[PATH_MAX];
    bool overwrite;
};

dsq_status dsq_outdir_open(const char *path, bool overwrite, dsq_outdir **out)
{
    *out = NULL;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return dsq_fail(DSQ_ERR_EXISTS, "%s: output exists and is not a folder", path);
        if (!overwrite) return dsq_fail(DSQ_ERR_EXISTS, "%s: output folder exists (use --force to replace it)", path);
    }
    dsq_outdir *d = calloc(1, sizeof *d);
    if (!d) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    char base[PATH_MAX];
    dsq_status s = split_path(path, d->parent, base, sizeof base);
    if (s != DSQ_OK) {
        free(d);
        return s;
    }
    if (!dsq_is_dir(d->parent)) {
        s = dsq_fail(DSQ_ERR_NOT_FOUND, "%s: parent folder %s does not exist", path, d->parent);
        free(d);
        return s;
    }
    snprintf(d->final_path, sizeof d->final_path, "%s", path);
    int n = snprintf(d->tmp_path, sizeof d->tmp_path, "%s/.%s.tmp-XXXXXX", d->parent, base);
    if (n < 0 || (size_t)n >= sizeof d->tmp_path) {
        free(d);
        return dsq_fail(DSQ_ERR_ARG, "%s: path too long", path);
    }
    if (!mkdtemp(d->tmp_path)) {
        s = dsq_fail_errno(DSQ_ERR_IO, "%s: cannot create a temporary folder in %s", path, d->parent);
        free(d);
        return s;
    }
    (void)chmod(d->tmp_path, 0755);
    temps_add(d->tmp_path, true);
    d->overwrite = overwrite;
    *out = d;
    return DSQ_OK;
}

const char *dsq_outdir_tmp_path(const dsq_outdir *d) { return d->tmp_path; }

dsq_status dsq_outdir_file(const dsq_outdir *d, const char *name, char *buf, size_t cap)
{
    return dsq_path_join(buf, cap, d->tmp_path, name);
}

dsq_status dsq_outdir_commit(dsq_outdir *d)
{
    dsq_status s = DSQ_OK;
    fsync_dir(d->tmp_path);
    char old[PATH_MAX] = "";
    struct stat st;
    if (lstat(d->final_path, &st) == 0 && !d->overwrite) {
        s = dsq_fail(DSQ_ERR_EXISTS, "%s: output appeared while it was being written", d->final_path);
    } else if (lstat(d->final_path, &st) == 0) {
        /* Move the old folder aside first, so a failure can put it back. */
        int n = snprintf(old, sizeof old, "%s.old-%ld", d->tmp_path, (long)getpid());
        if (n < 0 || (size_t)n >= sizeof old || rename(d->final_path, old) != 0) {
            s = dsq_fail_errno(DSQ_ERR_IO, "%s: cannot move the existing folder aside", d->final_path);
            old[0] = '\0';
        }
    }
    if (s == DSQ_OK && rename(d->tmp_path, d->final_path) != 0) {
        s = dsq_fail_errno(DSQ_ERR_IO, "%s: rename from %s failed", d->final_path, d->tmp_path);
        if (old[0]) (void)rename(old, d->final_path);
        old[0] = '\0';
    }
    if (s != DSQ_OK) {
        (void)dsq_rmtree(d->tmp_path);
    } else {
        if (old[0]) (void)dsq_rmtree(old);
        fsync_dir(d->parent);
    }
    temps_remove(d->tmp_path);
    free(d);
    return s;
}

void dsq_outdir_abort(dsq_outdir *d)
{
    if (!d) return;
    temps_remove(d->tmp_path);
    (void)dsq_rmtree(d->tmp_path);
    free(d);
}

dsq_status dsq_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return DSQ_OK;
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0) return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot remove", path);
        return DSQ_OK;
    }
    DIR *dir = opendir(path);
    if (!dir) return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot open folder", path);
    struct dirent *e;
    dsq_status s = DSQ_OK;
    while ((e = readdir(dir)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char child[PATH_MAX];
        if (dsq_path_join(child, sizeof child, path, e->d_name) != DSQ_OK) continue;
        dsq_status cs = dsq_rmtree(child);
        if (cs != DSQ_OK) s = cs;
    }
    closedir(dir);
    if (rmdir(path) != 0) return dsq_fail_errno(DSQ_ERR_IO, "%s: cannot remove folder", path);
    return s;
}

void dsq_release_pages(const void *p, uint64_t n)
{
    static long page;
    if (!page) page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p || n == 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)p + (uintptr_t)n) & ~((uintptr_t)page - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
