/* The blocked Cholesky factorization and triangular inverse behind GPTQ's
 * factor, written once for both precisions: quantizers/gptq_factor.c
 * includes this file with REAL (float or double) and SFX (f32 or f64)
 * defined, which name the functions and pick the row-update kernel. Not a
 * header of its own: it has no guard and is included nowhere else. Every
 * loop runs with denormals flushed (dsq_cpu_flush_denormals): in float a
 * factor's tiny entries would otherwise cost a microcode assist each. */

#define GF_CAT_(a, b) a##_##b
#define GF_CAT(a, b) GF_CAT_(a, b)
#define GF(name) GF_CAT(name, SFX)
#define GF_ROWUPD GF_CAT(dsq_rowupd, SFX)

/* Cholesky's trailing update after the panel [k0, k1): for every row i >= k1,
 * ai[k1 .. i] -= sum_k ai[k0 + k] * panel_t[k][k1 .. i]. In column chunks of
 * CHOL_JC, so a chunk of the panel (CHOL_NB x CHOL_JC) stays in L2 while every
 * row below uses it; within a chunk DSQ_ROWUPD_ROWS rows at a time over their
 * common columns, then each row's few more. Every element still takes the
 * panel's k in ascending order: the bits do not depend on this. */
static void GF(trailing_update)(REAL *a, int64_t n, int64_t k0, int64_t k1, const REAL *panel_t)
{
    const int64_t nb = k1 - k0;
#pragma omp parallel
    {
        const unsigned csr = dsq_cpu_flush_denormals();
        for (int64_t j0 = k1; j0 < n; j0 += CHOL_JC) {
            const int64_t j1 = j0 + CHOL_JC < n ? j0 + CHOL_JC : n;
#pragma omp for schedule(dynamic, 2) nowait
            for (int64_t i = j0; i < n; i += DSQ_ROWUPD_ROWS) {
                const int64_t nr = n - i < DSQ_ROWUPD_ROWS ? n - i : DSQ_ROWUPD_ROWS;
                const int64_t w = (i + 1 < j1 ? i + 1 : j1) - j0;
                REAL *ai = a + i * n;
                GF_ROWUPD(nr, nb, w, ai + j0, n, ai + k0, n, 1, panel_t + j0, n, -1);
                for (int64_t r = 1; r < nr; r++) {
                    const int64_t more = (i + r + 1 < j1 ? i + r + 1 : j1) - j0 - w;
                    if (more > 0)
                        GF_ROWUPD(1, nb, more, ai + r * n + j0 + w, n, ai + r * n + k0, n, 1, panel_t + j0 + w, n, -1);
                }
            }
        }
        dsq_cpu_denormals_restore(csr);
    }
}

/* In-place lower Cholesky of a [n x n] (lower triangle read and written).
 * Returns -1, or the index of the first pivot that is not positive. Blocked,
 * right-looking; the trailing update reads a transposed copy of the panel so
 * its inner loop is a contiguous axpy. */
