/* GGUF files (version 3; version 2 read too): reader over an mmap, and a
 * streaming writer. Layout and value types: docs/formats.md, after ggml's
 * docs/gguf.md. Every count, length, offset and dimension read from a file is
 * checked against the bytes that remain before it is used. */
#ifndef DSQ_FORMATS_GGUF_H
#define DSQ_FORMATS_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/status.h"
#include "core/tensor.h"

#define DSQ_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define DSQ_GGUF_DEFAULT_ALIGNMENT 32u

typedef enum dsq_gguf_vtype {
    DSQ_GGUF_U8 = 0,
    DSQ_GGUF_I8 = 1,
    DSQ_GGUF_U16 = 2,
    DSQ_GGUF_I16 = 3,
    DSQ_GGUF_U32 = 4,
    DSQ_GGUF_I32 = 5,
    DSQ_GGUF_F32 = 6,
    DSQ_GGUF_BOOL = 7,
    DSQ_GGUF_STRING = 8,
    DSQ_GGUF_ARRAY = 9,
    DSQ_GGUF_U64 = 10,
    DSQ_GGUF_I64 = 11,
    DSQ_GGUF_F64 = 12,
    DSQ_GGUF_VTYPE_COUNT
} dsq_gguf_vtype;

/* A string: ptr is NUL-terminated for convenience, but len is authoritative
 * (GGUF strings may hold NUL bytes). */
typedef struct dsq_gguf_str {
    const char *ptr;
    uint64_t len;
} dsq_gguf_str;

typedef struct dsq_gguf_value dsq_gguf_value;

/* An array. data points to n packed elements of elem_type:
 *   scalar types -> the C type (uint8_t, int8_t, ..., float, double; BOOL -> uint8_t 0/1),
 *   STRING -> dsq_gguf_str[n],
 *   ARRAY  -> dsq_gguf_value[n], each of type ARRAY (nested arrays). */
typedef struct dsq_gguf_array {
    dsq_gguf_vtype elem_type;
    uint64_t n;
    const void *data;
} dsq_gguf_array;

struct dsq_gguf_value {
    dsq_gguf_vtype type;
    union {
        uint64_t u64; /* U8, U16, U32, U64 widened */
        int64_t i64;  /* I8, I16, I32, I64 widened */
        double f64;   /* F32, F64 widened (F32 exactly) */
        bool b;
        dsq_gguf_str str;
        dsq_gguf_array arr;
    } v;
};

typedef struct dsq_gguf_kv {
    const char *key;
    dsq_gguf_value value;
} dsq_gguf_kv;

typedef struct dsq_gguf_tensor_info {
    const char *name;
    dsq_type type;
    uint32_t n_dims;
    int64_t ne[DSQ_MAX_DIMS]; /* ggml order: ne[0] is the contiguous row length */
    uint64_t offset;          /* from the start of the data section */
    uint64_t nbytes;
} dsq_gguf_tensor_info;

typedef struct dsq_gguf {
    char *path;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    dsq_gguf_kv *kv;
    uint64_t n_tensors;
    dsq_gguf_tensor_info *tensors;
    uint64_t data_offset; /* absolute file offset of the data section */
    dsq_mmap map;
    void *arena; /* owns every string and array above */
} dsq_gguf;

dsq_status dsq_gguf_open(const char *path, dsq_gguf **out);
void dsq_gguf_close(dsq_gguf *g);

const dsq_gguf_value *dsq_gguf_get(const dsq_gguf *g, const char *key);
/* Index of a tensor by name, or -1. */
int64_t dsq_gguf_find_tensor(const dsq_gguf *g, const char *name);
/* A view of tensor i with shape outermost-first (ne reversed) and its bytes. */
dsq_status dsq_gguf_tensor(const dsq_gguf *g, uint64_t i, dsq_tensor *out);

/* Lookups, for keys that are optional: true with *out set when the key is
 * there with a value the request can represent (the getters' rules below);
 * false when it is absent or of another type, recording no message, so a
 * caller with a default just uses it. */
bool dsq_gguf_find_u64(const dsq_gguf *g, const char *key, uint64_t *out);
bool dsq_gguf_find_u32(const dsq_gguf *g, const char *key, uint32_t *out);
bool dsq_gguf_find_f32(const dsq_gguf *g, const char *key, float *out);
bool dsq_gguf_find_bool(const dsq_gguf *g, const char *key, bool *out);
bool dsq_gguf_find_str(const dsq_gguf *g, const char *key, const char **out);
bool dsq_gguf_find_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype elem_type, const dsq_gguf_array **out);

