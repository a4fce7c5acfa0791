/* 8-bit weight schemes: symmetric INT8 (SmoothQuant W8A8) and FP8 E4M3
 * (FP8 dynamic / static / block / weight-only), the number formats behind the
 * compressed-tensors int-quantized and float-quantized folders, vLLM's native
 * "fp8" config (DeepSeek-V3's block layout) and the ModelOpt FP8 export.
 *
 * A weight W is [rows = out x cols = in] F32, row-major. Its scales are one
 * per tensor, one per output row (channel), or one per [block_rows x
 * block_cols] tile; partial edge tiles get their own scale, as DeepSeek-V3
 * pads them (ceil(rows/br) x ceil(cols/bc) scales, row-major). Codes are one
 * byte per weight: an INT8 value (two's complement) or E4M3FN bits.
 *
 * The weight rule is compressed-tensors' calculate_qparams (symmetric), which
 * llm-compressor's presets use:
 *   amax = max |w| over the scale's elements
 *   INT8: s = amax / 127.5  (bit range 255 / 2), q = clamp(rint(w / s), -128, 127)
 *   FP8:  s = amax / 448    (bit range 896 / 2), q = e4m3(clamp(w / s, -448, 448))
 *   s == 0 (an all-zero tile) becomes FLT_EPSILON (torch.finfo(float32).eps).
 * e4m3() rounds to nearest even (torch's cast to float8_e4m3fn). Dequant is
 * q * s. NaN or Inf in a weight is an error naming the tensor, row and column.
 *
 * Activations (what the runtime does to a linear's input, as vLLM's kernels
 * do it; the scale rule for static scales is the calibration observer's):
 *   NONE          weight-only (W8A16): the input stays as it is.
 *   TOKEN         dynamic per token: s_t = amax_t / qmax (INT8 127, FP8 448).
 *   TENSOR        static per tensor: s from calibration (max |x| over every
 *                 calibration token / qmax), stored as input_scale.
 *   GROUP         dynamic per token and per act_group columns (FP8 block: 128).
 * x is quantized to codes with its scale (dsq_w8_act_quantize) and the
 * product runs on the codes. */
#ifndef DSQ_QUANTIZERS_W8_H
#define DSQ_QUANTIZERS_W8_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dsq_w8_kind {
    DSQ_W8_INT8 = 0,
    DSQ_W8_FP8, /* E4M3FN */
} dsq_w8_kind;

typedef enum dsq_w8_wgran {
    DSQ_W8_W_TENSOR = 0,
    DSQ_W8_W_CHANNEL,
    DSQ_W8_W_BLOCK,
} dsq_w8_wgran;

typedef enum dsq_w8_act {
    DSQ_W8_ACT_NONE = 0,
    DSQ_W8_ACT_TOKEN,
    DSQ_W8_ACT_TENSOR,
    DSQ_W8_ACT_GROUP,
} dsq_w8_act;

#define DSQ_W8_INT8_QMAX 127
#define DSQ_W8_FP8_MAX 448.0f

typedef struct dsq_w8_scheme {
    dsq_w8_kind kind;
    dsq_w8_wgran wgran;
    int block_rows, block_cols; /* DSQ_W8_W_BLOCK only (DeepSeek-V3: 128 x 128) */
    dsq_w8_act act;
    int act_group; /* DSQ_W8_ACT_GROUP only (128) */
} dsq_w8_scheme;

/* The named presets (llm-compressor's names in comments). */
dsq_w8_scheme dsq_w8_scheme_w8a8(bool static_act);  /* W8A8: INT8 channel + token (or tensor) */
dsq_w8_scheme dsq_w8_scheme_fp8_dynamic(void);      /* FP8_DYNAMIC: FP8 channel + token */
dsq_w8_scheme dsq_w8_scheme_fp8_static(void);       /* FP8: FP8 tensor + tensor */
dsq_w8_scheme dsq_w8_scheme_fp8_block(void);        /* FP8_BLOCK: FP8 128x128 + group 128 */
dsq_w8_scheme dsq_w8_scheme_fp8_weight_only(void);  /* FP8 channel, W8A16 */

