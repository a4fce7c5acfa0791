/* Private to quantizers/intq_search*.c: the inner loop of the group search,
 *
 *     E = sum_i imp_i * |w_i - dequant(code(w_i))|^norm
 *
 * for one code grid, written once here and compiled three times: the scalar
 * reference (intq_search.c) and the AVX2 and AVX-512F copies
 * (intq_search_avx2.c, intq_search_avx512.c, their rows of DSQ_SIMD_SOURCES
 * in CMakeLists.txt), which the compiler vectorizes from this same source.
 * Sixteen lanes of partial sums fix the summation order, and there is no FMA
 * (-ffp-contract=off) and no reassociation, so all three give the same bits
 * (tests/test_intq_search.c holds them to it). The three files also get
 * -fno-trapping-math, which changes no result here: it only lets gcc turn
 * the selects below into vector blends. */
#ifndef DSQ_QUANTIZERS_INTQ_SEARCH_LANES_H
#define DSQ_QUANTIZERS_INTQ_SEARCH_LANES_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quantizers/intq.h"
#include "quantizers/intq_internal.h" /* the rule's params from a range */

/* The code grid of one ratio, as dsq_intq_code uses it. */
typedef struct dsq_intq_code_grid {
    float lo, hi; /* the clamp before rounding */
    float s, zf;  /* scale and zero point */
    float top;    /* the largest code */
} dsq_intq_code_grid;

enum { DSQ_INTQ_LANES = 16 };

/* Round half to even for |x| < 2^22 by the float format itself (what rintf
 * does in the default rounding mode) without a library call; larger values
 * only happen far outside the code range, where the clamp decides. */
static inline float dsq_intq_round_even(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (x + magic) - magic;
}

/* One value's signed code error dequant(code) - w, as dsq_intq_code gives codes. */
static inline float dsq_intq_code_delta(float w, const dsq_intq_code_grid *g)
{
    const float v = w < g->lo ? g->lo : w > g->hi ? g->hi : w;
    float r = dsq_intq_round_even(v / g->s) + g->zf;
    r = r < 0.0f ? 0.0f : r > g->top ? g->top : r;
    return (r - g->zf) * g->s - w;
}

static inline float dsq_intq_code_error(float w, const dsq_intq_code_grid *g)
{
    return fabsf(dsq_intq_code_delta(w, g));
}

/* d^2.4 (llm-compressor's mse norm) for finite d >= 0, without powf, which
 * took 70% of an RTN run: d^2 * 2^(0.4 log2 d), log2 by the atanh series on
 * a mantissa in [sqrt(1/2), sqrt(2)) and 2^f by Taylor's series on
 * [-1/2, 1/2] (both truncated below 1e-8; 1.8e-7 relative error at worst,
 * tests/test_intq_search.c). d below
 * 2^-60 gives 0: its power is below the smallest float anyway. */
static inline float dsq_intq_pow_2p4(float d)
{
    uint32_t b;
    memcpy(&b, &d, sizeof b);
    const uint32_t mb = (b & 0x007fffffu) | 0x3f800000u;
    float m1;
    memcpy(&m1, &mb, sizeof m1);
    const bool big = m1 > 1.41421356f; /* selects, not branches: one vector body */
    const float m = big ? m1 * 0.5f : m1;
    const int e = (int)(b >> 23) - 127 + (big ? 1 : 0);
    const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
    const float ln_m = 2.0f * t * (1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9)))));
    /* 0.4 log2 d = k0 + (2e - 5 k0) / 5 + 0.4 log2 m: the whole part k0 of
     * 2e / 5 apart (exact: 2e / 5 is never within 0.1 of a half), so the
     * float that carries the rest stays below 1 in size and keeps its bits */
    const float q = (float)(2 * e), k0 = dsq_intq_round_even(q * 0.2f);
    const float y = (q - 5.0f * k0) * 0.2f + 0.4f * (ln_m * 1.44269504f);
    const float k1 = dsq_intq_round_even(y), f = (y - k1) * 0.693147181f;
    const float k = k0 + k1;
    const float p =
        1.0f +
        f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720 + f / 5040))))));
    const uint32_t kb = (uint32_t)((int)k + 127) << 23;
    float two_k;
    memcpy(&two_k, &kb, sizeof two_k);
    return b < 0x21800000u ? 0.0f : d * d * (p * two_k); /* 0x21800000: 2^-60 */
}

/* acc[l] += imp * |err|^norm over n_blocks blocks of DSQ_INTQ_LANES values,
 * norm one of 2, 3 and 2.4. Inlined with a constant norm and with imp known
 * NULL or not, so the loop body keeps no branch. */
static inline __attribute__((always_inline)) void dsq_intq_lanes_acc(float acc[DSQ_INTQ_LANES], const float *w,
                                                                     const float *imp, int64_t n_blocks,
                                                                     const dsq_intq_code_grid *g, int norm10)
{
    for (int64_t i = 0; i < n_blocks * DSQ_INTQ_LANES; i += DSQ_INTQ_LANES)
        for (int l = 0; l < DSQ_INTQ_LANES; l++) {
            const float d = dsq_intq_code_error(w[i + l], g);
            const float q = norm10 == 20 ? d * d : norm10 == 30 ? d * d * d : dsq_intq_pow_2p4(d);
            acc[l] += (imp ? imp[i + l] : 1.0f) * q;
        }
}

