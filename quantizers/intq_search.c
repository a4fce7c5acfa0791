/* The group search of intq_search.h: every ratio of the grid, rule params
 * at that ratio, the weighted error of the codes they give. */
#include "quantizers/intq_search.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/vec.h" /* the Gram objective: dots of one group */
#include "quantizers/intq_internal.h"
#include "quantizers/intq_search_lanes.h"

static const dsq_intq_grid_info k_grids[DSQ_INTQ_GRID_N] = {
    [DSQ_INTQ_GRID_MINMAX] = {"minmax", 1, 1, 2.0f, false},
    [DSQ_INTQ_GRID_MSE] = {"mse", 20, 100, 2.4f, false},
    [DSQ_INTQ_GRID_IMATRIX_MSE] = {"imatrix-mse", 19, 20, 3.0f, true},
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

int64_t dsq_intq_lanes_ref(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                           const dsq_intq_code_grid *g, float norm)
{
    return dsq_intq_lanes_body(acc, w, n, imp, g, norm);
}

/* The lane sum on the widest copy this CPU runs; all give the same bits. */
static int64_t lanes(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                     const dsq_intq_code_grid *g, float norm)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_cpu_has(DSQ_CPU_AVX512F)) return dsq_intq_lanes_avx512(acc, w, n, imp, g, norm);
    if (dsq_cpu_has(DSQ_CPU_AVX2)) return dsq_intq_lanes_avx2(acc, w, n, imp, g, norm);
#endif
    return dsq_intq_lanes_ref(acc, w, n, imp, g, norm);
}

bool dsq_intq_fake_group_ref(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out)
{
    return dsq_intq_fake_group_body(w, s, n, p, v, out);
}

bool dsq_intq_fake_group(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_cpu_has(DSQ_CPU_AVX512F)) return dsq_intq_fake_group_avx512(w, s, n, p, v, out);
    if (dsq_cpu_has(DSQ_CPU_AVX2)) return dsq_intq_fake_group_avx2(w, s, n, p, v, out);
#endif
    return dsq_intq_fake_group_ref(w, s, n, p, v, out);
}

/* The code grid of the rule at one total ratio, from the group's min and max. */
static dsq_intq_code_grid code_grid(float mn, float mx, const dsq_intq_params *p, float clip)
{
    float s, t;
    int z;
    dsq_intq_range_params(mn, mx, p, clip, &s, &z, &t);
    return (dsq_intq_code_grid){t < INFINITY ? -t : -FLT_MAX, t < INFINITY ? t : FLT_MAX, s, (float)z,
                                (float)dsq_intq_maxq(p->bits)};
}

/* E at one total ratio from the group's min and max. */
static double range_error(const float *w, int64_t n, const float *imp, float mn, float mx, const dsq_intq_params *p,
                          float clip, float norm)
{
    const dsq_intq_code_grid g = code_grid(mn, mx, p, clip);
    float acc[DSQ_INTQ_LANES] = {0};
    for (int64_t i = lanes(acc, w, n, imp, &g, norm); i < n; i++) { /* the tail; any other exponent */
        const float d = dsq_intq_code_error(w[i], &g);
        const float q = norm == 2.0f   ? d * d
                        : norm == 3.0f ? d * d * d
                        : norm == 2.4f ? dsq_intq_pow_2p4(d)
                                       : powf(d, norm);
        acc[i % DSQ_INTQ_LANES] += (imp ? imp[i] : 1.0f) * q;
    }
    float e = 0.0f;
    for (int l = 0; l < DSQ_INTQ_LANES; l++) e += acc[l];
    return (double)e;
}

double dsq_intq_group_error(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            float norm)
{
    float mn, mx;
    dsq_intq_min_max(w, n, &mn, &mx);
    return range_error(w, n, imp, mn, mx, p, clip, norm);
}

void dsq_intq_deltas_ref(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d)
{
    dsq_intq_deltas_body(w, n, g, d);
}

static void deltas(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_cpu_has(DSQ_CPU_AVX512F))
        dsq_intq_deltas_avx512(w, n, g, d);
    else if (dsq_cpu_has(DSQ_CPU_AVX2))
        dsq_intq_deltas_avx2(w, n, g, d);
    else
#endif
        dsq_intq_deltas_ref(w, n, g, d);
}

void dsq_intq_code_deltas(const float *w, int64_t n, float mn, float mx, const dsq_intq_params *p, float clip, float *d)
{
    const dsq_intq_code_grid g = code_grid(mn, mx, p, clip);
    deltas(w, n, &g, d);
}

/* E as d^T G d, d the group's dequantization error at one total ratio, in
 * double; d goes through scratch. */
static double gram_error(const float *w, int64_t n, const float *G, float mn, float mx, const dsq_intq_params *p,
                         float clip, float *d)
{
    const dsq_intq_code_grid g = code_grid(mn, mx, p, clip);
    deltas(w, n, &g, d);
    double e = 0.0;
    for (int64_t k = 0; k < n; k++) e += (double)d[k] * (double)dsq_vec_dot_f32(n, G + k * n, d);
    return e;
}

float dsq_intq_grid_ratio(int k, int steps) { return (float)(1.0 - (double)k / (double)steps); }

float dsq_intq_search_grid(const float *w, int64_t n, const dsq_intq_params *p, float clip, int n_ratios, int steps,
                           const dsq_intq_objective *obj, float *scratch, double *err)
{
    float mn, mx;
    dsq_intq_min_max(w, n, &mn, &mx);
    float best_ratio = 1.0f;
    double best = INFINITY;
    for (int k = 0; k < n_ratios; k++) {
        const float ratio = dsq_intq_grid_ratio(k, steps);
        const double e = obj->gram ? gram_error(w, n, obj->gram, mn, mx, p, clip * ratio, scratch)
                                   : range_error(w, n, obj->imp, mn, mx, p, clip * ratio, obj->norm);
        if (e < best) { /* strict: ties keep the wider range */
            best = e;
            best_ratio = ratio;
        }
    }
    if (err) *err = best;
    return best_ratio;
}

float dsq_intq_search_ratio(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            double *err)
{
    const dsq_intq_grid_info *g = dsq_intq_grid_get(p->grid);
    if (!g || g->n_ratios <= 1) {
        if (err) *err = 0.0;
        return 1.0f;
    }
    const dsq_intq_objective obj = {g->weighted ? imp : NULL, g->norm, NULL};
    return dsq_intq_search_grid(w, n, p, clip, g->n_ratios, g->steps, &obj, NULL, err);
}