/* Checks the scheme itself (block sizes positive, kinds known). */
dsq_status dsq_w8_scheme_check(const dsq_w8_scheme *s);
/* "int8" / "fp8", and a short description such as "fp8 block 128x128, act group 128". */
const char *dsq_w8_kind_name(dsq_w8_kind k);
void dsq_w8_scheme_describe(const dsq_w8_scheme *s, char *buf, int cap);

/* One quantized weight. */
typedef struct dsq_w8q {
    int64_t rows, cols;
    dsq_w8_scheme sch;
    uint8_t *codes;    /* [rows x cols] */
    float *scales;     /* [n_scale_rows x n_scale_cols] */
    int64_t n_scale_rows, n_scale_cols;
    float act_scale;   /* DSQ_W8_ACT_TENSOR: the static input scale (> 0); else 0 */
    /* codes point into a checkpoint's mmap (not freed; read-only): a
     * 671B FP8 model is not copied into memory to be run or quantized */
    bool codes_view;
} dsq_w8q;

/* Scale grid of a [rows x cols] weight under s: 1x1, rows x 1, or the tile counts. */
void dsq_w8_scale_grid(const dsq_w8_scheme *s, int64_t rows, int64_t cols, int64_t *srows, int64_t *scols);
/* Allocates codes (zeroed) and scales for [rows x cols] under s. */
dsq_status dsq_w8q_alloc(const dsq_w8_scheme *s, int64_t rows, int64_t cols, dsq_w8q *out);
void dsq_w8q_free(dsq_w8q *q);

/* Quantizes w [rows x cols] under s into out (allocated here; act_scale left
 * 0 for the caller to set). name (may be NULL) names the tensor in errors. */
dsq_status dsq_w8q_quantize(const float *w, int64_t rows, int64_t cols, const dsq_w8_scheme *s, const char *name,
                            dsq_w8q *out);
/* w = codes * scale of each element's tile. */
dsq_status dsq_w8q_dequantize(const dsq_w8q *q, float *w);
/* Consistency of a dsq_w8q from elsewhere (a reader): grid sizes, finite
 * positive scales, FP8 codes that are not NaN, a static act scale when the
 * scheme needs one. name names the tensor in errors. */
dsq_status dsq_w8q_validate(const dsq_w8q *q, const char *name);

/* The scale of element (r, c). */
static inline float dsq_w8q_scale_at(const dsq_w8q *q, int64_t r, int64_t c)
{
    switch (q->sch.wgran) {
    case DSQ_W8_W_TENSOR: return q->scales[0];
    case DSQ_W8_W_CHANNEL: return q->scales[r];
    default: return q->scales[(r / q->sch.block_rows) * q->n_scale_cols + c / q->sch.block_cols];
    }
}

/* Value of one code (no scale). */
float dsq_w8_code_value(dsq_w8_kind k, uint8_t code);
/* The code of v / scale under kind k (INT8: rint + clamp to [-128, 127];
 * FP8: clamp to +-448, then round to nearest even). */
uint8_t dsq_w8_encode(dsq_w8_kind k, float v, float scale);

/* Activation quantization of n values x with one scale: codes (int8 or e4m3
 * bytes) and the scale used. scale_in > 0: that static scale; else dynamic
 * amax / qmax (INT8 qmax 127 as vLLM's scaled_int8_quant, FP8 448), with an
 * all-zero input given scale 1. INT8 activations clamp to [-128, 127]. */
float dsq_w8_act_quantize(dsq_w8_kind k, const float *x, int64_t n, float scale_in, uint8_t *codes);

/* A static input scale from a calibration max |x| (max / 127.5 for INT8 as the
 * observer's calculate_qparams gives, max / 448 for FP8; eps when 0). */
float dsq_w8_static_scale(dsq_w8_kind k, float amax);

#endif
