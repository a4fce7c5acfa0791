/* The type table and the float conversions of core/fpconv.c.
 *
 * Decoding is checked exhaustively against an ldexp reference; encoding is
 * checked around every representable value (the value, the midpoints to its
 * neighbours and the floats just either side of them), at the edges (overflow,
 * smallest subnormals, Inf, NaN, -0) and on millions of random inputs, against
 * a reference encoder that rounds with double arithmetic and looks the result
 * up in the decoded code table. Set DSQ_TEST_EXHAUSTIVE=1 to also compare all
 * 2^32 float bit patterns (minutes; not part of the normal run). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "core/finite.h"
#include "tests/helpers/testutil.h"

/* ---- reference formats, from first principles ---- */

typedef struct ref_fmt {
    const char *name;
    int bits;         /* 16 or 8 */
    int ebits;        /* exponent bits */
    int mbits;        /* mantissa bits */
    int bias;         /* exponent bias */
    bool fn;          /* E4M3FN: no Inf, the top exponent holds normals, only S.1111.111 is NaN */
    bool saturate;    /* overflow and Inf go to the largest finite value */
    uint32_t nan_out; /* NaN magnitude the encoder must produce */
    /* filled by ref_init: every non-negative finite value, indexed by code */
    int n_finite;
    double *values;
} ref_fmt;

static ref_fmt g_f16 = {"f16", 16, 5, 10, 15, false, false, 0x7e00, 0, NULL};
static ref_fmt g_bf16 = {"bf16", 16, 8, 7, 127, false, false, 0x7fc0, 0, NULL};
static ref_fmt g_e4m3 = {"e4m3", 8, 4, 3, 7, true, true, 0x7f, 0, NULL};
static ref_fmt g_e5m2 = {"e5m2", 8, 5, 2, 15, false, true, 0x7e, 0, NULL};

static uint32_t sign_bit(const ref_fmt *f) { return 1u << (f->bits - 1); }

static bool ref_is_nan(const ref_fmt *f, uint32_t c)
{
    uint32_t mag = c & (sign_bit(f) - 1), emax = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
    uint32_t e = mag >> f->mbits, m = mag & mmask;
    if (f->fn) return e == emax && m == mmask;
    return e == emax && m != 0;
}

/* Value of code c; NaN codes give NaN. */
static double ref_decode(const ref_fmt *f, uint32_t c)
{
    uint32_t mag = c & (sign_bit(f) - 1), emax = (1u << f->ebits) - 1;
    int e = (int)(mag >> f->mbits), m = (int)(mag & ((1u << f->mbits) - 1));
    double v;
    if (ref_is_nan(f, c))
        v = NAN;
    else if (!f->fn && e == (int)emax)
        v = INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - f->bias - f->mbits);
    else
        v = ldexp(m + (1 << f->mbits), e - f->bias - f->mbits);
    return (c & sign_bit(f)) ? -v : v;
}

static void ref_init(ref_fmt *f)
{
    if (f->values) return;
    f->values = malloc(sizeof(double) << f->bits);
    int n = 0;
    for (uint32_t c = 0; c < sign_bit(f); c++) {
        double v = ref_decode(f, c);
        if (isnan(v) || isinf(v)) break; /* codes are ordered by value up to here */
        f->values[n++] = v;
    }
    f->n_finite = n;
}

static int setup_refs(void **state)
{
    ref_init(&g_f16);
    ref_init(&g_bf16);
    ref_init(&g_e4m3);
    ref_init(&g_e5m2);
    return 0;
}

static int teardown_refs(void **state)
{
    ref_fmt *all[] = {&g_f16, &g_bf16, &g_e4m3, &g_e5m2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(all[i]->values);
        all[i]->values = NULL;
    }
    return 0;
}

