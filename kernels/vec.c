#include "kernels/vec.h"

#include <math.h>

#include "core/dtype.h"
#include "kernels/cpu.h"

/* The scalar references sum in double: they are the yardstick the SIMD
 * versions (float partial sums) are tested against. */
float dsq_vec_dot_f32(int64_t n, const float *a, const float *b)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_dot_f32_avx2(n, a, b);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

float dsq_vec_dot_f16_f32(int64_t n, const uint16_t *a, const float *b)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_dot_f16_f32_avx2(n, a, b);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)dsq_f16_to_f32(a[i]) * b[i];
    return (float)s;
}

float dsq_vec_dot_bf16_f32(int64_t n, const uint16_t *a, const float *b)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_dot_bf16_f32_avx2(n, a, b);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)dsq_bf16_to_f32(a[i]) * b[i];
    return (float)s;
}

void dsq_vec_axpy(int64_t n, float a, const float *x, float *y)
{
    if (dsq_cpu_use_avx2()) {
        dsq_vec_axpy_avx2(n, a, x, y);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void dsq_vec_scale(int64_t n, float a, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

double dsq_vec_sq_diff(int64_t n, const float *a, const float *b)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_sq_diff_avx2(n, a, b);
    double acc[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        acc[i % 8] += d * d;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

double dsq_vec_dot_f64(int64_t n, const float *a, const float *b)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_dot_f64_avx2(n, a, b);
    double acc[8] = {0};
    for (int64_t i = 0; i < n; i++) acc[i % 8] += (double)a[i] * (double)b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float dsq_vec_max(int64_t n, const float *x)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_max_avx2(n, x);
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

float dsq_vec_exp_sum(int64_t n, float *x, float shift)
{
    if (dsq_cpu_use_avx2()) return dsq_vec_exp_sum_avx2(n, x, shift);
    float sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - shift);
        sum += x[i];
    }
    return sum;
}

void dsq_vec_swiglu(int64_t n, const float *gate, const float *up, float *out)
{
    if (dsq_cpu_use_avx2()) {
        dsq_vec_swiglu_avx2(n, gate, up, out);
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
