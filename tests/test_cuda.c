/* The CUDA backend. Built in every configuration: without DSQ_HAVE_CUDA it
 * checks that the stubs refuse cleanly; with it but no visible device it
 * checks that probing does not crash and the conversion refuses; with a
 * device it compares the GPU conversion against the CPU one, bit for bit. */
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
#include "runtime/cuda/cuda_backend.h"
#include "tests/helpers/testutil.h"

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_unavailable_refuses(void **state)
{
    if (dsq_cuda_available()) DSQ_TEST_SKIP_ENV("a CUDA device is visible; the device cases cover the refusal");
#ifndef DSQ_HAVE_CUDA
    fprintf(stderr, "SKIP: built without CUDA; only the stubs are checked\n");
#else
    fprintf(stderr, "SKIP: no CUDA device visible; only the refusal is checked\n");
#endif
    assert_false(dsq_cuda_available()); /* a second probe is as quiet as the first */
    float in[4] = {1, 2, 3, 4};
    uint16_t out[4] = {0};
    assert_int_equal(dsq_cuda_convert_f32(in, DSQ_TYPE_F16, out, 4), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "CUDA"));
    assert_int_equal(out[0], 0);
}

/* Inputs that exercise every rounding case: each f16 and bf16 value, the
 * midpoints between neighbours and the floats either side, specials, and
 * random bit patterns. */
static float *make_inputs(size_t *n_out)
{
    size_t cap = 65536 * 4 * 2 + 64 + (1u << 22), n = 0;
    float *v = malloc(cap * sizeof *v);
    for (uint32_t h = 0; h < 65536; h++) {
        float a = dsq_f16_to_f32((uint16_t)h), b = dsq_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        v[n++] = a;
        v[n++] = mid;
        v[n++] = nextafterf(mid, INFINITY);
        v[n++] = nextafterf(mid, -INFINITY);
        uint32_t bu = (uint32_t)h << 16; /* bf16 value, its tie, and just above the tie */
        v[n++] = f32_of_bits(bu);
        v[n++] = f32_of_bits(bu | 0x8000u);
        v[n++] = f32_of_bits(bu | 0x8001u);
        v[n++] = f32_of_bits(bu | 0x7fffu);
    }
    const float specials[] = {0.0f,     -0.0f,    INFINITY, -INFINITY,  NAN,           -NAN,     65504.0f,
                              65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f, 3.4028235e38f, 1.4e-45f, -1.4e-45f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) v[n++] = specials[i];
    uint64_t rng = 42;
    while (n < cap) v[n++] = f32_of_bits((uint32_t)dsq_test_rand(&rng));
    *n_out = n;
    return v;
}

static void check_device(dsq_type t)
{
    size_t n = 0;
    float *in = make_inputs(&n);
    uint16_t *got = malloc(n * sizeof *got);
    assert_int_equal(dsq_cuda_convert_f32(in, t, got, n), DSQ_OK);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t want = t == DSQ_TYPE_F16 ? dsq_f32_to_f16(in[i]) : dsq_f32_to_bf16(in[i]);
        if (got[i] != want && bad++ < 10) {
            uint32_t u;
            memcpy(&u, &in[i], sizeof u);
            fprintf(stderr, "%s: input 0x%08x: GPU 0x%04x, CPU 0x%04x\n", dsq_type_name(t), u, got[i], want);
        }
    }
    free(in);
    free(got);
    assert_int_equal(bad, 0);
}

static void test_device_f16_matches_cpu(void **state)
{
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    check_device(DSQ_TYPE_F16);
}

static void test_device_bf16_matches_cpu(void **state)
{
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    check_device(DSQ_TYPE_BF16);
}

static void test_device_edge_sizes(void **state)
{
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    float one = 1.0f;
    uint16_t out = 0;
    assert_int_equal(dsq_cuda_convert_f32(&one, DSQ_TYPE_F16, &out, 0), DSQ_OK);
    assert_int_equal(out, 0); /* nothing written for n = 0 */
    assert_int_equal(dsq_cuda_convert_f32(&one, DSQ_TYPE_F16, &out, 1), DSQ_OK);
    assert_int_equal(out, 0x3c00);
    assert_int_equal(dsq_cuda_convert_f32(&one, DSQ_TYPE_F8_E4M3, &out, 1), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_cuda_convert_f32(&one, DSQ_TYPE_Q4_0, &out, 1), DSQ_ERR_UNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unavailable_refuses),
        cmocka_unit_test(test_device_f16_matches_cpu),
        cmocka_unit_test(test_device_bf16_matches_cpu),
        cmocka_unit_test(test_device_edge_sizes),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