/* Code of a representable non-negative value (binary search of the table). */
static uint32_t ref_code_of(const ref_fmt *f, double v)
{
    int lo = 0, hi = f->n_finite - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (f->values[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return f->values[lo] == v ? (uint32_t)lo : UINT32_MAX; /* UINT32_MAX: a bug in the reference */
}

/* Rounds x to the format: one rounding to nearest, ties to even, from x's exact value. */
static uint32_t ref_encode(const ref_fmt *f, double x)
{
    uint32_t sign = signbit(x) ? sign_bit(f) : 0;
    if (isnan(x)) return sign | f->nan_out;
    uint32_t max_code = (uint32_t)f->n_finite - 1;
    uint32_t over = f->saturate ? max_code : max_code + 1; /* Inf follows the largest finite code */
    double a = fabs(x);
    if (isinf(a)) return sign | over;
    int ex;
    (void)frexp(a, &ex); /* a = fr * 2^ex, fr in [0.5, 1) */
    int qexp = (ex - 1 < 1 - f->bias ? 1 - f->bias : ex - 1) - f->mbits;
    double n = rint(ldexp(a, -qexp)); /* exact scaling; rint ties to even */
    double r = ldexp(n, qexp);
    if (r > f->values[max_code]) return sign | over;
    return sign | ref_code_of(f, r);
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ref_encode for a float input: a bf16 NaN keeps its top payload bits and is
 * made quiet (as ggml does); other formats have a single NaN pattern. */
static uint32_t ref_encode_f32(const ref_fmt *f, float x)
{
    if (isnan(x) && f->bits == 16 && f->ebits == 8) return (bits_of_f32(x) >> 16) | 0x40;
    return ref_encode(f, x);
}

/* The library's scalar encoder/decoder for a format. */
static uint32_t lib_encode(const ref_fmt *f, float x)
{
    if (f == &g_f16) return dsq_f32_to_f16(x);
    if (f == &g_bf16) return dsq_f32_to_bf16(x);
    if (f == &g_e4m3) return dsq_f32_to_e4m3(x);
    return dsq_f32_to_e5m2(x);
}

static float lib_decode(const ref_fmt *f, uint32_t c)
{
    if (f == &g_f16) return dsq_f16_to_f32((uint16_t)c);
    if (f == &g_bf16) return dsq_bf16_to_f32((uint16_t)c);
    if (f == &g_e4m3) return dsq_e4m3_to_f32((uint8_t)c);
    return dsq_e5m2_to_f32((uint8_t)c);
}

static dsq_type lib_type(const ref_fmt *f)
{
    if (f == &g_f16) return DSQ_TYPE_F16;
    if (f == &g_bf16) return DSQ_TYPE_BF16;
    if (f == &g_e4m3) return DSQ_TYPE_F8_E4M3;
    return DSQ_TYPE_F8_E5M2;
}

/* The library's encoder from a double, through dsq_convert_row(F64 -> fmt). */
static uint32_t lib_encode_f64(const ref_fmt *f, double x)
{
    uint8_t out[2] = {0, 0};
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F64, &x, lib_type(f), out, 1), DSQ_OK);
    return f->bits == 8 ? out[0] : (uint32_t)out[0] | (uint32_t)out[1] << 8;
}

static void check_encode(const ref_fmt *f, float x)
{
    uint32_t want = ref_encode_f32(f, x), got = lib_encode(f, x);
    if (want != got) fail_msg("%s(%a): got 0x%x, want 0x%x", f->name, (double)x, got, want);
}

static void check_encode_f64(const ref_fmt *f, double x)
{
    uint32_t want = ref_encode(f, x), got = lib_encode_f64(f, x);
    if (want != got) fail_msg("%s from f64 %a: got 0x%x, want 0x%x", f->name, x, got, want);
}

/* ---- decoding, exhaustive ---- */

static void check_decode_all(const ref_fmt *f)
{
    for (uint32_t c = 0; c < (1u << f->bits); c++) {
        float got = lib_decode(f, c);
        double want = ref_decode(f, c);
        if (isnan(want)) {
            if (!isnan(got) || !signbit(got) != !(c & sign_bit(f))) fail_msg("%s 0x%x: want NaN", f->name, c);
            /* f16 (and so E5M2) NaN: made quiet, payload kept, like F16C's vcvtph2ps. */
            uint32_t want_bits =
                (c & sign_bit(f) ? 0x80000000u : 0) | 0x7fc00000u | ((c & ((1u << f->mbits) - 1)) << (23 - f->mbits));
            if (f == &g_f16 || f == &g_e5m2) assert_int_equal(bits_of_f32(got), want_bits);
            continue;
        }
        if ((double)got != want || !signbit(got) != !signbit(want))
            fail_msg("%s 0x%x: got %a, want %a", f->name, c, (double)got, want);
    }
}

static void test_decode_f16(void **state) { check_decode_all(&g_f16); }
static void test_decode_bf16(void **state) { check_decode_all(&g_bf16); }
static void test_decode_e4m3(void **state) { check_decode_all(&g_e4m3); }
static void test_decode_e5m2(void **state) { check_decode_all(&g_e5m2); }

/* decode -> encode is the identity on every non-NaN code, from f32 and from f64;
 * NaN codes come back as the format's quiet NaN with the sign kept, and E5M2's
 * Inf saturates to the largest finite value. */
static void check_roundtrip_all(const ref_fmt *f)
{
    for (uint32_t c = 0; c < (1u << f->bits); c++) {
        float v = lib_decode(f, c);
        uint32_t back = lib_encode(f, v), back64 = lib_encode_f64(f, (double)v);
        uint32_t want = c;
        if (isinf(v) && f->saturate) want = (c & sign_bit(f)) | ((uint32_t)f->n_finite - 1); /* E5M2 Inf */
        if (ref_is_nan(f, c)) {
            want = (c & sign_bit(f)) | f->nan_out;
            if (f == &g_bf16) want = c | 0x40; /* bf16 keeps the payload, like ggml */
            assert_true(ref_is_nan(f, back));
            assert_true(ref_is_nan(f, back64));
            back64 = want; /* f64 NaN payloads are not specified */
        }
        if (back != want || back64 != want)
            fail_msg("%s 0x%x -> %a -> 0x%x (f64: 0x%x), want 0x%x", f->name, c, (double)v, back, back64, want);
    }
}

static void test_roundtrip_f16(void **state) { check_roundtrip_all(&g_f16); }
static void test_roundtrip_bf16(void **state) { check_roundtrip_all(&g_bf16); }
static void test_roundtrip_e4m3(void **state) { check_roundtrip_all(&g_e4m3); }
static void test_roundtrip_e5m2(void **state) { check_roundtrip_all(&g_e5m2); }

/* ---- encoding around every representable value ---- */

static uint32_t even_of(uint32_t a, uint32_t b) { return (a & 1) ? b : a; }

static void check_pair(const ref_fmt *f, uint32_t c, float sgn)
{
    double v0 = f->values[c], v1 = f->values[c + 1];
    float mid = (float)((v0 + v1) / 2); /* exact: midpoints need one more bit than the format */
    assert_true((double)mid == (v0 + v1) / 2);
    uint32_t s = sgn < 0 ? sign_bit(f) : 0;
    assert_int_equal(lib_encode(f, sgn * (float)v0), s | c);
    assert_int_equal(lib_encode(f, sgn * mid), s | even_of(c, c + 1));
    assert_int_equal(lib_encode(f, sgn * nextafterf(mid, INFINITY)), s | (c + 1));
    assert_int_equal(lib_encode(f, sgn * nextafterf(mid, 0.0f)), s | c);
    /* From f64 the exact midpoint still ties, and a hair either side decides. */
    double dmid = (v0 + v1) / 2, eps = (v1 - v0) * 0x1p-30;
    assert_int_equal(lib_encode_f64(f, sgn * dmid), s | even_of(c, c + 1));
    assert_int_equal(lib_encode_f64(f, sgn * (dmid + eps)), s | (c + 1));
    assert_int_equal(lib_encode_f64(f, sgn * (dmid - eps)), s | c);
}

static void check_neighbourhoods(const ref_fmt *f)
{
    for (uint32_t c = 0; c + 1 < (uint32_t)f->n_finite; c++) {
        check_pair(f, c, 1.0f);
        check_pair(f, c, -1.0f);
    }
}

static void test_encode_neighbourhoods_f16(void **state) { check_neighbourhoods(&g_f16); }
static void test_encode_neighbourhoods_bf16(void **state) { check_neighbourhoods(&g_bf16); }
static void test_encode_neighbourhoods_e4m3(void **state) { check_neighbourhoods(&g_e4m3); }
static void test_encode_neighbourhoods_e5m2(void **state) { check_neighbourhoods(&g_e5m2); }

static void test_encode_f16_edges(void **state)
{
    assert_int_equal(dsq_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(dsq_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(dsq_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(dsq_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dsq_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(dsq_f32_to_f16(65520.0f), 0x7c00); /* the tie above the largest finite goes to Inf */
    assert_int_equal(dsq_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(dsq_f32_to_f16(FLT_MAX), 0x7c00);
    assert_int_equal(dsq_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(dsq_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(dsq_f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(dsq_f32_to_f16(0x1p-25f), 0x0000); /* tie to even zero */
    assert_int_equal(dsq_f32_to_f16(-0x1p-25f), 0x8000);
    assert_int_equal(dsq_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(dsq_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 units: tie to even 2 */
    assert_int_equal(dsq_f32_to_f16(0x1.4p-24f), 0x0001);
    assert_int_equal(dsq_f32_to_f16(nextafterf(0x1p-14f, 0.0f)), 0x0400); /* rounds up into the normals */
    assert_int_equal(dsq_f32_to_f16(FLT_TRUE_MIN), 0x0000);
    assert_int_equal(dsq_f32_to_f16(-FLT_TRUE_MIN), 0x8000);
    assert_int_equal(dsq_f32_to_f16(FLT_MIN), 0x0000);
    /* NaN: ggml's sign|0x7E00, whatever the payload or signalling bit. */
    assert_int_equal(dsq_f32_to_f16(NAN), 0x7e00);
    assert_int_equal(dsq_f32_to_f16(-NAN), 0xfe00);
    assert_int_equal(dsq_f32_to_f16(f32_of_bits(0x7f800001u)), 0x7e00);
    assert_int_equal(dsq_f32_to_f16(f32_of_bits(0xffbfffffu)), 0xfe00);
    assert_true(isinf(dsq_f16_to_f32(0x7c00)) && dsq_f16_to_f32(0xfc00) < 0);
    assert_true(signbit(dsq_f16_to_f32(0x8000)) && dsq_f16_to_f32(0x8000) == 0.0f);
}

static void test_encode_bf16_edges(void **state)
{
    assert_int_equal(dsq_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(dsq_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x3f818000u)), 0x3f82); /* tie, odd goes up */
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(dsq_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds past the largest finite: Inf */
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(dsq_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(dsq_f32_to_bf16(FLT_TRUE_MIN), 0x0000);
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x00008000u)), 0x0000); /* subnormal tie to even */
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x00018000u)), 0x0002);
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x00010000u)), 0x0001); /* smallest bf16 subnormal */
    /* NaN stays NaN, made quiet, top payload bits kept (ggml_compute_fp32_to_bf16). */
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x7f800001u)), 0x7fc0);
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0xff812345u)), 0xffc1);
    assert_int_equal(dsq_f32_to_bf16(f32_of_bits(0x7fc00000u)), 0x7fc0);
}

