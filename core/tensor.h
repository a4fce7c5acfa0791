/* A tensor view: name, type, shape and bytes that somebody else owns
 * (usually an mmap of the input file). Nothing here allocates. */
#ifndef DSQ_CORE_TENSOR_H
#define DSQ_CORE_TENSOR_H

#include <stdint.h>

#include "core/dtype.h"

#define DSQ_MAX_DIMS 8

/* shape[] is outermost first (PyTorch / safetensors order). A GGUF tensor with
 * ne = {K, N} is shape {N, K}: shape[n_dims-1] is the contiguous row length. */
typedef struct dsq_tensor {
    const char *name;
    dsq_type type;
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} dsq_tensor;

static inline uint64_t dsq_tensor_nelems(const dsq_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (uint64_t)t->shape[i];
    return n;
}

/* Row length (innermost dim) and number of rows (product of the others). */
static inline int64_t dsq_tensor_row_len(const dsq_tensor *t)
{
    return t->n_dims > 0 ? t->shape[t->n_dims - 1] : 1;
}
static inline int64_t dsq_tensor_nrows(const dsq_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i + 1 < t->n_dims; i++) n *= t->shape[i];
    return n;
}

#endif
