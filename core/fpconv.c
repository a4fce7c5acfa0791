/* Conversions between the plain float types, and integer/bool rows to f32.
 *
 * Every narrowing rounds once, to nearest with ties to even, mostly with integer
 * arithmetic on the bit pattern (the one float addition, for f16 subnormals,
 * relies on the default rounding mode, as ggml's does). f64 sources round
 * straight from the double: going through float first would round twice.
 * Rows must not overlap unless source and destination types are the same.
 *
 * f16: finite results equal ggml_compute_fp32_to_fp16 (ggml-impl.h, from the
 * FP16 library), which is an exact round-to-nearest-even; like it, every NaN
 * becomes sign|0x7E00. Quantizers store f16 scales with this function, so
 * their output is byte-identical to llama.cpp's only if this stays exact.
 * bf16: same as ggml_compute_fp32_to_bf16: NaN keeps its top payload bits and
 * gets the quiet bit; everything else rounds to nearest even.
 *
 * FP8 (OCP 8-bit formats, as in safetensors F8_E4M3 / F8_E5M2): out-of-range
 * values and +-Inf saturate to the largest finite value with the sign kept;
 * NaN stays NaN. This differs from torch's .to(float8_*) casts, which do not
 * saturate: c10's Float8_e4m3fn turns |x| >= 480 and Inf into NaN (0x7F), and
 * Float8_e5m2 turns overflow into Inf. Saturating is what checkpoints need:
 * one large outlier must not become a NaN or Inf weight. */
#include "core/dtype.h"
#include "core/checked.h"

#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* c ? x : y, written with a mask: the compiler keeps it branch-free, which
 * lets row loops vectorize (a plain ?: with a float operation on one side is
 * turned into a branch under the default -ftrapping-math). */
static inline uint32_t sel(bool c, uint32_t x, uint32_t y)
{
    uint32_t m = 0u - (uint32_t)c;
    return (x & m) | (y & ~m);
}

/* m / 2^shift rounded to nearest, ties to even (1 <= shift <= 63). */
static inline uint64_t rne_shift(uint64_t m, unsigned shift)
{
    uint64_t half = 1ull << (shift - 1);
    uint64_t rem = m & ((half << 1) - 1);
    uint64_t q = m >> shift;
    return q + (rem > half || (rem == half && (q & 1)));
}

/* ---- f16 ---- */

/* Both paths are computed and the result selected, so that the compiler can
 * use conditional moves (and vectorize row loops): data mixes tiny and normal
 * values unpredictably. */
uint16_t dsq_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* f16 normal: rebias 127 -> 15, round away 13 bits; a mantissa carry bumps the exponent. */
    uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* f16 subnormal (|f| < 2^-14): 0.5f has an ulp of 2^-24, the f16 subnormal
     * unit, so the float addition does the rounding (ties to even: the default
     * mode, which nothing here changes) and the low bits count the units. */
    uint32_t sub = f32_bits(f32_from_bits(a) + 0.5f) - 0x3f000000u;
    uint32_t h = sel(a < 0x38800000u, sub, normal);
    h = sel(a >= 0x477ff000u, 0x7c00u, h); /* >= 65520 (the tie above 65504 goes to the even Inf), and Inf */
    h = sel(a > 0x7f800000u, 0x7e00u, h);  /* NaN */
    return (uint16_t)(sign | h);
}

float dsq_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t exp = o & 0x0f800000u;
    o += 0x38000000u; /* rebias 15 -> 127: right for normals */
    /* Inf/NaN: exponent to 255; NaN made quiet with its payload kept (as F16C does). */
    uint32_t infnan = (o + 0x38000000u) | sel((o & 0x007fe000u) != 0, 0x400000u, 0);
    /* Subnormal: o now reads 2^-15 * (1 + m/1024); bumping it to 2^-14 * (1 + m/1024)
     * and subtracting 2^-14 leaves m * 2^-24, exactly. */
    uint32_t sub = f32_bits(f32_from_bits(o + 0x00800000u) - 0x1p-14f);
    uint32_t r = sel(exp == 0x0f800000u, infnan, sel(exp == 0, sub, o));
    return f32_from_bits(sign | r);
}

/* ---- bf16 ---- */

uint16_t dsq_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    /* Overflow rounds into the Inf pattern by itself. */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float dsq_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* ---- generic narrowing from double ---- */

/* A small binary float format: sign, exponent with bias, mbits mantissa bits.
 * Magnitude codes above max_code become over_code (Inf, or max_code itself
 * when the format saturates). */
typedef struct small_fmt {
    unsigned mbits;
    int bias;
    uint32_t max_code;
    uint32_t over_code;
    uint32_t nan_code;
    unsigned sign_shift; /* position of the sign bit */
} small_fmt;

static const small_fmt k_f16 = {10, 15, 0x7bffu, 0x7c00u, 0x7e00u, 15};
static const small_fmt k_bf16 = {7, 127, 0x7f7fu, 0x7f80u, 0x7fc0u, 15};
static const small_fmt k_e4m3 = {3, 7, 0x7eu, 0x7eu, 0x7fu, 7};
static const small_fmt k_e5m2 = {2, 15, 0x7bu, 0x7bu, 0x7eu, 7};