static void test_encode_fp8_saturation(void **state)
{
    /* E4M3FN: 448 is the largest finite; 464 ties to even 448; beyond saturates. */
    assert_int_equal(dsq_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(dsq_f32_to_e4m3(464.0f), 0x7e);
    assert_int_equal(dsq_f32_to_e4m3(480.0f), 0x7e); /* torch gives NaN here */
    assert_int_equal(dsq_f32_to_e4m3(1e30f), 0x7e);
    assert_int_equal(dsq_f32_to_e4m3(FLT_MAX), 0x7e);
    assert_int_equal(dsq_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(dsq_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(dsq_f32_to_e4m3(-500.0f), 0xfe);
    assert_int_equal(dsq_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(dsq_f32_to_e4m3(-NAN), 0xff);
    assert_int_equal(dsq_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(dsq_f32_to_e4m3(0x1p-9f), 0x01);   /* smallest subnormal */
    assert_int_equal(dsq_f32_to_e4m3(0x1p-10f), 0x00);  /* tie to even zero */
    assert_int_equal(dsq_f32_to_e4m3(0x1.8p-9f), 0x02); /* 1.5 units: tie to even 2 */
    assert_int_equal(dsq_f32_to_e4m3(nextafterf(0x1p-10f, 1.0f)), 0x01);
    assert_int_equal(dsq_f32_to_e4m3(1.0f), 0x38);
    assert_true(isnan(dsq_e4m3_to_f32(0x7f)) && isnan(dsq_e4m3_to_f32(0xff)));
    assert_true(dsq_e4m3_to_f32(0x7e) == 448.0f && dsq_e4m3_to_f32(0x78) == 256.0f);
    /* E5M2: 57344 is the largest finite; 61440 ties to the odd code's even neighbour (Inf) but saturates. */
    assert_int_equal(dsq_f32_to_e5m2(57344.0f), 0x7b);
    assert_int_equal(dsq_f32_to_e5m2(61440.0f), 0x7b);
    assert_int_equal(dsq_f32_to_e5m2(65536.0f), 0x7b);
    assert_int_equal(dsq_f32_to_e5m2(INFINITY), 0x7b);
    assert_int_equal(dsq_f32_to_e5m2(-INFINITY), 0xfb);
    assert_int_equal(dsq_f32_to_e5m2(NAN), 0x7e);
    assert_int_equal(dsq_f32_to_e5m2(-NAN), 0xfe);
    assert_int_equal(dsq_f32_to_e5m2(0x1p-16f), 0x01);
    assert_int_equal(dsq_f32_to_e5m2(0x1p-17f), 0x00);
    assert_int_equal(dsq_f32_to_e5m2(-0.0f), 0x80);
    assert_true(isinf(dsq_e5m2_to_f32(0x7c)) && isnan(dsq_e5m2_to_f32(0x7d)));
}

/* Rounding through float first would give the wrong answer for these doubles:
 * (float)d lands exactly on a tie of the narrow format. */
static void test_f64_rounds_once(void **state)
{
    double d = 1.0 + 0x1p-11 + 0x1p-40; /* just above the f16 tie between 1 and 1+2^-10 */
    assert_int_equal(dsq_f32_to_f16((float)d), 0x3c00);
    assert_int_equal(lib_encode_f64(&g_f16, d), 0x3c01);
    assert_int_equal(lib_encode_f64(&g_f16, -d), 0xbc01);
    d = 1.0 + 0x1p-8 + 0x1p-40; /* bf16 */
    assert_int_equal(dsq_f32_to_bf16((float)d), 0x3f80);
    assert_int_equal(lib_encode_f64(&g_bf16, d), 0x3f81);
    d = 1.0 + 0x1p-4 + 0x1p-40; /* e4m3 */
    assert_int_equal(dsq_f32_to_e4m3((float)d), 0x38);
    assert_int_equal(lib_encode_f64(&g_e4m3, d), 0x39);
    d = 1.0 + 0x1p-3 + 0x1p-40; /* e5m2 */
    assert_int_equal(dsq_f32_to_e5m2((float)d), 0x3c);
    assert_int_equal(lib_encode_f64(&g_e5m2, d), 0x3d);
    d = 0x1p-25 + 0x1p-60; /* just above the f16 subnormal tie at half the smallest subnormal */
    assert_int_equal(lib_encode_f64(&g_f16, d), 0x0001);
    /* f64 -> f32 is a plain rounding; f64 specials. */
    double src[4] = {1.0 + 0x1p-24 + 0x1p-50, INFINITY, -NAN, 1e300};
    float out[4];
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F64, src, DSQ_TYPE_F32, out, 4), DSQ_OK);
    assert_true(out[0] == 1.0f + 0x1p-23f && isinf(out[1]) && isnan(out[2]) && isinf(out[3]));
    assert_int_equal(lib_encode_f64(&g_f16, 1e300), 0x7c00);
    assert_int_equal(lib_encode_f64(&g_e4m3, -1e300), 0xfe);
    assert_int_equal(lib_encode_f64(&g_f16, 1e-300), 0x0000);
    assert_int_equal(lib_encode_f64(&g_f16, NAN), 0x7e00);
}

/* ---- random inputs against the reference ---- */

static float random_float(uint64_t *rng, int emin, int emax)
{
    uint64_t r = dsq_test_rand(rng);
    if (r & 1) return f32_of_bits((uint32_t)(r >> 32)); /* any bit pattern */
    int e = emin + (int)((r >> 8) % (uint64_t)(emax - emin + 1));
    float m = 1.0f + (float)((r >> 40) & 0x7fffff) * 0x1p-23f;
    return ((r >> 2) & 1 ? -1.0f : 1.0f) * ldexpf(m, e); /* values around the format's range */
}

static void check_random(const ref_fmt *f, int n, int emin, int emax)
{
    uint64_t rng = 0x5eed0000u + (uint64_t)f->bits * 131 + (uint64_t)f->mbits;
    for (int i = 0; i < n; i++) {
        float x = random_float(&rng, emin, emax);
        check_encode(f, x);
        if ((i & 15) == 0) {
            /* Add bits below float precision: the f64 path must see them. */
            double d = (double)x * (1.0 + (double)(dsq_test_rand(&rng) >> 11) * 0x1p-80);
            if (isfinite(d)) check_encode_f64(f, d);
        }
    }
}

static void test_random_f16(void **state) { check_random(&g_f16, 2000000, -27, 17); }
static void test_random_bf16(void **state) { check_random(&g_bf16, 2000000, -136, 127); }
static void test_random_e4m3(void **state) { check_random(&g_e4m3, 500000, -11, 10); }
static void test_random_e5m2(void **state) { check_random(&g_e5m2, 500000, -18, 17); }

/* Opt-in: every float bit pattern, every format. */
static void test_exhaustive_f32(void **state)
{
    const char *env = getenv("DSQ_TEST_EXHAUSTIVE");
    if (!env || strcmp(env, "1") != 0) {
        DSQ_TEST_SKIP_ENV("set DSQ_TEST_EXHAUSTIVE=1 to compare all 2^32 floats");
    }
    ref_fmt *all[] = {&g_f16, &g_bf16, &g_e4m3, &g_e5m2};
    for (size_t k = 0; k < 4; k++) {
        long long bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static, 1 << 20)
        for (long long u = 0; u <= 0xffffffffLL; u++) {
            float x = f32_of_bits((uint32_t)u);
            if (ref_encode_f32(all[k], x) != lib_encode(all[k], x)) bad++;
        }
        if (bad) fail_msg("%s: %lld floats encode wrongly", all[k]->name, bad);
    }
}

/* ---- rows ---- */

static const dsq_type k_float_types[] = {DSQ_TYPE_F64,  DSQ_TYPE_F32,     DSQ_TYPE_F16,
                                         DSQ_TYPE_BF16, DSQ_TYPE_F8_E4M3, DSQ_TYPE_F8_E5M2};

/* Scalar encode of one double into type t (the f64 path rounds once). */
static void encode_one(dsq_type t, double v, uint8_t *out)
{
    switch (t) {
    case DSQ_TYPE_F64: memcpy(out, &v, 8); break;
    case DSQ_TYPE_F32: {
        float f = (float)v;
        memcpy(out, &f, 4);
        break;
    }
    default: {
        const ref_fmt *f = t == DSQ_TYPE_F16       ? &g_f16
                           : t == DSQ_TYPE_BF16    ? &g_bf16
                           : t == DSQ_TYPE_F8_E4M3 ? &g_e4m3
                                                   : &g_e5m2;
        uint32_t c = ref_encode(f, v);
        memcpy(out, &c, (size_t)f->bits / 8); /* little-endian */
    }
    }
}

static size_t tsize(dsq_type t) { return dsq_type_get((int)t)->block_bytes; }

/* Every pair of float types over 1000 values (several internal chunks), at an
 * odd byte offset: each element equals the reference's single rounding of the
 * source element. */
static void test_convert_row_all_pairs(void **state)
{
    enum { N = 1000 };
    double vals[N];
    uint64_t rng = 7;
    for (int i = 0; i < N; i++) vals[i] = (double)dsq_test_randn(&rng) * ldexp(1.0, (int)(i % 40) - 20);
    vals[0] = 0.0, vals[1] = -0.0, vals[2] = INFINITY, vals[3] = -INFINITY, vals[4] = 1e6,
    vals[5] = 1.0 + 0x1p-11 + 0x1p-40;
    uint8_t *src = malloc(N * 8 + 1), *dst = malloc(N * 8 + 1), want[8];
    for (size_t a = 0; a < 6; a++) {
        dsq_type st = k_float_types[a];
        for (int i = 0; i < N; i++) encode_one(st, vals[i], src + 1 + i * tsize(st));
        for (size_t b = 0; b < 6; b++) {
            dsq_type dt = k_float_types[b];
            assert_int_equal(dsq_convert_row(st, src + 1, dt, dst + 1, N), DSQ_OK);
            for (int i = 0; i < N; i++) {
                double sv;
                if (st == DSQ_TYPE_F64) {
                    memcpy(&sv, src + 1 + i * 8, 8);
                } else {
                    float f;
                    assert_int_equal(dsq_to_f32_row(st, src + 1 + i * tsize(st), &f, 1), DSQ_OK);
                    sv = f;
                }
                encode_one(dt, sv, want);
                if (memcmp(dst + 1 + i * tsize(dt), want, tsize(dt)) != 0)
                    fail_msg("%s -> %s element %d (%a) differs", dsq_type_name(st), dsq_type_name(dt), i, sv);
            }
        }
    }
    free(src);
    free(dst);
}

static void test_convert_row_rejects(void **state)
{
    uint8_t buf[64] = {0}, out[64];
    assert_int_equal(dsq_convert_row(DSQ_TYPE_Q4_0, buf, DSQ_TYPE_F32, out, 32), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "q4_0"));
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F32, buf, DSQ_TYPE_I32, out, 4), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "i32"));
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F32, buf, (dsq_type)5, out, 4), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F32, buf, DSQ_TYPE_F16, out, 0), DSQ_OK);
    assert_int_equal(dsq_convert_row(DSQ_TYPE_F32, buf, DSQ_TYPE_F16, out, SIZE_MAX / 2), DSQ_ERR_ARG);
    float f[4];
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_Q8_0, buf, f, 32), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_to_f32_row((dsq_type)DSQ_TYPE_COUNT, buf, f, 1), DSQ_ERR_UNSUPPORTED);
}

