/* Private to quantizers/kquants*.c: the k-quant block layouts (ggml-common.h at
 * llama.cpp c392e509) and the small helpers the scalar and AVX2 files share.
 * Layouts are byte arrays plus little-endian fp16 fields, so the structs have
 * no padding and can be read straight from a GGUF tensor on a little-endian host. */
#ifndef DSQ_QUANTIZERS_KQUANTS_INTERNAL_H
#define DSQ_QUANTIZERS_KQUANTS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

#define KQ_QK DSQ_QK_K

typedef struct kq_block_q2 {
    uint8_t scales[KQ_QK / 16]; /* low nibble: scale level, high nibble: min level */
    uint8_t qs[KQ_QK / 4];
    uint16_t d;
    uint16_t dmin;
} kq_block_q2;

typedef struct kq_block_q3 {
    uint8_t hmask[KQ_QK / 8];
    uint8_t qs[KQ_QK / 4];
    uint8_t scales[12]; /* sixteen 6-bit levels */
    uint16_t d;
} kq_block_q3;

typedef struct kq_block_q4 {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12]; /* eight 6-bit scale levels and eight 6-bit min levels */
    uint8_t qs[KQ_QK / 2];
} kq_block_q4;

typedef struct kq_block_q5 {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[KQ_QK / 8];
    uint8_t qs[KQ_QK / 2];
} kq_block_q5;

typedef struct kq_block_q6 {
    uint8_t ql[KQ_QK / 2];
    uint8_t qh[KQ_QK / 4];
    int8_t scales[KQ_QK / 16];
    uint16_t d;
} kq_block_q6;

typedef struct kq_block_q8 {
    float d;
    int8_t qs[KQ_QK];
    int16_t bsums[KQ_QK / 16];
} kq_block_q8;

_Static_assert(sizeof(kq_block_q2) == 84, "q2_K block");
_Static_assert(sizeof(kq_block_q3) == 110, "q3_K block");
_Static_assert(sizeof(kq_block_q4) == 144, "q4_K block");
_Static_assert(sizeof(kq_block_q5) == 176, "q5_K block");
_Static_assert(sizeof(kq_block_q6) == 210, "q6_K block");
_Static_assert(sizeof(kq_block_q8) == 292, "q8_K block");

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

/* Sub-block j's 6-bit scale and min levels of a q4_K/q5_K block. */
static inline void kq_get_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Sub-block j's 6-bit level of a q3_K block (0..63, value = level - 32). */
static inline int kq_q3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/* After the sub-block searches, ggml encodes the sub-block scales, then
 * requantizes every element with the stored (fp16-rounded) scales:
 * level = clamp(nearest((x + dm) / d), lo, hi) + off per sub-block, where a
 * sub-block whose stored d is 0 keeps the levels of its search. For the
 * symmetric types (q3_K, q6_K) ggml divides x itself; dm is 0 there and
 * x + 0 differs from x only in the sign of a zero, which rounds to level 0
 * either way. */
typedef struct kq_plan {
    int n_sub, sub;   /* sub-blocks and their size */
    int lo, hi, off;  /* level range and storage offset */
    float d[16], dm[16];
} kq_plan;

/* The scalar kquants.c has these; the AVX2 file reuses all but the requantizer.
 * Each *_plan writes the block's scale fields exactly as ggml does and fills p.
 * Levels L[256] are the stored (non-negative) values throughout. */
void kq_requant_ref(const float *x, uint8_t *L, const kq_plan *p);
void kq_q2_plan_ref(kq_block_q2 *y, const float *scales, const float *mins, kq_plan *p);
void kq_q2_plan_imat(kq_block_q2 *y, const float *scales, const float *mins, const float *sw, kq_plan *p);
void kq_q3_plan_ref(kq_block_q3 *y, const float *scales, kq_plan *p);
void kq_q3_plan_imat(kq_block_q3 *y, const float *scales, const float *sw, kq_plan *p);
/* q4_K (nmax 15) and q5_K (nmax 31); clamp63: q5_K's _impl caps the levels
 * at 63 before packing, q4_K's does not. */
void kq_q45_plan_ref(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins, int nmax,
                     kq_plan *p);
void kq_q45_plan_imat(uint8_t *s12, uint16_t *d, uint16_t *dmin, const float *scales, const float *mins,
                      const float *sw, int nmax, bool clamp63, kq_plan *p);
/* False when the block was all zero and has been written in full. */
bool kq_q6_plan(kq_block_q6 *y, const float *scales, kq_plan *p);
void kq_q2_pack(kq_block_q2 *y, const uint8_t *L);
void kq_q3_pack(kq_block_q3 *y, const uint8_t *L);
void kq_q4_pack(kq_block_q4 *y, const uint8_t *L);
void kq_q5_pack(kq_block_q5 *y, const uint8_t *L);
void kq_q6_pack(kq_block_q6 *y, const uint8_t *L);

/* AVX2 versions (quantizers/kquants_avx2.c), chosen at run time. */
#if defined(__x86_64__) || defined(__i386__)
#define DSQ_KQ_HAVE_AVX2 1
void kq_avx2_quantize_row_q2_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_quantize_row_q3_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_quantize_row_q4_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_quantize_row_q5_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_quantize_row_q6_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_quantize_row_q8_K(const float *x, void *y, int64_t n, const float *qw);
void kq_avx2_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void kq_avx2_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void kq_avx2_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void kq_avx2_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void kq_avx2_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);
#else
#define DSQ_KQ_HAVE_AVX2 0
#endif

#endif