/* Magnitude code of a finite non-negative double (bits a) rounded to fmt; may
 * exceed max_code, and Inf's bits give a code far above it. */
static uint64_t round_f64_mag(uint64_t a, const small_fmt *fmt)
{
    int e = (int)(a >> 52);
    int emin = 1024 - fmt->bias; /* biased double exponent of fmt's smallest normal */
    if (e >= emin) return rne_shift(a - ((uint64_t)(1023 - fmt->bias) << 52), 52 - fmt->mbits);
    /* fmt subnormal: count units of 2^(1 - bias - mbits); a double is m * 2^(e - 1075). */
    uint64_t m = (a & 0xfffffffffffffull) | (e ? 1ull << 52 : 0);
    int shift = (1 - fmt->bias - (int)fmt->mbits) - ((e ? e : 1) - 1075);
    if (shift >= 54) return 0; /* m < 2^53 <= half a unit */
    return rne_shift(m, (unsigned)shift);
}

static uint32_t encode_f64(double d, const small_fmt *fmt)
{
    uint64_t u = f64_bits(d);
    uint32_t sign = (uint32_t)(u >> 63) << fmt->sign_shift;
    uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull) return sign | fmt->nan_code;
    uint64_t code = round_f64_mag(a, fmt);
    return sign | (code > fmt->max_code ? fmt->over_code : (uint32_t)code);
}

/* ---- FP8 ---- */

uint8_t dsq_f32_to_e4m3(float f) { return (uint8_t)encode_f64((double)f, &k_e4m3); }
uint8_t dsq_f32_to_e5m2(float f) { return (uint8_t)encode_f64((double)f, &k_e5m2); }

float dsq_e4m3_to_f32(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
    uint32_t u;
    if ((v & 0x7fu) == 0x7fu) /* the only NaN pattern; E4M3FN has no Inf */
        u = 0x7fc00000u;
    else if (e == 0) /* subnormal: m units of 2^-9 */
        u = f32_bits((float)m * 0x1p-9f);
    else /* rebias 7 -> 127 */
        u = ((e + 120u) << 23) | (m << 20);
    return f32_from_bits(sign | u);
}

/* E5M2 is f16 without its low byte. */
float dsq_e5m2_to_f32(uint8_t v) { return dsq_f16_to_f32((uint16_t)(v << 8)); }

/* ---- rows ---- */

enum { CHUNK = 256 };

/* Element loads and stores go through memcpy: rows may sit at any offset of
 * a mapped file, so they need not be aligned. */
#define DSQ_DEF_LOAD(name, T)                                                                                          \
    static inline T name(const uint8_t *p, size_t i)                                                                   \
    {                                                                                                                  \
        T v;                                                                                                           \
        memcpy(&v, p + i * sizeof(T), sizeof(T));                                                                      \
        return v;                                                                                                      \
    }
DSQ_DEF_LOAD(ld_u16, uint16_t)
DSQ_DEF_LOAD(ld_i16, int16_t)
DSQ_DEF_LOAD(ld_u32, uint32_t)
DSQ_DEF_LOAD(ld_i32, int32_t)
DSQ_DEF_LOAD(ld_u64, uint64_t)
DSQ_DEF_LOAD(ld_i64, int64_t)
DSQ_DEF_LOAD(ld_f64, double)
#undef DSQ_DEF_LOAD

static inline void store16(uint8_t *dst, size_t i, uint16_t v) { memcpy(dst + 2 * i, &v, 2); }

/* Loads n elements of type t as f32; false when t has no f32 reading. */
static bool load_f32(dsq_type t, const uint8_t *src, float *dst, size_t n)
{
    size_t i;
    switch (t) {
    case DSQ_TYPE_F32: memmove(dst, src, n * sizeof(float)); break;
    case DSQ_TYPE_F64:
        for (i = 0; i < n; i++) dst[i] = (float)ld_f64(src, i);
        break;
    case DSQ_TYPE_F16:
        for (i = 0; i < n; i++) dst[i] = dsq_f16_to_f32(ld_u16(src, i));
        break;
    case DSQ_TYPE_BF16:
        for (i = 0; i < n; i++) dst[i] = dsq_bf16_to_f32(ld_u16(src, i));
        break;
    case DSQ_TYPE_F8_E4M3:
        for (i = 0; i < n; i++) dst[i] = dsq_e4m3_to_f32(src[i]);
        break;
    case DSQ_TYPE_F8_E5M2:
        for (i = 0; i < n; i++) dst[i] = dsq_e5m2_to_f32(src[i]);
        break;
    case DSQ_TYPE_I8:
        for (i = 0; i < n; i++) dst[i] = (float)(int8_t)src[i];
        break;
    case DSQ_TYPE_I16:
        for (i = 0; i < n; i++) dst[i] = (float)ld_i16(src, i);
        break;
    case DSQ_TYPE_I32:
        for (i = 0; i < n; i++) dst[i] = (float)ld_i32(src, i);
        break;
    case DSQ_TYPE_I64:
        for (i = 0; i < n; i++) dst[i] = (float)ld_i64(src, i);
        break;
    case DSQ_TYPE_U8:
        for (i = 0; i < n; i++) dst[i] = (float)src[i];
        break;
    case DSQ_TYPE_U16:
        for (i = 0; i < n; i++) dst[i] = (float)ld_u16(src, i);
        break;
    case DSQ_TYPE_U32:
        for (i = 0; i < n; i++) dst[i] = (float)ld_u32(src, i);
        break;
    case DSQ_TYPE_U64:
        for (i = 0; i < n; i++) dst[i] = (float)ld_u64(src, i);
        break;
    case DSQ_TYPE_BOOL:
        for (i = 0; i < n; i++) dst[i] = src[i] ? 1.0f : 0.0f;
        break; /* any non-zero byte is true */
    default: return false;
    }
    return true;
}