static void test_to_f32_row_integers(void **state)
{
    float out[4];
    const int8_t i8[4] = {INT8_MIN, -1, 0, INT8_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_I8, i8, out, 4), DSQ_OK);
    assert_true(out[0] == -128.0f && out[1] == -1.0f && out[2] == 0.0f && out[3] == 127.0f);
    const int16_t i16[4] = {INT16_MIN, -2, 3, INT16_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_I16, i16, out, 4), DSQ_OK);
    assert_true(out[0] == -32768.0f && out[1] == -2.0f && out[2] == 3.0f && out[3] == 32767.0f);
    const int32_t i32[4] = {INT32_MIN, 16777217, -7, INT32_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_I32, i32, out, 4), DSQ_OK);
    assert_true(out[0] == -0x1p31f && out[1] == 16777216.0f && out[2] == -7.0f && out[3] == 0x1p31f);
    const int64_t i64[4] = {INT64_MIN, -5, 1, INT64_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_I64, i64, out, 4), DSQ_OK);
    assert_true(out[0] == -0x1p63f && out[1] == -5.0f && out[2] == 1.0f && out[3] == 0x1p63f);
    const uint8_t u8[4] = {0, 1, 200, 255};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_U8, u8, out, 4), DSQ_OK);
    assert_true(out[0] == 0.0f && out[1] == 1.0f && out[2] == 200.0f && out[3] == 255.0f);
    const uint16_t u16[4] = {0, 1, 40000, UINT16_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_U16, u16, out, 4), DSQ_OK);
    assert_true(out[2] == 40000.0f && out[3] == 65535.0f);
    const uint32_t u32[4] = {0, 3000000000u, 16777217u, UINT32_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_U32, u32, out, 4), DSQ_OK);
    assert_true(out[1] == 3e9f && out[2] == 16777216.0f && out[3] == 0x1p32f);
    const uint64_t u64[4] = {0, 1, 1ull << 63, UINT64_MAX};
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_U64, u64, out, 4), DSQ_OK);
    assert_true(out[1] == 1.0f && out[2] == 0x1p63f && out[3] == 0x1p64f);
    const uint8_t b[4] = {0, 1, 2, 255}; /* a hostile bool byte is still true */
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_BOOL, b, out, 4), DSQ_OK);
    assert_true(out[0] == 0.0f && out[1] == 1.0f && out[2] == 1.0f && out[3] == 1.0f);
    /* Unaligned integer rows (rows can sit at any offset of a mapped file). */
    uint8_t raw[1 + 8 * 2];
    int64_t v[2] = {-3, 1ll << 40};
    memcpy(raw + 1, v, sizeof v);
    assert_int_equal(dsq_to_f32_row(DSQ_TYPE_I64, raw + 1, out, 2), DSQ_OK);
    assert_true(out[0] == -3.0f && out[1] == 0x1p40f);
}

