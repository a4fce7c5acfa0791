/* The quant-type table: one row per GGUF block type with its row functions,
 * like ggml's type traits. Everything that quantizes, dequantizes or dots
 * GGUF blocks goes through dsq_qtype_get(). Sizes live in core/dtype.h. */
#ifndef DSQ_QUANTIZERS_QTYPES_H
#define DSQ_QUANTIZERS_QTYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

typedef void (*dsq_quantize_row_fn)(const float *x, void *y, int64_t n, const float *qw);
typedef void (*dsq_dequantize_row_fn)(const void *x, float *y, int64_t n);
/* ggml's legacy importance paths weigh by the whole row's mean square: the
 * same with it given, so a row can be quantized a block at a time */
typedef void (*dsq_quantize_sigma_fn)(const float *x, void *y, int64_t n, const float *qw, float sigma2);
typedef void (*dsq_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct dsq_qtype {
    dsq_type type;
    dsq_quantize_row_fn quantize_row;     /* NULL when we cannot produce the type */
    dsq_dequantize_row_fn dequantize_row; /* NULL when we cannot read it */
    dsq_vec_dot_fn vec_dot;               /* NULL when no dot product */
    dsq_type vec_dot_type;                /* activation type the dot pairs with */
    bool uses_imatrix;                    /* quantize_row honours qw */
    /* non-NULL when quantize_row with qw looks at the whole row (its sigma2,
     * dsq_quantize_row_sigma2), not only at each block */
    dsq_quantize_sigma_fn quantize_row_sigma;
} dsq_qtype;

/* The row for t, or NULL when t is not a block type we handle. Plain float
 * types (F32/F16/BF16) are not in this table: use dsq_convert_row. */
const dsq_qtype *dsq_qtype_get(dsq_type t);

/* Dequantizes nrows rows of n_per_row elements of type t (block or float type) to F32. */
dsq_status dsq_dequantize(dsq_type t, const void *src, float *dst, int64_t nrows, int64_t n_per_row);

/* Quantizes nrows rows to type t (block or float type), like ggml_quantize_chunk.
 * imatrix: n_per_row weights or NULL. Fails on a row length that is not a
 * multiple of the block size, and on NaN/Inf in the input (naming the row). */
dsq_status dsq_quantize(dsq_type t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);

#endif