static void store_from_f32(dsq_type t, const float *src, uint8_t *dst, size_t n)
{
    size_t i;
    switch (t) {
    case DSQ_TYPE_F32: memcpy(dst, src, n * sizeof(float)); break;
    case DSQ_TYPE_F64:
        for (i = 0; i < n; i++) {
            double d = src[i];
            memcpy(dst + 8 * i, &d, 8);
        }
        break;
    case DSQ_TYPE_F16:
        for (i = 0; i < n; i++) store16(dst, i, dsq_f32_to_f16(src[i]));
        break;
    case DSQ_TYPE_BF16: /* dsq_f32_to_bf16 without its branch, so the loop vectorizes */
        for (i = 0; i < n; i++) {
            uint32_t u = f32_bits(src[i]);
            uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
            store16(dst, i, (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r));
        }
        break;
    case DSQ_TYPE_F8_E4M3:
        for (i = 0; i < n; i++) dst[i] = dsq_f32_to_e4m3(src[i]);
        break;
    case DSQ_TYPE_F8_E5M2:
        for (i = 0; i < n; i++) dst[i] = dsq_f32_to_e5m2(src[i]);
        break;
    default: break; /* callers pass float types only */
    }
}

/* f64 sources round once, straight from the double. */
static void store_from_f64(dsq_type t, const uint8_t *src, uint8_t *dst, size_t n)
{
    size_t i;
    switch (t) {
    case DSQ_TYPE_F32:
        for (i = 0; i < n; i++) {
            float f = (float)ld_f64(src, i);
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    case DSQ_TYPE_F16:
        for (i = 0; i < n; i++) store16(dst, i, (uint16_t)encode_f64(ld_f64(src, i), &k_f16));
        break;
    case DSQ_TYPE_BF16:
        for (i = 0; i < n; i++) store16(dst, i, (uint16_t)encode_f64(ld_f64(src, i), &k_bf16));
        break;
    case DSQ_TYPE_F8_E4M3:
        for (i = 0; i < n; i++) dst[i] = (uint8_t)encode_f64(ld_f64(src, i), &k_e4m3);
        break;
    case DSQ_TYPE_F8_E5M2:
        for (i = 0; i < n; i++) dst[i] = (uint8_t)encode_f64(ld_f64(src, i), &k_e5m2);
        break;
    default: break;
    }
}

static bool is_float_type(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    return ti && ti->is_float;
}

dsq_status dsq_convert_row(dsq_type src_t, const void *src, dsq_type dst_t, void *dst, size_t n)
{
    if (!is_float_type(src_t) || !is_float_type(dst_t))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "cannot convert %s to %s: only plain float types convert",
                        dsq_type_name(src_t), dsq_type_name(dst_t));
    size_t src_size = dsq_type_get((int)src_t)->block_bytes;
    size_t dst_size = dsq_type_get((int)dst_t)->block_bytes;
    size_t nbytes;
    if (!dsq_array_bytes(n, src_size > dst_size ? src_size : dst_size, &nbytes))
        return dsq_fail(DSQ_ERR_ARG, "row of %zu %s elements is too large", n, dsq_type_name(src_t));
    const uint8_t *s = src;
    uint8_t *d = dst;
    if (src_t == dst_t) {
        if (n) memmove(d, s, nbytes);
        return DSQ_OK;
    }
    if (src_t == DSQ_TYPE_F64) {
        store_from_f64(dst_t, s, d, n);
        return DSQ_OK;
    }
    /* Every other source type is exact in f32, so going through f32 rounds once. */
    float tmp[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        load_f32(src_t, s + i * src_size, tmp, k);
        store_from_f32(dst_t, tmp, d + i * dst_size, k);
    }
    return DSQ_OK;
}

dsq_status dsq_to_f32_row(dsq_type src_t, const void *src, float *dst, size_t n)
{
    const dsq_type_info *ti = dsq_type_get((int)src_t);
    if (!ti || ti->quantized || ti->block_elems != 1)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "cannot read %s elements as f32", dsq_type_name(src_t));
    if (!load_f32(src_t, src, dst, n))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "cannot read %s elements as f32", dsq_type_name(src_t));
    return DSQ_OK;
}
