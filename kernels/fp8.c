/* The E4M3 decode table (kernels/fp8.h), filled from core's dsq_e4m3_to_f32
 * so that the table and the scalar conversion can never disagree, and the
 * row functions' scalar references and dispatch. */
#include "kernels/fp8.h"

#include <pthread.h>

#include "core/dtype.h"
#include "kernels/cpu.h"

static float g_table[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill(void)
{
    for (int i = 0; i < 256; i++) g_table[i] = dsq_e4m3_to_f32((uint8_t)i);
}

const float *dsq_fp8_e4m3_table(void)
{
    pthread_once(&g_once, fill);
    return g_table;
}

static bool use_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) &&
           dsq_cpu_has(DSQ_CPU_AVX512VL);
#else
    return false;
#endif
}

void dsq_fp8_decode_row(const uint8_t *codes, int64_t n, float scale, float *dst)
{
    if (use_avx512()) {
        dsq_fp8_decode_row_avx512(codes, n, scale, dst);
        return;
    }
    const float *t = dsq_fp8_e4m3_table();
    for (int64_t i = 0; i < n; i++) dst[i] = t[codes[i]] * scale;
}

float dsq_fp8_dot(const uint8_t *codes, const float *x, int64_t n)
{
    if (use_avx512()) return dsq_fp8_dot_avx512(codes, x, n);
    const float *t = dsq_fp8_e4m3_table();
    float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f; /* four chains: no serial add latency */
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        p0 += t[codes[i]] * x[i];
        p1 += t[codes[i + 1]] * x[i + 1];
        p2 += t[codes[i + 2]] * x[i + 2];
        p3 += t[codes[i + 3]] * x[i + 3];
    }
    for (; i < n; i++) p0 += t[codes[i]] * x[i];
    return (p0 + p1) + (p2 + p3);
}

bool dsq_fp8_quantize_act(const float *x, int64_t n, float scale_in, uint8_t *codes, float *scale)
{
    if (!use_avx512()) return false;
    *scale = dsq_fp8_quantize_act_avx512(x, n, scale_in, codes);
    return true;
}