/* ---- the type table ---- */

typedef struct type_row {
    dsq_type t;
    const char *name;
    uint32_t be, bb; /* elements and bytes per block, from ggml-common.h */
} type_row;

static const type_row k_ggml_rows[] = {
    {DSQ_TYPE_F32, "f32", 1, 4},
    {DSQ_TYPE_F16, "f16", 1, 2},
    {DSQ_TYPE_Q4_0, "q4_0", 32, 18},
    {DSQ_TYPE_Q4_1, "q4_1", 32, 20},
    {DSQ_TYPE_Q5_0, "q5_0", 32, 22},
    {DSQ_TYPE_Q5_1, "q5_1", 32, 24},
    {DSQ_TYPE_Q8_0, "q8_0", 32, 34},
    {DSQ_TYPE_Q8_1, "q8_1", 32, 36},
    {DSQ_TYPE_Q2_K, "q2_K", 256, 84},
    {DSQ_TYPE_Q3_K, "q3_K", 256, 110},
    {DSQ_TYPE_Q4_K, "q4_K", 256, 144},
    {DSQ_TYPE_Q5_K, "q5_K", 256, 176},
    {DSQ_TYPE_Q6_K, "q6_K", 256, 210},
    {DSQ_TYPE_Q8_K, "q8_K", 256, 292},
    {DSQ_TYPE_IQ2_XXS, "iq2_xxs", 256, 66},
    {DSQ_TYPE_IQ2_XS, "iq2_xs", 256, 74},
    {DSQ_TYPE_IQ3_XXS, "iq3_xxs", 256, 98},
    {DSQ_TYPE_IQ1_S, "iq1_s", 256, 50},
    {DSQ_TYPE_IQ4_NL, "iq4_nl", 32, 18},
    {DSQ_TYPE_IQ3_S, "iq3_s", 256, 110},
    {DSQ_TYPE_IQ2_S, "iq2_s", 256, 82},
    {DSQ_TYPE_IQ4_XS, "iq4_xs", 256, 136},
    {DSQ_TYPE_I8, "i8", 1, 1},
    {DSQ_TYPE_I16, "i16", 1, 2},
    {DSQ_TYPE_I32, "i32", 1, 4},
    {DSQ_TYPE_I64, "i64", 1, 8},
    {DSQ_TYPE_F64, "f64", 1, 8},
    {DSQ_TYPE_IQ1_M, "iq1_m", 256, 56},
    {DSQ_TYPE_BF16, "bf16", 1, 2},
    {DSQ_TYPE_TQ1_0, "tq1_0", 256, 54},
    {DSQ_TYPE_TQ2_0, "tq2_0", 256, 66},
    {DSQ_TYPE_MXFP4, "mxfp4", 32, 17},
};

