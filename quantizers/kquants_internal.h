/* Private to quantizers/ (kquants*.c): the small helpers the scalar and AVX2
 * k-quant files share (ggml-quants.c at llama.cpp c392e509). The block layouts
 * themselves are public, in quantizers/quant_common.h, because the runtime's
 * dot kernels read them too; scripts/check-layers.sh keeps this header inside
 * its folder. */
#ifndef DSQ_QUANTIZERS_KQUANTS_INTERNAL_H
#define DSQ_QUANTIZERS_KQUANTS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "quantizers/quant_common.h"

#define KQ_QK DSQ_QK_K

/* "All zero" threshold of ggml's symmetric searches (GROUP_MAX_EPS). */
#define KQ_GROUP_MAX_EPS 1e-15f

/* ggml's nearest_int: adding 1.5*2^23 leaves the rounded integer (ties to even)
 * in the low mantissa bits. It is kept bit for bit, out-of-range inputs
 * included, because those garbage values decide bytes in ggml's output too. */
static inline int kq_nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int kq_clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* After the sub-block searches, ggml encodes the sub-block scales, then
 * requantizes every element with the stored (fp16-rounded) scales:
 * level = clamp(nearest((x + dm) / d), lo, hi) + off per sub-block, where a
 * sub-block whose stored d is 0 keeps the levels of its search. For the
 * symmetric types (q3_K, q6_K) ggml divides x itself; dm is 0 there and
 * x + 0 differs from x only in the sign of a zero, which rounds to level 0
 * either way. */
typedef struct dsq_kq_plan {
    int n_sub, sub;   /* sub-blocks and their size */
    int lo, hi, off;  /* level range and storage offset */
    float d[16], dm[16];
} dsq_kq_plan;

/* The scalar kquants.c has these; the AVX2 file reuses all but the requantizer.
 * Each *_plan writes the block's scale fields exactly as ggml does and fills p.
 * Levels L[256] are the stored (non-negative) values throughout. */
void dsq_kq_requant_ref(const float *x, uint8_t *L, const dsq_kq_plan *p);
void dsq_kq_q2_plan_ref(dsq_block_q2_K *y, const float *scales, const float *mins, dsq_kq_plan *p);
void dsq_kq_q2_plan_imat(dsq_block_q2_K *y, const float *scales, const float *mins, const float *sw, dsq_kq_plan *p);
void dsq_kq_q3_plan_ref(dsq_block_q3_K *y, const float *scales, dsq_kq_plan *p);
void dsq_kq_q3_plan_imat(dsq_block_q3_K *y, const float *scales, const float *sw, dsq_kq_plan *p);
/* q4_K (nmax 15) and q5_K (nmax 31); clamp63: q5_K's _impl caps the levels
 * at 63 before packing, q4_K's does not. */
void dsq_kq_q45_plan_ref(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins, int nmax,
                     dsq_kq_plan *p);
void dsq_kq_q45_plan_imat(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins,
                      const float *sw, int nmax, bool clamp63, dsq_kq_plan *p);
/* False when the block was all zero and has been written in full. */
bool dsq_kq_q6_plan(dsq_block_q6_K *y, const float *scales, dsq_kq_plan *p);
void dsq_kq_q2_pack(dsq_block_q2_K *y, const uint8_t *L);
void dsq_kq_q3_pack(dsq_block_q3_K *y, const uint8_t *L);
void dsq_kq_q4_pack(dsq_block_q4_K *y, const uint8_t *L);
void dsq_kq_q5_pack(dsq_block_q5_K *y, const uint8_t *L);
void dsq_kq_q6_pack(dsq_block_q6_K *y, const uint8_t *L);

/* AVX2 versions (quantizers/kquants_avx2.c), chosen at run time. */
#if defined(__x86_64__) || defined(__i386__)
#define DSQ_KQ_HAVE_AVX2 1
void dsq_kq_avx2_quantize_row_q2_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_quantize_row_q3_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_quantize_row_q4_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_quantize_row_q5_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_quantize_row_q6_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_quantize_row_q8_K(const float *x, void *y, int64_t n, const float *qw);
/* AVX-512F versions (quantizers/kquants_avx512.c), same bytes. */
void dsq_kq_avx512_quantize_row_q2_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx512_quantize_row_q3_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx512_quantize_row_q4_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx512_quantize_row_q5_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx512_quantize_row_q6_K(const float *x, void *y, int64_t n, const float *qw);
void dsq_kq_avx2_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_kq_avx2_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_kq_avx2_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_kq_avx2_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_kq_avx2_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);
#else
#define DSQ_KQ_HAVE_AVX2 0
#endif

#endif