static int64_t GF(chol_lower)(REAL *a, int64_t n, REAL *panel_t)
{
    const unsigned csr = dsq_cpu_flush_denormals();
    int64_t bad = -1;
    for (int64_t k0 = 0; k0 < n && bad < 0; k0 += CHOL_NB) {
        const int64_t k1 = k0 + CHOL_NB < n ? k0 + CHOL_NB : n, nb = k1 - k0;
        for (int64_t j = k0; j < k1; j++) {
            REAL d = a[j * n + j];
            for (int64_t k = k0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
            if (!(d > 0) || !isfinite(d)) {
                bad = j;
                break;
            }
            d = (REAL)sqrt((double)d); /* correctly rounded for float too */
            a[j * n + j] = d;
            for (int64_t i = j + 1; i < k1; i++) {
                REAL s = a[i * n + j];
                for (int64_t k = k0; k < j; k++) s -= a[i * n + k] * a[j * n + k];
                a[i * n + j] = s / d;
            }
        }
        if (bad >= 0 || k1 == n) break;
#pragma omp parallel
        {
            const unsigned tcsr = dsq_cpu_flush_denormals();
#pragma omp for schedule(static)
            for (int64_t i = k1; i < n; i++) {
                REAL *ai = a + i * n;
                for (int64_t j = k0; j < k1; j++) {
                    REAL s = ai[j];
                    for (int64_t k = k0; k < j; k++) s -= ai[k] * a[j * n + k];
                    ai[j] = s / a[j * n + j];
                }
                for (int64_t k = 0; k < nb; k++) panel_t[k * n + i] = ai[k0 + k];
            }
            dsq_cpu_denormals_restore(tcsr);
        }
        GF(trailing_update)(a, n, k0, k1, panel_t);
    }
    dsq_cpu_denormals_restore(csr);
    return bad;
}

/* Row i of L^-1, columns [c0, c0 + w) (b), into U's reversed place: only the
 * columns up to the diagonal, since the others (zeros of L^-1's upper part)
 * land in U's strict lower triangle, where L itself may still be stored. */
static void GF(put_row)(REAL *u, int64_t n, int64_t i, int64_t c0, int64_t w, const REAL *b)
{
    REAL *r = u + (n - 1 - i) * n + n - 1 - c0;
    for (int64_t j = 0; j < w && c0 + j <= i; j++) r[-j] = b[j];
}

/* Rows [i0, i0 + INV_RB) of L^-1's columns [c0, c0 + w), the rows before
 * i0 solved in blk. First what every row takes from those solved rows, all
 * rows at once, the solved rows in chunks of INV_KC so each chunk stays in L2
 * while every row group uses it; then the rows in order, each group of
 * DSQ_ROWUPD_ROWS with its share of this block's rows solved before it and
 * each row with its group's. Every element sums k ascending, as one row at a
 * time would: the bits do not depend on the blocking. L's diagonal comes from
 * diag (U's diagonal may already overwrite it). */
static void GF(inv_rows)(const REAL *a, const REAL *diag, int64_t n, int64_t c0, int64_t w, int64_t i0, REAL *blk,
                         REAL *acc, REAL *u)
{
    const int64_t rb = n - i0 < INV_RB ? n - i0 : INV_RB;
    memset(acc, 0, (size_t)rb * INV_CHUNK * sizeof *acc);
    for (int64_t k0 = c0; k0 < i0; k0 += INV_KC) {
        const int64_t kc = i0 - k0 < INV_KC ? i0 - k0 : INV_KC;
        GF_ROWUPD(rb, kc, w, acc, INV_CHUNK, a + i0 * n + k0, n, 1, blk + (k0 - c0) * INV_CHUNK, INV_CHUNK, 1);
    }
    for (int64_t g = 0; g < rb; g += DSQ_ROWUPD_ROWS) {
        const int64_t i = i0 + g, nr = rb - g < DSQ_ROWUPD_ROWS ? rb - g : DSQ_ROWUPD_ROWS;
        REAL *ag = acc + g * INV_CHUNK;
        GF_ROWUPD(nr, g, w, ag, INV_CHUNK, a + i * n + i0, n, 1, blk + (i0 - c0) * INV_CHUNK, INV_CHUNK, 1);
        for (int64_t r = 0; r < nr; r++) {
            const REAL *li = a + (i + r) * n, d = diag[i + r];
            REAL *bi = blk + (i + r - c0) * INV_CHUNK, *ar = ag + r * INV_CHUNK;
            GF_ROWUPD(1, r, w, ar, 0, li + i, 0, 1, blk + (i - c0) * INV_CHUNK, INV_CHUNK, 1);
            for (int64_t j = 0; j < w; j++) {
                const int64_t col = c0 + j;
                bi[j] = col < i + r ? -ar[j] / d : col == i + r ? 1 / d : 0;
            }
            GF(put_row)(u, n, i + r, c0, w, bi);
        }
    }
}

/* U = J L^-1 J: the inverse of the lower-triangular L in a, index-reversed
 * into the upper-triangular U (its strict lower triangle zeroed at the end).
 * u may be a itself: L^-1's nonzeros land on U's upper triangle, L's strict
 * lower triangle is only read, and its diagonal is saved first. Each block of
 * INV_CHUNK columns of L^-1 is an independent forward substitution; a thread
 * keeps its block's solved rows packed (n x INV_CHUNK) so the inner loop
 * reads them from cache while L's rows stream once. */
static dsq_status GF(tri_inv_reversed)(const REAL *a, int64_t n, REAL *u)
{
    REAL *diag = malloc((size_t)n * sizeof *diag);
    if (!diag) return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for a factor's diagonal [%lld]", (long long)n);
    for (int64_t i = 0; i < n; i++) diag[i] = a[i * n + i];
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        REAL *blk = malloc((size_t)n * INV_CHUNK * sizeof *blk);
        REAL *acc = malloc((size_t)INV_RB * INV_CHUNK * sizeof *acc);
        const unsigned csr = dsq_cpu_flush_denormals();
        if (!blk || !acc) oom = 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t c0 = 0; c0 < n; c0 += INV_CHUNK) {
            if (!blk || !acc) continue;
            const int64_t w = c0 + INV_CHUNK < n ? INV_CHUNK : n - c0;
            for (int64_t i0 = c0; i0 < n; i0 += INV_RB) GF(inv_rows)(a, diag, n, c0, w, i0, blk, acc, u);
        }
        dsq_cpu_denormals_restore(csr);
        free(acc);
        free(blk);
    }
    free(diag);
    if (oom)
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory inverting a [%lld x %lld] factor", (long long)n,
                        (long long)n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 1; i < n; i++) memset(u + i * n, 0, (size_t)i * sizeof *u);
    return DSQ_OK;
}

/* The upper factor of (H + damp I)^-1 (dsq_gptq_hinv_upper) with a [n x n]
 * as the factorization's workspace (its lower triangle; u may be a itself). */
static dsq_status GF(hinv_upper_with)(const double *H, int64_t n, double damp, REAL *a, REAL *u)
{
    REAL *scratch = malloc((size_t)n * CHOL_NB * sizeof *scratch);
    if (!scratch)
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for a [%lld x %lld] Hessian", (long long)n, (long long)n);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++)
            a[i * n + j] = (REAL)(H[(n - 1 - i) * n + (n - 1 - j)] + (i == j ? damp : 0.0));
    const int64_t bad = GF(chol_lower)(a, n, scratch);
    free(scratch);
    if (bad >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC, "gptq: Hessian [%lld x %lld] is not positive definite (pivot %lld)",
                        (long long)n, (long long)n, (long long)(n - 1 - bad));
    return GF(tri_inv_reversed)(a, n, u);
}

#undef GF_ROWUPD
#undef GF
#undef GF_CAT
#undef GF_CAT_