static void test_type_from_ggml(void **state)
{
    bool valid[DSQ_GGML_TYPE_LIMIT] = {false};
    for (size_t i = 0; i < sizeof k_ggml_rows / sizeof k_ggml_rows[0]; i++) {
        const type_row *r = &k_ggml_rows[i];
        valid[r->t] = true;
        const dsq_type_info *ti = dsq_type_get((int)r->t);
        assert_non_null(ti);
        assert_string_equal(ti->name, r->name);
        assert_int_equal(ti->block_elems, r->be);
        assert_int_equal(ti->block_bytes, r->bb);
        assert_int_equal(ti->quantized, r->be > 1);
    }
    for (uint32_t id = 0; id < DSQ_GGML_TYPE_LIMIT + 30; id++) {
        dsq_type t = (dsq_type)-1;
        dsq_status s = dsq_type_from_ggml(id, &t);
        if (id < DSQ_GGML_TYPE_LIMIT && valid[id]) {
            assert_int_equal(s, DSQ_OK);
            assert_int_equal(t, (dsq_type)id);
            assert_true(dsq_type_is_ggml(t));
        } else {
            assert_int_equal(s, DSQ_ERR_UNSUPPORTED); /* removed ids (4, 5, 31-33, 36-38) and our own FP8/U* ids */
            assert_int_equal(t, (dsq_type)-1);
        }
    }
    dsq_type t;
    assert_int_equal(dsq_type_from_ggml(UINT32_MAX, &t), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "4294967295"));
    assert_false(dsq_type_is_ggml(DSQ_TYPE_F8_E4M3));
    assert_false(dsq_type_is_ggml(DSQ_TYPE_BOOL));
}

