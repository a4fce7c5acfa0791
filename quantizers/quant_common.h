/* Pieces shared by the GGUF block quantizers: the block layouts of every type
 * we handle, ggml's rounding helper, the IQ4 value table and the two
 * least-squares level searches that several types reuse.
 *
 * Everything here follows ggml/src/ggml-common.h and ggml/src/ggml-quants.c at
 * llama.cpp c392e509 (see /work/shared/design/algorithms-notes.md section 2).
 * Byte-exact output depends on evaluating each float operation on its own, in
 * the order written here: the build uses -ffp-contract=off. */
#ifndef DSQ_QUANTIZERS_QUANT_COMMON_H
#define DSQ_QUANTIZERS_QUANT_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

#define DSQ_QK4_0 32
#define DSQ_QK4_1 32
#define DSQ_QK5_0 32
#define DSQ_QK5_1 32
#define DSQ_QK8_0 32
#define DSQ_QK8_1 32
#define DSQ_QK4_NL 32

/* Blocks with max |x| below this are treated as all zero (ggml's GROUP_MAX_EPS). */
#define DSQ_GROUP_MAX_EPS 1e-15f

/* ---- block layouts (little-endian; fp16 fields are IEEE half bit patterns) ----
 * Byte arrays plus fp16 fields, so the structs have no padding and can be read
 * straight from a GGUF tensor on a little-endian host. They are public: the
 * runtime's dot kernels (runtime/cpu/qgemv*.c) read the same blocks. */

typedef struct dsq_block_q4_0 {
    uint16_t d;
    uint8_t qs[16]; /* low nibble: element j, high nibble: element j + 16 */
} dsq_block_q4_0;

typedef struct dsq_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[16];
} dsq_block_q4_1;

typedef struct dsq_block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* bit j of the LE uint32: 5th bit of element j */
    uint8_t qs[16];
} dsq_block_q5_0;

typedef struct dsq_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[16];
} dsq_block_q5_1;

typedef struct dsq_block_q8_0 {
    uint16_t d;
    int8_t qs[32];
} dsq_block_q8_0;

typedef struct dsq_block_q8_1 {
    uint16_t d;
    uint16_t s; /* fp16(d * sum(qs)) */
    int8_t qs[32];
} dsq_block_q8_1;

typedef struct dsq_block_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16]; /* sums of each 16 qs */
} dsq_block_q8_K;

typedef struct dsq_block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];
} dsq_block_iq4_nl;

typedef struct dsq_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h; /* bits 4-5 of the 6-bit block scales, 2 bits per block */
    uint8_t scales_l[4];
    uint8_t qs[128];
} dsq_block_iq4_xs;

typedef struct dsq_block_q2_K {
    uint8_t scales[DSQ_QK_K / 16]; /* low nibble: scale level, high nibble: min level */
    uint8_t qs[DSQ_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} dsq_block_q2_K;

typedef struct dsq_block_q3_K {
    uint8_t hmask[DSQ_QK_K / 8];
    uint8_t qs[DSQ_QK_K / 4];
    uint8_t scales[12]; /* sixteen 6-bit levels */
    uint16_t d;
} dsq_block_q3_K;

typedef struct dsq_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12]; /* eight 6-bit scale levels and eight 6-bit min levels */
    uint8_t qs[DSQ_QK_K / 2];
} dsq_block_q4_K;

typedef struct dsq_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[DSQ_QK_K / 8];
    uint8_t qs[DSQ_QK_K / 2];
} dsq_block_q5_K;

typedef struct dsq_block_q6_K {
    uint8_t ql[DSQ_QK_K / 2];
    uint8_t qh[DSQ_QK_K / 4];
    int8_t scales[DSQ_QK_K / 16];
    uint16_t d;
} dsq_block_q6_K;

_Static_assert(sizeof(dsq_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(dsq_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(dsq_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(dsq_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(dsq_block_q6_K) == 210, "q6_K block");

_Static_assert(sizeof(dsq_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(dsq_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(dsq_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(dsq_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(dsq_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(dsq_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(dsq_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(dsq_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(dsq_block_iq4_xs) == 136, "iq4_xs block");

/* ---- helpers ---- */

/* Sub-block j's 6-bit scale and min levels of a q4_K/q5_K block. */
static inline void dsq_kq_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
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
static inline int dsq_kq_q3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}


/* ggml's nearest_int: round half to even through the 1.5*2^23 trick; valid
 * for |f| <= 4194303, which every caller guarantees. */
static inline int dsq_nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* The IQ4_NL / IQ4_XS non-linear levels (ggml's kvalues_iq4nl). */
extern const int8_t dsq_kvalues_iq4nl[16];

/* Index of the entry of the sorted table val[n] nearest to x; ties between
 * neighbours go to the upper one. Same comparisons as ggml's best_index_int8
 * at c392e509 (the later branch-free rewrite rounds differently). */
static inline int dsq_best_index_int8(int n, const int8_t *val, float x)
{
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

/* ggml's make_qx_quants: symmetric levels L[i] = l + nmax, l in [-nmax, nmax-1],
 * with a least-squares scale and a search over 18 nearby inverse scales.
 * rmse_type picks the default weights when qw is NULL (1: x^2, 2: 1, 3: |x|,
 * else sqrt|x|); 0 means plain rounding; negative stops after the first fit.
 * Returns the scale (0 for an all-zero group). */
float dsq_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw);

/* ggml's make_qkx3_quants: asymmetric levels L[i] in [0, nmax] with scale and
 * min fitted by weighted least squares over nstep+1 trial inverse scales
 * (rmin + rdelta*is + nmax)/(max - min). weights NULL means x^2. *the_min gets
 * -min (>= 0); returns the scale. Laux is scratch for n levels. */
float dsq_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);

#endif
