/* The FP8 E4M3 decode (kernels/fp8.h): the table against core's conversion
 * for all 256 codes, the AVX512 row decode against the scalar one bit for bit
 * (every non-NaN code, lengths around the 16-wide step, several scales), and
 * the row dot against a double-precision sum on both paths. */
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
#include "kernels/cpu.h"
#include "kernels/fp8.h"
#include "quantizers/w8.h"
#include "tests/helpers/testutil.h"

static void test_table(void **state)
{
    const float *t = dsq_fp8_e4m3_table();
    for (int i = 0; i < 256; i++) {
        float want = dsq_e4m3_to_f32((uint8_t)i);
        if ((i & 0x7f) == 0x7f) {
            assert_true(isnan(t[i]));
            continue;
        }
        assert_memory_equal(&t[i], &want, sizeof want);
    }
    assert_true(t[0x7e] == 448.0f && t[0xfe] == -448.0f && t[0x01] == 0x1p-9f && t[0x08] == 0x1p-6f);
    assert_true(t[0x80] == 0.0f && signbit(t[0x80]));
}

/* Every non-NaN code in a shuffled order, repeated to n. */
static uint8_t *codes_of(int64_t n, uint64_t *seed)
{
    uint8_t *c = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(i * 37 + (int64_t)(dsq_test_rand(seed) % 3));
        c[i] = (v & 0x7f) == 0x7f ? 0x7e : v;
    }
    return c;
}

static void test_decode_and_dot_paths(void **state)
{
    uint64_t seed = 99;
    static const float scales[] = {1.0f, 0.0123f, 3.5e-5f, 1e30f};
    bool simd = dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) && dsq_cpu_has(DSQ_CPU_AVX512VL);
    if (!simd) fprintf(stderr, "SKIP: the AVX512 FP8 decode: this CPU lacks avx512f/bw/vl (scalar path only)\n");
    for (int64_t n = 1; n <= 600; n += n < 70 ? 1 : 53) {
        uint8_t *c = codes_of(n, &seed);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b),
              *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++) x[i] = dsq_test_randn(&seed);
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
            dsq_fp8_decode_row(c, n, scales[si], a);
            dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
            dsq_fp8_decode_row(c, n, scales[si], b);
            for (int64_t i = 0; i < n; i++) {
                float want = dsq_e4m3_to_f32(c[i]) * scales[si];
                if (memcmp(&a[i], &want, sizeof want) || memcmp(&b[i], &want, sizeof want))
                    fail_msg("code 0x%02x scale %g: %g / %g, want %g", c[i], (double)scales[si], (double)a[i],
                             (double)b[i], (double)want);
            }
        }
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            ref += (double)dsq_e4m3_to_f32(c[i]) * x[i];
            mag += fabs((double)dsq_e4m3_to_f32(c[i]) * x[i]);
        }
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
        float d0 = dsq_fp8_dot(c, x, n);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        float d1 = dsq_fp8_dot(c, x, n);
        if (fabs(d0 - ref) > 1e-6 * mag || fabs(d1 - ref) > 1e-6 * mag)
            fail_msg("n %lld: dot %g (scalar) / %g, reference %g", (long long)n, (double)d0, (double)d1, ref);
        free(c), free(a), free(b), free(x);
    }
}

/* The vectorized FP8 activation quantizer gives dsq_w8_act_quantize's bytes
 * and scale: random values, exact ties between neighbouring codes (normal and
 * subnormal), saturation under a static scale, zeros of both signs, NaN, Inf. */
static void test_quantize_act(void **state)
{
    float sc = 0;
    uint8_t probe;
    if (!dsq_fp8_quantize_act((const float[]){1.0f}, 1, 0, &probe, &sc))
        DSQ_TEST_SKIP_ENV("the FP8 activation quantizer has no SIMD path on this CPU (it needs avx512f/bw/vl)");
    const float *t = dsq_fp8_e4m3_table();
    uint64_t seed = 7;
    for (int n = 1; n <= 260; n += n < 40 ? 1 : 31)
        for (int v = 0; v < 6; v++) {
            float *x = malloc((size_t)n * sizeof *x);
            uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
            float sin = 0;
            for (int i = 0; i < n; i++) x[i] = dsq_test_randn(&seed) * 5.0f;
            if (v == 1) { /* static scale 1: midpoints of adjacent codes, which round to the even one */
                sin = 1.0f;
                for (int i = 0; i < n; i++) {
                    int c = (int)(dsq_test_rand(&seed) % 126);
                    x[i] = (i & 1 ? -0.5f : 0.5f) * (t[c] + t[c + 1]);
                }
            }
            if (v == 2) sin = 0.001f; /* most values saturate at 448 */
            if (v == 3)
                for (int i = 0; i < n; i++) x[i] = i & 1 ? -0.0f : 0.0f;
            if (v == 4 && n > 3) x[0] = NAN, x[2] = INFINITY;
            if (v == 5) /* tiny values: the subnormal steps, scale 1 */
                for (int i = 0; i < n; i++) sin = 1.0f, x[i] = (float)(i % 40 - 20) * 0x1p-11f;
            float sa = dsq_w8_act_quantize(DSQ_W8_FP8, x, n, sin, a), sb = 0;
            assert_true(dsq_fp8_quantize_act(x, n, sin, b, &sb));
            if (memcmp(&sa, &sb, sizeof sa)) fail_msg("n %d case %d: scale %g vs %g", n, v, (double)sb, (double)sa);
            for (int i = 0; i < n; i++)
                if (a[i] != b[i])
                    fail_msg("n %d case %d: x %a / scale: code 0x%02x, reference 0x%02x", n, v, (double)x[i], b[i],
                             a[i]);
            free(x), free(a), free(b);
        }
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_false(dsq_fp8_quantize_act((const float[]){1.0f}, 1, 0, &probe, &sc));
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_decode_and_dot_paths),
        cmocka_unit_test(test_quantize_act),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
