/* The AVX2 copy of the group search's lane sum (quantizers/intq_search_lanes.h):
 * the same source, built with its row of DSQ_SIMD_SOURCES in CMakeLists.txt and
 * called only behind dsq_cpu_has in quantizers/intq_search.c. */
#include "quantizers/intq_search_lanes.h"

int64_t dsq_intq_lanes_avx2(float acc[DSQ_INTQ_LANES], const float *w, int64_t n, const float *imp,
                            const dsq_intq_code_grid *g, float norm)
{
    return dsq_intq_lanes_body(acc, w, n, imp, g, norm);
}

bool dsq_intq_fake_group_avx2(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out)
{
    return dsq_intq_fake_group_body(w, s, n, p, v, out);
}

void dsq_intq_deltas_avx2(const float *w, int64_t n, const dsq_intq_code_grid *g, float *d)
{
    dsq_intq_deltas_body(w, n, g, d);
}