/* Typed getters, for keys that must be there: DSQ_ERR_NOT_FOUND when missing; DSQ_ERR_FORMAT naming the key
 * when the stored type cannot represent the request (integers of any width
 * are accepted when the value fits; F32/F64 for floats). */
dsq_status dsq_gguf_get_u64(const dsq_gguf *g, const char *key, uint64_t *out);
dsq_status dsq_gguf_get_u32(const dsq_gguf *g, const char *key, uint32_t *out);
dsq_status dsq_gguf_get_f32(const dsq_gguf *g, const char *key, float *out);
dsq_status dsq_gguf_get_bool(const dsq_gguf *g, const char *key, bool *out);
dsq_status dsq_gguf_get_str(const dsq_gguf *g, const char *key, const char **out);
dsq_status dsq_gguf_get_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype elem_type, const dsq_gguf_array **out);

const char *dsq_gguf_vtype_name(dsq_gguf_vtype t);
/* Size in bytes of one scalar element (0 for STRING/ARRAY/unknown). */
uint32_t dsq_gguf_vtype_size(dsq_gguf_vtype t);

/* ---- writer ----
 * Usage: new -> set KVs -> add tensors (name, type, shape) -> begin(path) ->
 * write each tensor's bytes in the order added (any number of chunks per
 * tensor; padding between tensors is automatic) -> finish (atomic commit).
 * free() without finish() removes the temporary file. Alignment is
 * general.alignment when set (a u32 multiple of 8), else 32. */
typedef struct dsq_gguf_writer dsq_gguf_writer;

dsq_status dsq_gguf_writer_new(dsq_gguf_writer **out);
void dsq_gguf_writer_free(dsq_gguf_writer *w);

/* Setting an existing key replaces its value in place (order is kept). */
dsq_status dsq_gguf_set(dsq_gguf_writer *w, const char *key, const dsq_gguf_value *v); /* deep copy */
dsq_status dsq_gguf_set_u32(dsq_gguf_writer *w, const char *key, uint32_t v);
dsq_status dsq_gguf_set_i32(dsq_gguf_writer *w, const char *key, int32_t v);
dsq_status dsq_gguf_set_u64(dsq_gguf_writer *w, const char *key, uint64_t v);
dsq_status dsq_gguf_set_f32(dsq_gguf_writer *w, const char *key, float v);
dsq_status dsq_gguf_set_bool(dsq_gguf_writer *w, const char *key, bool v);
dsq_status dsq_gguf_set_str(dsq_gguf_writer *w, const char *key, const char *s);
/* Array of scalars: data holds n packed elements of elem_type's C type. */
dsq_status dsq_gguf_set_arr(dsq_gguf_writer *w, const char *key, dsq_gguf_vtype elem_type, const void *data,
                            uint64_t n);
/* Array of strings; lens may be NULL (strlen is used). */
dsq_status dsq_gguf_set_str_arr(dsq_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                                uint64_t n);
/* Whether the writer holds key (no message either way). */
bool dsq_gguf_writer_has(const dsq_gguf_writer *w, const char *key);
/* DSQ_ERR_NOT_FOUND when the writer has no such key. */
dsq_status dsq_gguf_remove(dsq_gguf_writer *w, const char *key);

/* shape is outermost-first (as dsq_tensor); the file gets it reversed. */
dsq_status dsq_gguf_add_tensor(dsq_gguf_writer *w, const char *name, dsq_type type, int n_dims,
                               const int64_t *shape);
/* Before begin: the size the header (KVs and tensor infos, padded to the
 * alignment) and the data section (each tensor padded) will have on disk,
 * and the alignment; the file is their sum. */
dsq_status dsq_gguf_writer_layout(dsq_gguf_writer *w, uint64_t *header_bytes, uint64_t *data_bytes,
                                  uint32_t *alignment);
/* Before begin: the file written with direct I/O (dsq_outfile_set_direct),
 * for a model's worth of bytes that should not be copied into the page cache. */
void dsq_gguf_writer_set_direct(dsq_gguf_writer *w, bool on);
dsq_status dsq_gguf_writer_begin(dsq_gguf_writer *w, const char *path, bool overwrite);
dsq_status dsq_gguf_writer_write(dsq_gguf_writer *w, const void *data, uint64_t n);
dsq_status dsq_gguf_writer_finish(dsq_gguf_writer *w);

#endif
