/* Element and block types: one table row per type, everything dispatches through it.
 *
 * dsq_type values equal ggml's type ids where ggml has the type, so a GGUF type
 * id is a dsq_type after dsq_type_from_ggml() has checked it. Types that only
 * safetensors has (FP8, U8, BOOL, ...) sit above the ggml range.
 * The quantize/dequantize functions of block types live in quantizers/qtypes.h;
 * this table only knows sizes, so readers can size tensors without quantizers. */
#ifndef DSQ_CORE_DTYPE_H
#define DSQ_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dsq_type {
    DSQ_TYPE_F32 = 0,
    DSQ_TYPE_F16 = 1,
    DSQ_TYPE_Q4_0 = 2,
    DSQ_TYPE_Q4_1 = 3,
    DSQ_TYPE_Q5_0 = 6,
    DSQ_TYPE_Q5_1 = 7,
    DSQ_TYPE_Q8_0 = 8,
    DSQ_TYPE_Q8_1 = 9,
    DSQ_TYPE_Q2_K = 10,
    DSQ_TYPE_Q3_K = 11,
    DSQ_TYPE_Q4_K = 12,
    DSQ_TYPE_Q5_K = 13,
    DSQ_TYPE_Q6_K = 14,
    DSQ_TYPE_Q8_K = 15,
    DSQ_TYPE_IQ2_XXS = 16,
    DSQ_TYPE_IQ2_XS = 17,
    DSQ_TYPE_IQ3_XXS = 18,
    DSQ_TYPE_IQ1_S = 19,
    DSQ_TYPE_IQ4_NL = 20,
    DSQ_TYPE_IQ3_S = 21,
    DSQ_TYPE_IQ2_S = 22,
    DSQ_TYPE_IQ4_XS = 23,
    DSQ_TYPE_I8 = 24,
    DSQ_TYPE_I16 = 25,
    DSQ_TYPE_I32 = 26,
    DSQ_TYPE_I64 = 27,
    DSQ_TYPE_F64 = 28,
    DSQ_TYPE_IQ1_M = 29,
    DSQ_TYPE_BF16 = 30,
    DSQ_TYPE_TQ1_0 = 34,
    DSQ_TYPE_TQ2_0 = 35,
    DSQ_TYPE_MXFP4 = 39,
    DSQ_GGML_TYPE_LIMIT = 40, /* ggml ids are below this */
    /* Not ggml types: safetensors-only element types. */
    DSQ_TYPE_F8_E4M3 = 64,
    DSQ_TYPE_F8_E5M2 = 65,
    DSQ_TYPE_U8 = 66,
    DSQ_TYPE_U16 = 67,
    DSQ_TYPE_U32 = 68,
    DSQ_TYPE_U64 = 69,
    DSQ_TYPE_BOOL = 70,
    DSQ_TYPE_COUNT = 71
} dsq_type;

#define DSQ_QK_K 256

typedef struct dsq_type_info {
    const char *name;     /* ggml's spelling: "f32", "q4_K", "iq4_xs"; ours for the rest */
    const char *st_name;  /* safetensors dtype string, NULL when safetensors has none */
    uint32_t block_elems; /* elements per block (1 for plain element types) */
    uint32_t block_bytes; /* bytes per block */
    bool quantized;       /* a block type with scales */
    bool is_float;        /* plain float element (f64/f32/f16/bf16/fp8): convertible with dsq_convert_row */
} dsq_type_info;

/* NULL when t is not a known type (gaps in the ggml id space included). */
const dsq_type_info *dsq_type_get(int t);
const char *dsq_type_name(dsq_type t); /* "?" for unknown */

dsq_status dsq_type_from_ggml(uint32_t ggml_id, dsq_type *out);
dsq_status dsq_type_from_st_name(const char *st_name, dsq_type *out);
/* Case-insensitive ggml name ("Q4_K", "bf16"). */
dsq_status dsq_type_from_name(const char *name, dsq_type *out);
bool dsq_type_is_ggml(dsq_type t);

/* Bytes for n elements of type t: fails when n is not a multiple of the block
 * size or the product overflows. */
dsq_status dsq_type_nbytes(dsq_type t, uint64_t n_elems, uint64_t *out);

/* Overflow-checked product of dims; false on overflow or a negative dim. */
bool dsq_mul_dims(const int64_t *dims, int n, uint64_t *out);

/* Scalar conversions. All float narrowing is round-to-nearest-even.
 * f16/bf16: NaN stays NaN (quiet), overflow goes to Inf, subnormals exact.
 * FP8 E4M3FN (no Inf; NaN = S.1111.111; max 448) and E5M2 (IEEE-like; max
 * 57344): overflow and Inf saturate to the largest finite value with the
 * sign kept, NaN stays NaN. */
uint16_t dsq_f32_to_f16(float f);
float dsq_f16_to_f32(uint16_t h);
uint16_t dsq_f32_to_bf16(float f);
float dsq_bf16_to_f32(uint16_t h);
uint8_t dsq_f32_to_e4m3(float f);
float dsq_e4m3_to_f32(uint8_t v);
uint8_t dsq_f32_to_e5m2(float f);
float dsq_e5m2_to_f32(uint8_t v);

/* Converts n elements between plain float types (F64, F32, F16, BF16,
 * F8_E4M3, F8_E5M2). Same type copies. Fails for any other type. */
dsq_status dsq_convert_row(dsq_type src_t, const void *src, dsq_type dst_t, void *dst, size_t n);
/* Row to F32 for plain float types and integer types (I8..I64, U8..U64, BOOL). */
dsq_status dsq_to_f32_row(dsq_type src_t, const void *src, float *dst, size_t n);

#endif
