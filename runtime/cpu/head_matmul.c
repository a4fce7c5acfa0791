/* Per-head products for MLA's absorbed attention: each head has its own
 * small dense matrix, so the heads are the parallel items and each runs the
 * single-threaded GEMM (kernels/gemm.h) on its strided slices. */
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "runtime/cpu/ops.h"

dsq_status dsq_cpu_head_matmul(const dsq_head_mm *p, const float *x, float *y, int n)
{
    if (p->n_heads <= 0 || p->out <= 0 || p->in <= 0 || n < 0)
        return dsq_fail(DSQ_ERR_ARG, "head matmul: bad shape (%d heads of [%lld x %lld], %d rows)", p->n_heads,
                        (long long)p->out, (long long)p->in, n);
    if (n == 0) return DSQ_OK;
    int threads = dsq_cpu_threads();
    if (threads > p->n_heads) threads = p->n_heads;
    size_t per = dsq_gemm_scratch_floats(p->out, p->in);
    float *scratch = dsq_gemm_scratch_alloc(per * (size_t)threads);
    if (!scratch) return dsq_fail(DSQ_ERR_NOMEM, "head matmul: out of memory");
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int h = 0; h < p->n_heads; h++)
        dsq_gemm_f32(DSQ_GEMM_BT, n, p->out, p->in, x + (int64_t)h * p->x_head, p->x_stride,
                     p->W + (int64_t)h * p->w_head, p->in, y + (int64_t)h * p->y_head, p->y_stride, false,
                     scratch + per * (size_t)omp_get_thread_num());
    free(scratch);
    return DSQ_OK;
}
