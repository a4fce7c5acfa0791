/* Row moves between activation buffers: column slices (MLA splits and
 * joins its latent, rope and head parts), and MoE's gather of an expert's
 * tokens and weighted scatter of its outputs. */
#include <string.h>

#include "kernels/cpu.h"
#include "runtime/cpu/ops.h"

void dsq_cpu_copy_rows(float *dst, int64_t ds, const float *src, int64_t ss, int64_t w, int n)
{
    for (int r = 0; r < n; r++) memcpy(dst + (int64_t)r * ds, src + (int64_t)r * ss, (size_t)w * sizeof(float));
}

void dsq_cpu_gather_rows(float *dst, const float *src, const int32_t *idx, int64_t w, int n)
{
    for (int r = 0; r < n; r++) memcpy(dst + (int64_t)r * w, src + (int64_t)idx[r] * w, (size_t)w * sizeof(float));
}

void dsq_cpu_scatter_add_rows(float *dst, const float *src, const int32_t *idx, const float *wt, int64_t w, int n)
{
    for (int r = 0; r < n; r++) {
        float *d = dst + (int64_t)idx[r] * w;
        const float *s = src + (int64_t)r * w;
        for (int64_t i = 0; i < w; i++) d[i] += wt[r] * s[i];
    }
}
