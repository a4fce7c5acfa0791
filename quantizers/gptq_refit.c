/* GPTQ's scales refitted to its codes (gptq.h, dsq_gptq_refit_scales).
 *
 * GPTQ picks each group's scale before it picks the group's codes, and the
 * error feedback then moves the weights the codes approximate. With the codes
 * fixed, the layer's proxy loss tr((W - Q) H (W - Q)^T) is quadratic in the
 * scales: for one row, Q = A s with A [cols x groups] holding the code offsets
 * a_c = code_c - zero_g in column g(c), so the best scales solve
 *
 *     (A^T H A) s = A^T H w.
 *
 * A^T H A couples every pair of groups through H; it is built with one GEMM
 * per group over a tile of rows (Y = H[:, g] A[:, g]^T, then a dot per group),
 * cols^2 multiply-adds per row, the order of GPTQ's own updates. A small ridge
 * towards GPTQ's scales keeps groups whose codes are all at the zero point
 * (and nearly singular systems) where GPTQ put them; a solved scale that is not
 * finite and positive keeps GPTQ's too. Rows of more than REFIT_MAX_GROUPS
 * groups keep GPTQ's scales (the solve is groups^3 per row, the system
 * groups^2 per row of the tile). The codes stay, so the artifact's
 * layout and every reader's arithmetic are unchanged. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/gemm.h"
#include "quantizers/gptq.h"
#include "quantizers/gptq_internal.h"

#define REFIT_ROWS 64        /* rows per tile: the GEMMs' m */
#define RIDGE 1e-6           /* of the mean diagonal of A^T H A */
#define REFIT_MAX_GROUPS 256 /* 14336 / 64 (Llama-3-8B's down_proj at g64) fits; 28672 / 32 does not */

typedef struct refit_ctx {
    const float *w;
    int64_t rows, cols, ng;
    int gs;
    const float *Hp;      /* damped H in group order [cols x cols] */
    const double *Hd;     /* H's diagonal by original column (0: a dead column) */
    const int64_t *order; /* group-order position -> original column */
    dsq_intq *q;
} refit_ctx;

/* Solves the ng x ng SPD system m s = b in place (b becomes s); false when a
 * pivot is not positive. */
static bool chol_solve(double *m, double *b, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        double d = m[j * n + j];
        for (int64_t k = 0; k < j; k++) d -= m[j * n + k] * m[j * n + k];
        if (!(d > 0.0)) return false;
        d = sqrt(d);
        m[j * n + j] = d;
        for (int64_t i = j + 1; i < n; i++) {
            double v = m[i * n + j];
            for (int64_t k = 0; k < j; k++) v -= m[i * n + k] * m[j * n + k];
            m[i * n + j] = v / d;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        double v = b[i];
        for (int64_t k = 0; k < i; k++) v -= m[i * n + k] * b[k];
        b[i] = v / m[i * n + i];
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        double v = b[i];
        for (int64_t k = i + 1; k < n; k++) v -= m[k * n + i] * b[k];
        b[i] = v / m[i * n + i];
    }
    return true;
}

/* One row's new scales from its normal equations (M, b in group order). */
static int64_t solve_row(const refit_ctx *c, int64_t r, double *M, double *b)
{
    const int64_t ng = c->ng;
    float *s = c->q->scales + r * ng;
    double mean = 0.0;
    for (int64_t g = 0; g < ng; g++) mean += M[g * ng + g];
    const double ridge = RIDGE * (mean > 0.0 ? mean / (double)ng : 1.0);
    for (int64_t g = 0; g < ng; g++) {
        M[g * ng + g] += ridge;
        b[g] += ridge * (double)s[g];
    }
    if (!chol_solve(M, b, ng)) return 0;
    int64_t changed = 0;
    for (int64_t g = 0; g < ng; g++) {
        const float v = (float)b[g];
        if (isfinite(v) && v > 0.0f && v != s[g]) {
            s[g] = v;
            changed++;
        }
    }
    return changed;
}

/* Rows [r0, r0 + nr): A and W in group order (A also by column, At), then
 * b and M by GEMMs whose big operand is H itself, read in place (H is
 * symmetric, so H w = (w^T H)^T and H[:, g] = H[g, :]^T): only the tile's few
 * rows are packed, where packing H's rows once per tile had cost as much as
 * the products on wide layers. */
