#include "formats/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"

const char *dsq_checkpoint_kind_name(dsq_ckpt_kind k)
{
    switch (k) {
    case DSQ_CKPT_GGUF: return "gguf";
    case DSQ_CKPT_HF_DIR: return "hf";
    case DSQ_CKPT_SAFETENSORS: return "safetensors";
    }
    return "?";
}

/* Reads the first 4 bytes; a shorter file is simply not GGUF. */
static dsq_status sniff_gguf(const char *path, bool *is_gguf)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dsq_fail_errno(DSQ_ERR_IO, "%s", path);
    uint8_t b[4];
    ssize_t n = 0;
    while (n < (ssize_t)sizeof b) { /* a read may return fewer bytes than asked (network file systems) */
        ssize_t r = read(fd, b + n, sizeof b - (size_t)n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r < 0) n = -1;
            break;
        }
        n += r;
    }
    int err = errno;
    close(fd);
    if (n < 0) {
        errno = err;
        return dsq_fail_errno(DSQ_ERR_IO, "%s", path);
    }
    uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    *is_gguf = n == 4 && magic == DSQ_GGUF_MAGIC;
    return DSQ_OK;
}

/* An architecture we do not handle (or no config at all) is kept as a note
 * instead of failing the open, so that info can still list the tensors; it
 * is raised again by dsq_checkpoint_require_arch. A malformed description
 * (a bad field, an impossible size) fails the open itself: one verdict for
 * every command. */
static dsq_status note_arch(dsq_checkpoint *c, dsq_status s)
{
    c->has_arch = s == DSQ_OK;
    c->arch_status = s;
    if (s == DSQ_OK) return DSQ_OK;
    snprintf(c->arch_note, sizeof c->arch_note, "%s", dsq_errmsg());
    return s == DSQ_ERR_UNSUPPORTED || s == DSQ_ERR_NOT_FOUND ? DSQ_OK : s;
}

static dsq_status open_hf_dir(dsq_checkpoint *c, const char *path)
{
    char cfg[4096];
    DSQ_TRY(dsq_path_join(cfg, sizeof cfg, path, "config.json"));
    DSQ_TRY(dsq_st_model_open(path, &c->st));
    c->n_tensors = c->st->n_tensors;
    if (dsq_exists(cfg)) {
        DSQ_TRY(note_arch(c, dsq_arch_from_hf_dir(path, &c->arch)));
    } else {
        c->arch_status = DSQ_ERR_NOT_FOUND;
        snprintf(c->arch_note, sizeof c->arch_note, "%.400s: not found", cfg);
    }
    return DSQ_OK;
}

static dsq_status open_file(dsq_checkpoint *c, const char *path)
{
    bool is_gguf = false;
    DSQ_TRY(sniff_gguf(path, &is_gguf));
    if (is_gguf) {
        c->kind = DSQ_CKPT_GGUF;
        DSQ_TRY(dsq_gguf_open(path, &c->gguf));
        c->n_tensors = c->gguf->n_tensors;
        DSQ_TRY(note_arch(c, dsq_arch_from_gguf(c->gguf, &c->arch)));
        return DSQ_OK;
    }
    c->kind = DSQ_CKPT_SAFETENSORS;
    DSQ_TRY(dsq_st_model_open(path, &c->st));
    c->n_tensors = c->st->n_tensors;
    c->arch_status = DSQ_ERR_NOT_FOUND;
    snprintf(c->arch_note, sizeof c->arch_note, "%.400s: a lone safetensors file has no config.json", path);
    return DSQ_OK;
}

dsq_status dsq_checkpoint_open(const char *path, dsq_checkpoint **out)
{
    *out = NULL;
    if (!dsq_exists(path)) {
        errno = ENOENT;
        return dsq_fail_errno(DSQ_ERR_NOT_FOUND, "%s", path);
    }
    dsq_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    }
    dsq_status s;
    if (dsq_is_dir(path)) {
        c->kind = DSQ_CKPT_HF_DIR;
        s = open_hf_dir(c, path);
    } else {
        s = open_file(c, path);
    }
    if (s == DSQ_OK) s = dsq_checkpoint_check(c);
    if (s != DSQ_OK) {
        dsq_checkpoint_close(c);
        return s;
    }
    *out = c;
    return DSQ_OK;
}

void dsq_checkpoint_close(dsq_checkpoint *c)
{
    if (!c) return;
    if (c->gguf) dsq_gguf_close(c->gguf);
    if (c->st) dsq_st_model_close(c->st);
    free(c->path);
    free(c);
}

dsq_status dsq_checkpoint_tensor(const dsq_checkpoint *c, uint64_t i, dsq_tensor *out)
{
    if (i >= c->n_tensors)
        return dsq_fail(DSQ_ERR_ARG, "%s: tensor index %llu out of range (%llu tensors)", c->path,
                        (unsigned long long)i, (unsigned long long)c->n_tensors);
    if (c->gguf) return dsq_gguf_tensor(c->gguf, i, out);
    return dsq_st_model_view(c->st, (size_t)i, out);
}

dsq_status dsq_checkpoint_require_arch(const dsq_checkpoint *c)
{
    if (c->has_arch) return DSQ_OK;
    return dsq_fail(c->arch_status != DSQ_OK ? c->arch_status : DSQ_ERR_NOT_FOUND, "%s", c->arch_note);
}
