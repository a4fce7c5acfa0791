/* GPTQ into GGUF blocks: GPTQ's error feedback through the inverse Hessian
 * (quantizers/gptq.h has the algorithm and its sources), with the rounding
 * done by a GGUF block type's own quantizer (quantizers/qtypes.h), so the
 * bytes are standard blocks of that type that llama.cpp reads unchanged.
 *
 * The sweep runs along each row's columns (the GGUF row: the linear's input)
 * one type block (32 or 256 columns) at a time. When it reaches a block, the
 * type's quantizer chooses the block's scales, mins and codes from the
 * weights as the earlier blocks' feedback left them, with importance weights
 * (an imatrix's mean x^2, or diag(H), which is 2 mean x^2: the same weights
 * up to a factor none of the quantizers sees). Then the block's columns are
 * walked in order as GPTQ walks columns: each one's error against its
 * dequantized value, divided by U[i,i], updates every later column (the rest
 * of the block too, which only changes the errors it passes on). This is the
 * optimal-brain-surgeon update for a block rounded jointly: the later
 * columns receive exactly -E_B U_BB^-1 U_B,rest. Lazy batches of 256 columns
 * (128 for the 32-wide types' multiple of 128) carry the feedback further as
 * one product, as in the reference.
 *
 * With a diagonal Hessian nothing is fed back and the bytes are the type's
 * quantizer's on the original weights with the same importance: plain
 * quantization, byte for byte (tests/test_gptq_blocks.c checks it).
 *
 * act_order processes whole blocks in descending order of their summed
 * Hessian diagonal (a block's columns must stay together to be one block).
 * Dead columns (diag(H) == 0) keep their weights and get H[i,i] = 1 as in
 * the reference, but are not zeroed: the file is evaluated on other text. */
#ifndef DSQ_QUANTIZERS_GPTQ_BLOCKS_H
#define DSQ_QUANTIZERS_GPTQ_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "quantizers/gptq.h"

typedef struct dsq_gptq_blocks_opts {
    dsq_type type;           /* a GGUF block type with a quantizer (dsq_qtype_get(type)->quantize_row) */
    double percdamp;         /* dampening as a fraction of mean diag(H) (0.01) */
    bool act_order;          /* blocks by descending summed diag(H) */
    const float *importance; /* [cols] importance weights, or NULL: diag(H) */
    const char *name;        /* tensor name for messages; may be NULL */
} dsq_gptq_blocks_opts;

/* w [rows x cols] F32 and H [cols x cols] (not modified) as for
 * dsq_gptq_quantize.
 * out receives rows * row_bytes(type, cols) bytes. Fails (naming the tensor)
 * on a type without a quantizer, cols not a multiple of its block, non-finite
 * inputs, a Hessian that does not factor, or updates that blow up. */
dsq_status dsq_gptq_blocks_quantize(const float *w, int64_t rows, int64_t cols, const double *H,
                                    const dsq_gptq_blocks_opts *o, void *out, dsq_gptq_report *report);

/* The quantity GPTQ minimizes for one tensor: sum over rows of
 * (w - q) H (w - q)^T / 2 with q the dequantized bytes of type t, in double.
 * For tests and reports: the error a calibration input sees. */
dsq_status dsq_gptq_blocks_error(const float *w, const void *q, dsq_type t, int64_t rows, int64_t cols, const double *H,
                                 double *err);

#endif
