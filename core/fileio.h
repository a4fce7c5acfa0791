/* Inputs are mapped read-only; outputs are written to a temporary name in the
 * destination folder, fsynced, and renamed into place only when complete.
 * On any failure the temporary is removed: no destination file ever appears
 * half-written. An output whose path is an open input is refused. */
#ifndef DSQ_CORE_FILEIO_H
#define DSQ_CORE_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct dsq_mmap {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    char *path;
    uint64_t dev, ino; /* identity at open, for the open-input registry */
} dsq_mmap;

dsq_status dsq_mmap_open(const char *path, dsq_mmap *m);
void dsq_mmap_close(dsq_mmap *m);
/* Drops the pages of [p, p + n), a part of a read-only mapping, from our
 * resident set once a streaming pass is done with them (the page cache keeps
 * them; touching them again reads them back). Only whole pages inside the
 * range are dropped, so neighbours sharing a page stay resident. */
void dsq_release_pages(const void *p, uint64_t n);

/* For a fatal-signal handler (SIGBUS: a mapped input truncated or
 * unreadable under us): the path of the open input whose mapping holds
 * addr, or NULL. Takes no lock it could wait on. */
const char *dsq_mmap_owner(const void *addr);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer; max_size guards hostile sizes. */
dsq_status dsq_read_file(const char *path, size_t max_size, char **out, size_t *out_len);

/* True when path names the same file as one currently open through dsq_mmap_open. */
bool dsq_path_is_open_input(const char *path);

typedef struct dsq_outfile dsq_outfile;

/* Creates "<dir>/.<name>.tmp-XXXXXX". Refuses when path is an open input, or
 * when it exists and overwrite is false. */
dsq_status dsq_outfile_open(const char *path, bool overwrite, dsq_outfile **out);
dsq_status dsq_outfile_write(dsq_outfile *f, const void *buf, size_t n);
dsq_status dsq_outfile_write_zeros(dsq_outfile *f, size_t n);
/* Pads with zero bytes to a multiple of align (align > 0). */
dsq_status dsq_outfile_align(dsq_outfile *f, size_t align);
uint64_t dsq_outfile_tell(const dsq_outfile *f);
/* Big outputs (a converted checkpoint): whole 4 KiB blocks at aligned file
 * offsets go out with O_DIRECT from aligned 64 MiB buffers, so the data is
 * not copied into the page cache (that copy was most of a conversion's
 * time); the rest, and every file system that refuses O_DIRECT (tmpfs),
 * through the page cache as before. The file's bytes are the same. */
void dsq_outfile_set_direct(dsq_outfile *f, bool on);
/* Writing without a copy: *p points into the file's own buffer with room
 * for *got bytes, min <= *got <= max, for the caller to fill; then
 * dsq_outfile_produced(f, n), n <= *got. *p is NULL (nothing reserved, not
 * an error) when min does not fit the buffer: write those bytes instead. */
dsq_status dsq_outfile_reserve(dsq_outfile *f, size_t min, size_t max, uint8_t **p, size_t *got);
dsq_status dsq_outfile_produced(dsq_outfile *f, size_t n);
/* Overwrites bytes already written (e.g. a header placeholder). */
dsq_status dsq_outfile_pwrite(dsq_outfile *f, const void *buf, size_t n, uint64_t offset);
const char *dsq_outfile_path(const dsq_outfile *f);
/* Flushes and frees the write buffer (re-created on the next write): lets a
 * writer keep many finished files open until a common commit without holding
 * a buffer for each. */
dsq_status dsq_outfile_suspend(dsq_outfile *f);
/* Flushes, fsyncs, renames to the final path and fsyncs the folder; frees f. */
dsq_status dsq_outfile_commit(dsq_outfile *f);
/* Removes the temporary; frees f. NULL is a no-op. */
void dsq_outfile_abort(dsq_outfile *f);

/* A whole output folder, built under "<parent>/.<name>.tmp-XXXXXX" and renamed
 * into place on commit. With overwrite, an existing folder is replaced only
 * after the new one is complete. */
typedef struct dsq_outdir dsq_outdir;
dsq_status dsq_outdir_open(const char *path, bool overwrite, dsq_outdir **out);
/* Path of a file inside the temporary folder (valid until commit/abort). */
const char *dsq_outdir_tmp_path(const dsq_outdir *d);
/* Joins the temporary folder and a file name into buf. */
dsq_status dsq_outdir_file(const dsq_outdir *d, const char *name, char *buf, size_t cap);
dsq_status dsq_outdir_commit(dsq_outdir *d);
void dsq_outdir_abort(dsq_outdir *d);

/* For a fatal-signal handler: removes every temporary file and folder that
 * open outputs have made (async-signal-safe calls only; a temporary folder
 * is emptied one level deep). The final paths are never touched. */
void dsq_remove_temporaries(void);

/* Small helpers. dir/name (name alone when dir is NULL or "") into buf;
 * _fits answers false, recording no message, when the path does not fit. */
bool dsq_path_join_fits(char *buf, size_t cap, const char *dir, const char *name);
dsq_status dsq_path_join(char *buf, size_t cap, const char *dir, const char *name);
bool dsq_is_dir(const char *path);
bool dsq_exists(const char *path);
/* Removes a folder and everything in it (no symlink following). */
dsq_status dsq_rmtree(const char *path);

#endif
