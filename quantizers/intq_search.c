/* The group search of intq_search.h: every ratio of the grid, rule params
 * at that ratio, the weighted error of the codes they give. */
#include "quantizers/intq_search.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "quantizers/intq_internal.h"

static const dsq_intq_grid_info k_grids[DSQ_INTQ_GRID_N] = {
    [DSQ_INTQ_GRID_MINMAX] = {"minmax", 1, 0.0f, 2.0f, false},
    [DSQ_INTQ_GRID_MSE] = {"mse", 20, 0.01f, 2.4f, false},
    [DSQ_INTQ_GRID_IMATRIX_MSE] = {"imatrix-mse", 19, 0.05f, 3.0f, true},
};

const dsq_intq_grid_info *dsq_intq_grid_get(dsq_intq_grid g)
{
    return (unsigned)g < DSQ_INTQ_GRID_N ? &k_grids[g] : NULL;
}

int dsq_intq_grid_parse(const char *name)
{
    if (!name) return -1;
    if (!strcmp(name, "imatrix_mse")) return DSQ_INTQ_GRID_IMATRIX_MSE;
    for (int g = 0; g < DSQ_INTQ_GRID_N; g++)
        if (!strcmp(name, k_grids[g].name)) return g;
    return -1;
}

/* Round half to even for |x| < 2^22 by the float format itself (what rintf
 * does in the default rounding mode) without a library call; larger values
 * only happen far outside the code range, where the clamp decides. */
static inline float round_even(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (x + magic) - magic;
}

/* One value's code error |dequant(code) - w| as dsq_intq_code gives codes. */
static inline float code_error(float w, float lo, float hi, float s, float zf, float top)
{
    float v = w < lo ? lo : w > hi ? hi : w;
    float r = round_even(v / s) + zf;
    r = r < 0.0f ? 0.0f : r > top ? top : r;
    return fabsf((r - zf) * s - w);
}

/* E at one total ratio from the group's min and max; the exponents the
 * table uses each get a loop without a call in it. */
static double range_error(const float *w, int64_t n, const float *imp, float mn, float mx, const dsq_intq_params *p,
                          float clip, float norm)
{
    float s, t;
    int z;
    dsq_intq_range_params(mn, mx, p, clip, &s, &z, &t);
    const float zf = (float)z, top = (float)dsq_intq_maxq(p->bits);
    const float lo = t < INFINITY ? -t : -FLT_MAX, hi = t < INFINITY ? t : FLT_MAX;
    float e = 0.0f;
    if (norm == 2.0f) {
        for (int64_t i = 0; i < n; i++) {
            float d = code_error(w[i], lo, hi, s, zf, top);
            e += (imp ? imp[i] : 1.0f) * d * d;
        }
    } else if (norm == 3.0f) {
        for (int64_t i = 0; i < n; i++) {
            float d = code_error(w[i], lo, hi, s, zf, top);
            e += (imp ? imp[i] : 1.0f) * d * d * d;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float d = code_error(w[i], lo, hi, s, zf, top);
            e += (imp ? imp[i] : 1.0f) * powf(d, norm);
        }
    }
    return (double)e;
}

double dsq_intq_group_error(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            float norm)
{
    float mn, mx;
    dsq_intq_min_max(w, n, &mn, &mx);
    return range_error(w, n, imp, mn, mx, p, clip, norm);
}

float dsq_intq_search_ratio(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            double *err)
{
    const dsq_intq_grid_info *g = dsq_intq_grid_get(p->grid);
    if (!g || g->n_ratios <= 1) {
        if (err) *err = 0.0;
        return 1.0f;
    }
    float mn, mx;
    dsq_intq_min_max(w, n, &mn, &mx);
    float best_ratio = 1.0f;
    double best = INFINITY;
    for (int k = 0; k < g->n_ratios; k++) {
        float ratio = 1.0f - (float)k * g->step;
        double e = range_error(w, n, g->weighted ? imp : NULL, mn, mx, p, clip * ratio, g->norm);
        if (e < best) { /* strict: ties keep the wider range */
            best = e;
            best_ratio = ratio;
        }
    }
    if (err) *err = best;
    return best_ratio;
}