static void test_type_get_and_flags(void **state)
{
    assert_null(dsq_type_get(-1));
    assert_null(dsq_type_get(4));
    assert_null(dsq_type_get(DSQ_GGML_TYPE_LIMIT));
    assert_null(dsq_type_get(DSQ_TYPE_COUNT));
    assert_string_equal(dsq_type_name((dsq_type)4), "?");
    assert_string_equal(dsq_type_name(DSQ_TYPE_F8_E5M2), "f8_e5m2");
    int n_float = 0;
    for (int t = 0; t < DSQ_TYPE_COUNT; t++) {
        const dsq_type_info *ti = dsq_type_get(t);
        if (!ti) continue;
        if (ti->is_float) n_float++;
        assert_false(ti->is_float && ti->quantized);
    }
    assert_int_equal(n_float, 6);
    for (size_t i = 0; i < 6; i++) assert_true(dsq_type_get((int)k_float_types[i])->is_float);
}

static void test_type_from_st_name(void **state)
{
    static const struct {
        const char *s;
        dsq_type t;
    } ok[] = {{"F64", DSQ_TYPE_F64},   {"F32", DSQ_TYPE_F32},         {"F16", DSQ_TYPE_F16},
              {"BF16", DSQ_TYPE_BF16}, {"F8_E4M3", DSQ_TYPE_F8_E4M3}, {"F8_E5M2", DSQ_TYPE_F8_E5M2},
              {"I8", DSQ_TYPE_I8},     {"I16", DSQ_TYPE_I16},         {"I32", DSQ_TYPE_I32},
              {"I64", DSQ_TYPE_I64},   {"U8", DSQ_TYPE_U8},           {"U16", DSQ_TYPE_U16},
              {"U32", DSQ_TYPE_U32},   {"U64", DSQ_TYPE_U64},         {"BOOL", DSQ_TYPE_BOOL}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        dsq_type t;
        assert_int_equal(dsq_type_from_st_name(ok[i].s, &t), DSQ_OK);
        assert_int_equal(t, ok[i].t);
    }
    const char *bad[] = {"f32", "", "Q4_0", "F8_E4M3FNUZ", "F4", "I4", "C64", "F32 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dsq_type t;
        assert_int_equal(dsq_type_from_st_name(bad[i], &t), DSQ_ERR_UNSUPPORTED);
    }
    assert_non_null(strstr(dsq_errmsg(), "F32 "));
}

static void test_type_from_name(void **state)
{
    dsq_type t;
    assert_int_equal(dsq_type_from_name("Q4_K", &t), DSQ_OK);
    assert_int_equal(t, DSQ_TYPE_Q4_K);
    assert_int_equal(dsq_type_from_name("q4_k", &t), DSQ_OK);
    assert_int_equal(t, DSQ_TYPE_Q4_K);
    assert_int_equal(dsq_type_from_name("BF16", &t), DSQ_OK);
    assert_int_equal(t, DSQ_TYPE_BF16);
    assert_int_equal(dsq_type_from_name("IQ4_XS", &t), DSQ_OK);
    assert_int_equal(t, DSQ_TYPE_IQ4_XS);
    assert_int_equal(dsq_type_from_name("f8_e4m3", &t), DSQ_OK);
    assert_int_equal(t, DSQ_TYPE_F8_E4M3);
    for (size_t i = 0; i < sizeof k_ggml_rows / sizeof k_ggml_rows[0]; i++) {
        assert_int_equal(dsq_type_from_name(k_ggml_rows[i].name, &t), DSQ_OK);
        assert_int_equal(t, k_ggml_rows[i].t);
    }
    const char *bad[] = {"q4_k_m", "", "f8", "Q4_K ", "q4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dsq_type_from_name(bad[i], &t), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "q4"));
}

static void test_type_nbytes(void **state)
{
    uint64_t b = 0;
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_F32, 10, &b), DSQ_OK);
    assert_int_equal(b, 40);
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_Q4_K, 512, &b), DSQ_OK);
    assert_int_equal(b, 288);
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_Q4_0, 0, &b), DSQ_OK);
    assert_int_equal(b, 0);
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_Q4_K, 255, &b), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "q4_K"));
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_Q4_0, 33, &b), DSQ_ERR_FORMAT);
    b = 7;
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_F64, 1ull << 61, &b), DSQ_ERR_FORMAT); /* 2^64 bytes */
    assert_int_equal(b, 7);
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_F64, (1ull << 61) - 1, &b), DSQ_OK);
    assert_int_equal(b, UINT64_MAX - 7);
    assert_int_equal(dsq_type_nbytes(DSQ_TYPE_Q8_K, UINT64_MAX / 256 * 256, &b), DSQ_ERR_FORMAT);
    assert_int_equal(dsq_type_nbytes((dsq_type)4, 1, &b), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_type_nbytes((dsq_type)-3, 1, &b), DSQ_ERR_UNSUPPORTED);
}