/* The body of every copy of the lane sum: whole blocks of DSQ_INTQ_LANES
 * values into acc (which the caller zeroed) for the exponents 2, 3 and 2.4;
 * returns how many values it took (0 for another exponent). */
static inline __attribute__((always_inline)) int64_t dsq_intq_lanes_body(float acc[DSQ_INTQ_LANES], const float *w,
                                                                         int64_t n, const float *imp,
                                                                         const dsq_intq_code_grid *g, float norm)
{
    const int64_t nb = n / DSQ_INTQ_LANES;
    if (norm == 2.0f) {
        if (imp)
            dsq_intq_lanes_acc(acc, w, imp, nb, g, 20);
        else
            dsq_intq_lanes_acc(acc, w, NULL, nb, g, 20);
    } else if (norm == 3.0f) {
        if (imp)
            dsq_intq_lanes_acc(acc, w, imp, nb, g, 30);
        else
            dsq_intq_lanes_acc(acc, w, NULL, nb, g, 30);
    } else if (norm == 2.4f) {
        if (imp)
            dsq_intq_lanes_acc(acc, w, imp, nb, g, 24);
        else
            dsq_intq_lanes_acc(acc, w, NULL, nb, g, 24);
    } else {
        return 0;
    }
    return nb * DSQ_INTQ_LANES;
}

/* The body of every copy of the group fake quantization (dsq_intq_fake_group,
 * quantizers/intq_search.h): v = w * s (s NULL: w), the rule's params from
 * v's min and max (no clip), out = dequant(code(v)) / s, with the arithmetic
 * of dsq_intq_code; the blocks in lanes, the rest one by one. v: n floats of
 * scratch. Returns false when a value of v is not finite (out unspecified). */
static inline __attribute__((always_inline)) bool
dsq_intq_fake_group_body(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out)
{
    const int64_t nb = n / DSQ_INTQ_LANES * DSQ_INTQ_LANES;
    float mn[DSQ_INTQ_LANES], mx[DSQ_INTQ_LANES], nan[DSQ_INTQ_LANES];
    for (int l = 0; l < DSQ_INTQ_LANES; l++) mn[l] = INFINITY, mx[l] = -INFINITY, nan[l] = 0.0f;
    for (int64_t i = 0; i < nb; i += DSQ_INTQ_LANES)
        for (int l = 0; l < DSQ_INTQ_LANES; l++) {
            const float x = s ? w[i + l] * s[i + l] : w[i + l];
            v[i + l] = x;
            mn[l] = x < mn[l] ? x : mn[l];
            mx[l] = x > mx[l] ? x : mx[l];
            nan[l] += x * 0.0f; /* NaN once a value is infinite or NaN */
        }
    float lo = INFINITY, hi = -INFINITY, bad = 0.0f;
    for (int l = 0; l < DSQ_INTQ_LANES; l++) lo = mn[l] < lo ? mn[l] : lo, hi = mx[l] > hi ? mx[l] : hi, bad += nan[l];
    for (int64_t i = nb; i < n; i++) {
        const float x = s ? w[i] * s[i] : w[i];
        v[i] = x;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        bad += x * 0.0f;
    }
    if (bad != 0.0f || n <= 0) return false;
    float scale, t;
    int zero;
    dsq_intq_range_params(lo, hi, p, 1.0f, &scale, &zero, &t);
    const float zf = (float)zero, top = (float)dsq_intq_maxq(p->bits);
    for (int64_t i = 0; i < n; i++) {
        float r = dsq_intq_round_even(v[i] / scale) + zf;
        r = r < 0.0f ? 0.0f : r > top ? top : r;
        const float q = (r - zf) * scale;
        out[i] = s ? q / s[i] : q;
    }
    return true;
}

/* d[i] = dsq_intq_code_delta(w[i], g) for n values (the Gram objective's
 * error vector), the same in every copy. */
static inline __attribute__((always_inline)) void dsq_intq_deltas_body(const float *w, int64_t n,
                                                                       const dsq_intq_code_grid *g, float *d)
{
    const dsq_intq_code_grid c = *g; /* a local copy: no aliasing with d */
    for (int64_t i = 0; i < n; i++) d[i] = dsq_intq_code_delta(w[i], &c);
}

void dsq_intq_deltas_avx2(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d);
void dsq_intq_deltas_avx512(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d);
void dsq_intq_deltas_ref(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d);

bool dsq_intq_fake_group_avx2(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v,
                              float *out);
bool dsq_intq_fake_group_avx512(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v,
                                float *out);
bool dsq_intq_fake_group_ref(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out);

/* The copies (quantizers/intq_search_avx2.c, _avx512.c): only called when
 * the CPU has the instruction set (dsq_cpu_has). Same contract as the body. */
int64_t dsq_intq_lanes_avx2(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                            const dsq_intq_code_grid *g, float norm);
int64_t dsq_intq_lanes_avx512(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                              const dsq_intq_code_grid *g, float norm);
/* The scalar reference copy (intq_search.c), for tests. */
int64_t dsq_intq_lanes_ref(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                           const dsq_intq_code_grid *g, float norm);

#endif
