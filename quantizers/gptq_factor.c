/* GPTQ's factor: the upper Cholesky factor of the damped inverse Hessian
 * (IST-DASLab gptq.py: cholesky, cholesky_inverse, cholesky(upper=True),
 * all in float32 on the GPU). The product path factors in float, as the
 * reference does, in the output buffer itself; the double path is the
 * reference the tests hold it to (dsq_gptq_hinv_upper). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu.h"    /* denormals flushed in the loops */
#include "kernels/rowupd.h" /* the factorization's inner loops */
#include "quantizers/gptq.h"
#include "quantizers/gptq_internal.h"

#define CHOL_NB 64   /* Cholesky block width */
#define CHOL_JC 256  /* columns of the trailing update per pass over the rows */
#define INV_CHUNK 64 /* columns per task in the triangular inverse */
#define INV_RB 64    /* rows of the inverse solved per block */
#define INV_KC 256   /* solved rows per pass over a block's rows */

#define REAL float
#define SFX f32
#include "quantizers/gptq_factor_impl.h"
#undef REAL
#undef SFX
#define REAL double
#define SFX f64
#include "quantizers/gptq_factor_impl.h"
#undef REAL
#undef SFX

/* With (H + damp I) = R R^T, R = J L J upper for the lower Cholesky factor L
 * of a = J (H + damp I) J (J reverses the indices), (H + damp I)^-1 = U^T U
 * with U = R^-1 = J L^-1 J: the factor the reference takes as cholesky of the
 * inverse, without forming the inverse. */
dsq_status dsq_gptq_hinv_upper(const double *H, int64_t n, double damp, double *U)
{
    if (!H || !U || n <= 0) return dsq_fail(DSQ_ERR_ARG, "gptq: bad Hessian arguments");
    double *a = dsq_gptq_alloc_square(n, sizeof(double));
    if (!a)
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for a [%lld x %lld] Hessian", (long long)n, (long long)n);
    dsq_status st = hinv_upper_with_f64(H, n, damp, a, U);
    free(a);
    return st;
}

dsq_status dsq_gptq_hinv_upper_f32(const double *H, int64_t n, double damp, float *U)
{
    if (!H || !U || n <= 0) return dsq_fail(DSQ_ERR_ARG, "gptq: bad Hessian arguments");
    return hinv_upper_with_f32(H, n, damp, U, U);
}

/* u[i][j] (i >= j) = the damped Hp[n-1-i][n-1-j] in float, Hp = H permuted
 * with dead diagonals set to 1. */
static void fill_factor_input(float *u, const double *H, const int64_t *perm, const uint8_t *dead, int64_t n,
                              double damp)
{
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; i++) {
        const int64_t pi = perm[n - 1 - i];
        const double *hi = H + pi * n;
        for (int64_t j = 0; j <= i; j++) {
            const int64_t pj = perm[n - 1 - j];
            u[i * n + j] = (float)dsq_gptq_damped(hi[pj], pi == pj, dead[pi], damp);
        }
    }
}

dsq_status dsq_gptq_factor(const double *H, const int64_t *perm, const uint8_t *dead, int64_t n, const dsq_gptq_opts *o,
                           const char *name, float *U, dsq_gptq_report *rep)
{
    float *scratch = malloc((size_t)n * CHOL_NB * sizeof *scratch);
    if (!scratch)
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: layer %s: out of memory for a [%lld x %lld] Hessian", name, (long long)n,
                        (long long)n);
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++) mean += dead[perm[i]] ? 1.0 : H[perm[i] * n + perm[i]];
    mean /= (double)n;
    double p = o->percdamp, first = p;
    int tries = 0;
    int64_t bad = -1;
    for (;;) {
        tries++;
        fill_factor_input(U, H, perm, dead, n, p * mean);
        bad = chol_lower_f32(U, n, scratch);
        if (bad >= 0) bad = n - 1 - bad; /* in H's (permuted) indices */
        if (bad < 0 || p >= 1.0) break;
        p = p < 0.005 ? 0.01 : (2.0 * p < 1.0 ? 2.0 * p : 1.0);
        DSQ_LOGW("gptq: layer %s: Hessian did not factor; retrying with dampening %g", name, p);
    }
    free(scratch);
    if (bad >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC,
                        "gptq: layer %s: Hessian [%lld x %lld] is not positive definite (pivot %lld) with dampening "
                        "%g to %g of the mean diagonal %g (%d tries)",
                        name, (long long)n, (long long)n, (long long)bad, first, p, mean, tries);
    DSQ_TRY(tri_inv_reversed_f32(U, n, U));
    rep->percdamp = p;
    rep->damp = p * mean;
    rep->damp_tries = tries;
    return DSQ_OK;
}
