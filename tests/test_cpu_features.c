/* kernels/cpu_features.c against the compiler's own probe: for every feature
 * that GCC's __builtin_cpu_supports knows (it also checks the OS state), both
 * must agree on this machine; the combinations must be the ANDs they claim to
 * be; forcing the scalar ISA must switch the kernels' paths off and AUTO back;
 * the denormal flush must flush on the calling thread and undo itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu.h"

/* clang 14's __builtin_cpu_supports refuses the names f16c, avxvnni and the
 * AMX ones at compile time: those rows go unprobed (-1) there. */
#if defined(__clang__)
#define PROBE_NEWER(name) (-1)
#else
#define PROBE_NEWER(name) __builtin_cpu_supports(name)
#endif

static void test_matches_compiler_probe(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    struct {
        dsq_cpu_feature f;
        int gcc; /* the compiler's answer, -1: not probed */
    } rows[] = {
        {DSQ_CPU_AVX2, __builtin_cpu_supports("avx2")},
        {DSQ_CPU_FMA, __builtin_cpu_supports("fma")},
        {DSQ_CPU_F16C, PROBE_NEWER("f16c")},
        {DSQ_CPU_AVX512F, __builtin_cpu_supports("avx512f")},
        {DSQ_CPU_AVX512BW, __builtin_cpu_supports("avx512bw")},
        {DSQ_CPU_AVX512VL, __builtin_cpu_supports("avx512vl")},
        {DSQ_CPU_AVX512_BF16, __builtin_cpu_supports("avx512bf16")},
        {DSQ_CPU_AVX512_VNNI, __builtin_cpu_supports("avx512vnni")},
        {DSQ_CPU_AVX_VNNI, PROBE_NEWER("avxvnni")},
        {DSQ_CPU_AMX_BF16, PROBE_NEWER("amx-bf16")},
        {DSQ_CPU_AMX_INT8, PROBE_NEWER("amx-int8")},
    };
    _Static_assert(sizeof rows / sizeof rows[0] == DSQ_CPU_N_FEATURES, "one row per feature");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        printf("%-12s %s\n", dsq_cpu_feature_name(rows[i].f), dsq_cpu_has(rows[i].f) ? "yes" : "no");
        if (rows[i].gcc < 0) continue;
        /* Older libgcc lists AMX from CPUID alone, without the OS tile state:
         * there ours may only be the stricter one. */
        bool amx = rows[i].f == DSQ_CPU_AMX_BF16 || rows[i].f == DSQ_CPU_AMX_INT8;
        bool bad = amx ? dsq_cpu_has(rows[i].f) && !rows[i].gcc : dsq_cpu_has(rows[i].f) != (rows[i].gcc != 0);
        if (bad) fail_msg("%s: ours %d, gcc %d", dsq_cpu_feature_name(rows[i].f), dsq_cpu_has(rows[i].f), rows[i].gcc);
    }
#else
    for (int f = 0; f < DSQ_CPU_N_FEATURES; f++) assert_false(dsq_cpu_has((dsq_cpu_feature)f));
#endif
    assert_false(dsq_cpu_has(DSQ_CPU_N_FEATURES));
    assert_string_equal(dsq_cpu_feature_name(DSQ_CPU_N_FEATURES), "?");
}

static void test_combinations(void **state)
{
    (void)state;
    assert_int_equal(dsq_cpu_has_avx2(),
                     dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_FMA) && dsq_cpu_has(DSQ_CPU_F16C));
    assert_int_equal(dsq_cpu_has_avx2_fma(), dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_FMA));
    assert_int_equal(dsq_cpu_has_avx512bf16(), dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) &&
                                                   dsq_cpu_has(DSQ_CPU_AVX512VL) && dsq_cpu_has(DSQ_CPU_AVX512_BF16));
}

static void test_forcing(void **state)
{
    (void)state;
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_false(dsq_cpu_use_avx2());
    assert_false(dsq_cpu_use_bf16_gemm());
    assert_int_equal(dsq_cpu_has_avx2(), dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_FMA) &&
                                             dsq_cpu_has(DSQ_CPU_F16C)); /* "has" ignores the forcing */
    dsq_cpu_set_isa(DSQ_CPU_ISA_AVX2);
    assert_int_equal(dsq_cpu_use_avx2(), dsq_cpu_has_avx2());
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    assert_int_equal(dsq_cpu_use_avx2(), dsq_cpu_has_avx2());
    assert_int_equal(dsq_cpu_use_bf16_gemm(), dsq_cpu_has_avx512bf16());
}

/* Denormals flushed between dsq_cpu_flush_denormals and the restore: a
 * product below float's normal range is 0 and a denormal operand reads as 0
 * (x86); before and after, both are the IEEE values. volatile keeps the
 * compiler from folding the arithmetic at compile time. */
static void test_flush_denormals(void **state)
{
    (void)state;
    volatile float tiny = 1e-20f, den = 1e-40f, one = 1.0f;
    assert_true(tiny * tiny > 0.0f && den * one > 0.0f); /* IEEE: 1e-40 is a denormal */
    const unsigned saved = dsq_cpu_flush_denormals();
#if defined(__x86_64__) || defined(__i386__)
    const float flushed = tiny * tiny, read = den * one;
    assert_true(flushed == 0.0f);
    assert_true(read == 0.0f);
#endif
    dsq_cpu_denormals_restore(saved);
    assert_true(tiny * tiny > 0.0f && den * one > 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_compiler_probe),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_forcing),
        cmocka_unit_test(test_flush_denormals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
