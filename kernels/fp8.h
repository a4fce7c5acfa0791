/* FP8 E4M3FN decode for the 8-bit linear storage: a 256-entry table of every
 * code's value (the encode, round to nearest even saturating at 448, is
 * dsq_w8_encode in quantizers/w8.c over core's dsq_f32_to_e4m3). Every E4M3
 * value has at most 4 significant bits, so it is exact in BF16 and F32, and
 * the product of two is exact in F32.
 *
 * On AVX512 (F+BW+VL) the row functions decode 16 codes per step without
 * table loads: the code's bits moved into an F16 (sign to bit 15, exponent and
 * mantissa to bits 13..7) are value * 2^-8, subnormals included, and
 * vcvtph2ps widens that exactly; the decoded values are the table's bit for
 * bit. */
#ifndef DSQ_KERNELS_FP8_H
#define DSQ_KERNELS_FP8_H

#include <stdbool.h>
#include <stdint.h>

/* table[code] = the code's value (NaN for 0x7f and 0xff); built once per process. */
const float *dsq_fp8_e4m3_table(void);

/* dst[i] = value(codes[i]) * scale, i < n (the weight dequantization q * s);
 * bit-identical on every path. Codes must not be NaN (0x7f, 0xff: the
 * storage's validation refuses them). */
void dsq_fp8_decode_row(const uint8_t *codes, int64_t n, float scale, float *dst);

/* sum_i value(codes[i]) * x[i] in F32 (the decode path's row dot; the order
 * of the sum is the path's own). */
float dsq_fp8_dot(const uint8_t *codes, const float *x, int64_t n);

/* The FP8 activation rule of quantizers/w8.c (dsq_w8_act_quantize with
 * DSQ_W8_FP8), vectorized: scale_in > 0 as given, else amax / 448 (1 when x
 * is all zero); codes = e4m3(clamp(x / s, -448, 448)) rounded to nearest
 * even, a NaN quotient giving -448 as the reference's clamp does. Same bytes
 * and scale as the reference (tests/test_fp8.c compares them). Returns false,
 * writing nothing, where no SIMD version runs (no AVX512F+BW+VL, or the
 * scalar reference forced): the caller then calls dsq_w8_act_quantize. */
bool dsq_fp8_quantize_act(const float *x, int64_t n, float scale_in, uint8_t *codes, float *scale);

/* The AVX512 twins (internal to kernels/fp8*.c). */
void dsq_fp8_decode_row_avx512(const uint8_t *codes, int64_t n, float scale, float *dst);
float dsq_fp8_dot_avx512(const uint8_t *codes, const float *x, int64_t n);
float dsq_fp8_quantize_act_avx512(const float *x, int64_t n, float scale_in, uint8_t *codes);

#endif
