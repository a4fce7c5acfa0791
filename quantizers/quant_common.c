/* Shared level searches, after ggml/src/ggml-quants.c (llama.cpp c392e509):
 * make_qx_quants and make_qkx3_quants, with the same float operations in the
 * same order so that the scales come out bit for bit. */
#include "quantizers/quant_common.h"

#include <math.h>

const int8_t dsq_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline float qx_weight(const float *qw, const float *x, int i, int rmse_type)
{
    if (qw) return qw[i];
    switch (rmse_type) {
    case 1: return x[i] * x[i];
    case 2: return 1;
    case 3: return fabsf(x[i]);
    default: return sqrtf(fabsf(x[i]));
    }
}

/* Levels of x at inverse scale iscale, with the weighted sums the scale fit needs. */
static void qx_sums(int n, int nmax, const float *x, float iscale, const float *qw, int rmse_type, float *sumlx,
                    float *suml2)
{
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = clamp_int(dsq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        float w = qx_weight(qw, x, i, rmse_type);
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

static void qx_levels(int n, int nmax, const float *x, float iscale, int8_t *L)
{
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + clamp_int(dsq_nearest_int(iscale * x[i]), -nmax, nmax - 1));
}

float dsq_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < DSQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    qx_levels(n, nmax, x, iscale, L);
    if (rmse_type == 0) return 1 / iscale;
    bool return_early = rmse_type < 0;
    if (rmse_type < 0) rmse_type = -rmse_type;
    float sumlx, suml2;
    qx_sums(n, nmax, x, iscale, qw, rmse_type, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        qx_sums(n, nmax, x, iscale, qw, rmse_type, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            qx_levels(n, nmax, x, iscale, L);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static inline float qkx3_weight(const float *weights, const float *x, int i)
{
    return weights ? weights[i] : x[i] * x[i];
}

/* Weighted error of levels Lv at (scale, min): sum w * |scale*L + min - x| or its square. */
static float qkx3_error(int n, const float *x, const float *weights, const uint8_t *Lv, float scale, float min,
                        bool use_mad)
{
    float err = 0;
    for (int i = 0; i < n; ++i) {
        float diff = scale * Lv[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        err += qkx3_weight(weights, x, i) * diff;
    }
    return err;
}

float dsq_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = qkx3_weight(weights, x, 0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = qkx3_weight(weights, x, i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)clamp_int(dsq_nearest_int(iscale * (x[i] - min)), 0, nmax);
    float best_err = qkx3_error(n, x, weights, L, scale, min, use_mad);
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = clamp_int(dsq_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = qkx3_weight(weights, x, i);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = qkx3_error(n, x, weights, Laux, this_scale, this_min, use_mad);
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}
