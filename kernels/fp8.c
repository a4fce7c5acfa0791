/* The E4M3 decode table (kernels/fp8.h), filled from core's dsq_e4m3_to_f32
 * so that the table and the scalar conversion can never disagree. */
#include "kernels/fp8.h"

#include <pthread.h>

#include "core/dtype.h"

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

void dsq_fp8_decode_row(const uint8_t *codes, int64_t n, float scale, float *dst)
{
    const float *t = dsq_fp8_e4m3_table();
    for (int64_t i = 0; i < n; i++) dst[i] = t[codes[i]] * scale;
}
