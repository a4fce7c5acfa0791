/* FP8 E4M3FN decode for the 8-bit linear storage: a 256-entry table of every
 * code's value (the encode, round to nearest even saturating at 448, is
 * dsq_w8_encode in quantizers/w8.c over core's dsq_f32_to_e4m3). Every E4M3
 * value has at most 4 significant bits, so it is exact in BF16 and F32, and
 * the product of two is exact in F32. */
#ifndef DSQ_KERNELS_FP8_H
#define DSQ_KERNELS_FP8_H

#include <stdint.h>

/* table[code] = the code's value (NaN for 0x7f and 0xff); built once per process. */
const float *dsq_fp8_e4m3_table(void);

/* dst[i] = value(codes[i]) * scale, i < n (the weight dequantization q * s). */
void dsq_fp8_decode_row(const uint8_t *codes, int64_t n, float scale, float *dst);

#endif