static void test_mul_dims(void **state)
{
    uint64_t p = 0;
    const int64_t d3[] = {2, 3, 4};
    assert_true(dsq_mul_dims(d3, 3, &p));
    assert_int_equal(p, 24);
    assert_true(dsq_mul_dims(d3, 0, &p)); /* a scalar */
    assert_int_equal(p, 1);
    const int64_t big[] = {1ll << 32, 1ll << 31};
    assert_true(dsq_mul_dims(big, 2, &p));
    assert_int_equal(p, 1ull << 63);
    p = 5;
    const int64_t over[] = {1ll << 32, 1ll << 32};
    assert_false(dsq_mul_dims(over, 2, &p));
    assert_int_equal(p, 5);
    const int64_t over3[] = {INT64_MAX, 2, 2};
    assert_false(dsq_mul_dims(over3, 3, &p));
    const int64_t neg[] = {4, -1};
    assert_false(dsq_mul_dims(neg, 2, &p));
    const int64_t neg_min[] = {INT64_MIN};
    assert_false(dsq_mul_dims(neg_min, 1, &p));
}

/* dsq_find_nonfinite: the first NaN or infinity wherever it sits (chunk
 * starts and ends, the tail, several in one chunk), and every finite value
 * passes, the extremes included. */
static void test_find_nonfinite(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 17) - 8.0f;
    x[3] = FLT_MAX, x[4] = -FLT_MAX, x[5] = 1e-45f, x[6] = -0.0f, x[7] = FLT_MIN;
    assert_int_equal(dsq_find_nonfinite(x, N), -1);
    assert_int_equal(dsq_find_nonfinite(x, 0), -1);
    const int at[] = {0, 1, 255, 256, 257, 511, 512, 767, 999};
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            const float keep = x[at[k]];
            x[at[k]] = bad[b];
            assert_int_equal(dsq_find_nonfinite(x, N), at[k]);
            assert_int_equal(dsq_find_nonfinite(x, at[k]), -1); /* just before it */
            if (at[k] + 3 < N) { /* a second one later in the chunk: the first is reported */
                x[at[k] + 3] = NAN;
                assert_int_equal(dsq_find_nonfinite(x, N), at[k]);
                x[at[k] + 3] = (float)((at[k] + 3) % 17) - 8.0f;
            }
            x[at[k]] = keep;
        }
    assert_int_equal(dsq_find_nonfinite(x, N), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_nonfinite),
        cmocka_unit_test(test_decode_f16),
        cmocka_unit_test(test_decode_bf16),
        cmocka_unit_test(test_decode_e4m3),
        cmocka_unit_test(test_decode_e5m2),
        cmocka_unit_test(test_roundtrip_f16),
        cmocka_unit_test(test_roundtrip_bf16),
        cmocka_unit_test(test_roundtrip_e4m3),
        cmocka_unit_test(test_roundtrip_e5m2),
        cmocka_unit_test(test_encode_neighbourhoods_f16),
        cmocka_unit_test(test_encode_neighbourhoods_bf16),
        cmocka_unit_test(test_encode_neighbourhoods_e4m3),
        cmocka_unit_test(test_encode_neighbourhoods_e5m2),
        cmocka_unit_test(test_encode_f16_edges),
        cmocka_unit_test(test_encode_bf16_edges),
        cmocka_unit_test(test_encode_fp8_saturation),
        cmocka_unit_test(test_f64_rounds_once),
        cmocka_unit_test(test_random_f16),
        cmocka_unit_test(test_random_bf16),
        cmocka_unit_test(test_random_e4m3),
        cmocka_unit_test(test_random_e5m2),
        cmocka_unit_test(test_exhaustive_f32),
        cmocka_unit_test(test_convert_row_all_pairs),
        cmocka_unit_test(test_convert_row_rejects),
        cmocka_unit_test(test_to_f32_row_integers),
        cmocka_unit_test(test_type_from_ggml),
        cmocka_unit_test(test_type_get_and_flags),
        cmocka_unit_test(test_type_from_st_name),
        cmocka_unit_test(test_type_from_name),
        cmocka_unit_test(test_type_nbytes),
        cmocka_unit_test(test_mul_dims),
    };
    return DSQ_TEST_RUN_GROUP(tests, setup_refs, teardown_refs);
}