static int64_t refit_tile(const refit_ctx *c, int64_t r0, int64_t nr, float *A, float *At, float *W, float *Y,
                          float *sc, double *M, double *b)
{
    const int64_t n = c->cols, ng = c->ng, gs = c->gs;
    const dsq_intq *q = c->q;
    for (int64_t t = 0; t < nr; t++)
        for (int64_t j = 0; j < n; j++) {
            const int64_t col = c->order[j], r = r0 + t;
            A[t * n + j] = At[j * nr + t] = (float)q->codes[r * n + col] - (float)q->zeros[r * ng + j / gs];
            W[t * n + j] = c->Hd[col] == 0.0 ? 0.0f : c->w[r * n + col]; /* GPTQ zeroes dead columns */
        }
    /* b = A^T H w, per row and group: Y [n x nr] = H W^T */
    dsq_gemm_f32(DSQ_GEMM_BT, n, nr, n, c->Hp, n, W, n, Y, nr, false, sc);
    memset(b, 0, (size_t)(nr * ng) * sizeof *b);
    for (int64_t j = 0; j < n; j++)
        for (int64_t t = 0; t < nr; t++) b[t * ng + j / gs] += (double)At[j * nr + t] * (double)Y[j * nr + t];
    /* column h of A^T H A: Y = H[:, group h] A[:, group h]^T, dotted with each group of A */
    double acc[REFIT_ROWS];
    for (int64_t h = 0; h < ng; h++) {
        dsq_gemm_f32(DSQ_GEMM_BT, n, nr, gs, c->Hp + h * gs, n, A + h * gs, n, Y, nr, false, sc);
        for (int64_t g = 0; g < ng; g++) {
            for (int64_t t = 0; t < nr; t++) acc[t] = 0.0;
            for (int64_t j = g * gs; j < (g + 1) * gs; j++)
                for (int64_t t = 0; t < nr; t++) acc[t] += (double)At[j * nr + t] * (double)Y[j * nr + t];
            for (int64_t t = 0; t < nr; t++) M[t * ng * ng + g * ng + h] = acc[t];
        }
    }
    int64_t changed = 0;
    for (int64_t t = 0; t < nr; t++) changed += solve_row(c, r0 + t, M + t * ng * ng, b + t * ng);
    return changed;
}

dsq_status dsq_gptq_refit_scales(const float *w, const double *H, double damp, dsq_intq *q, const char *name,
                                 int64_t *n_changed)
{
    return dsq_gptq_refit_scales_in(w, H, damp, q, name, n_changed, NULL);
}

dsq_status dsq_gptq_refit_scales_in(const float *w, const double *H, double damp, dsq_intq *q, const char *name,
                                    int64_t *n_changed, float *work)
{
    name = name ? name : "?";
    const int64_t rows = q->rows, n = q->cols, ng = q->n_groups, gs = q->group_size;
    if (n_changed) *n_changed = 0;
    if (ng > REFIT_MAX_GROUPS) { /* a groups^3 solve per row: GPTQ's scales stay */
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            DSQ_LOGI("gptq refit: rows of more than %d groups (layer %s: %lld) keep GPTQ's scales", REFIT_MAX_GROUPS,
                     name, (long long)ng);
        return DSQ_OK;
    }
    int64_t *order = malloc((size_t)n * sizeof *order);
    int64_t *fill = calloc((size_t)ng, sizeof *fill);
    double *Hd = malloc((size_t)n * sizeof *Hd);
    float *Hp = work ? work : (float *)dsq_gptq_alloc_square(n, sizeof(float));
    dsq_status st = DSQ_OK;
    int64_t changed = 0;
    if (!order || !fill || !Hd || !Hp) {
        st = dsq_fail(DSQ_ERR_NOMEM, "gptq refit: layer %s: out of memory", name);
        goto done;
    }
    /* group order: the columns of group g (g_idx's or c / gs) at [g gs, (g + 1) gs) */
    for (int64_t col = 0; col < n; col++) {
        const int64_t g = q->g_idx ? q->g_idx[col] : col / gs;
        if (g < 0 || g >= ng || fill[g] >= gs) {
            st = dsq_fail(DSQ_ERR_ARG,
                          "gptq refit: layer %s: column %lld's group %lld is not one of %lld groups of %lld", name,
                          (long long)col, (long long)g, (long long)ng, (long long)gs);
            goto done;
        }
        order[g * gs + fill[g]++] = col;
    }
    /* dead columns as GPTQ treats them (the weight is zeroed below) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            const int64_t a = order[i], b = order[j];
            Hp[i * n + j] = (float)dsq_gptq_damped(H[a * n + b], a == b, H[a * n + a] == 0.0, damp);
        }
    for (int64_t i = 0; i < n; i++) Hd[i] = H[i * n + i];
    refit_ctx ctx = {w, rows, n, ng, (int)gs, Hp, Hd, order, q};
    int oom = 0;
#pragma omp parallel reduction(+ : changed) reduction(| : oom)
    {
        const int64_t tr = REFIT_ROWS;
        float *A = malloc((size_t)(4 * tr * n) * sizeof(float));
        float *sc = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(tr, n));
        double *M = malloc((size_t)(tr * ng * ng + tr * ng) * sizeof(double));
        if (!A || !sc || !M) oom = 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < rows; r0 += tr) {
            if (!A || !sc || !M) continue;
            const int64_t nr = rows - r0 < tr ? rows - r0 : tr;
            changed += refit_tile(&ctx, r0, nr, A, A + tr * n, A + 2 * tr * n, A + 3 * tr * n, sc, M, M + tr * ng * ng);
        }
        free(A);
        free(sc);
        free(M);
    }
    if (oom) st = dsq_fail(DSQ_ERR_NOMEM, "gptq refit: layer %s: out of memory for row tiles", name);
done:
    free(order);
    free(fill);
    free(Hd);
    if (Hp != work) free(Hp);
    if (n_changed) *n_changed = changed;
    return st;
}
