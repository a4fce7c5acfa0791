/* Private to quantizers/: the steps GPTQ on INT groups (gptq.c) shares with
 * GPTQ into GGUF blocks (gptq_blocks.c). */
#ifndef DSQ_QUANTIZERS_GPTQ_INTERNAL_H
#define DSQ_QUANTIZERS_GPTQ_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "quantizers/gptq.h"

/* Rows of W a thread sweeps together: each streamed chunk of U's rows serves
 * all of them from cache in the lazy batch update (at 8 rows a 14336-wide
 * layer streamed U from memory eight times as often). */
#define DSQ_GPTQ_ROW_TILE 32

/* Act-order keys: a column's (or a block's) Hessian diagonal and its index;
 * qsort with dsq_gptq_key_cmp gives descending d, ties by ascending index. */
typedef struct dsq_gptq_key {
    double d;
    int64_t i;
} dsq_gptq_key;
int dsq_gptq_key_cmp(const void *a, const void *b);

/* Runs fn over the rows in tiles of tile_rows (the last one shorter) on the
 * OpenMP team, each thread with a scratch of tile_floats floats, and sums
 * what fn returns (its rows' loss) into *loss. GPTQ's rows are independent
 * given the factor, so the bytes do not depend on the threads. */
typedef double (*dsq_gptq_tile_fn)(const void *ctx, int64_t r0, int64_t nr, float *buf);
dsq_status dsq_gptq_run_tiles(int64_t rows, int64_t tile_rows, size_t tile_floats, dsq_gptq_tile_fn fn, const void *ctx,
                              double *loss);

/* An n x n matrix of elem-byte entries from the big-buffer allocator, NULL
 * when the size overflows or memory runs out. */
double *dsq_gptq_alloc_square(int64_t n, size_t elem);

/* Every weight and Hessian entry finite and the diagonal non-negative, else
 * an error naming the layer and the entry. */
dsq_status dsq_gptq_check_inputs(const float *w, int64_t rows, int64_t cols, const double *H, const char *name);

/* Entry h of H as GPTQ factors it: on the diagonal, a dead column's (h == 0)
 * becomes 1, then every diagonal entry gets the dampening damp. The refit
 * (gptq_refit.c) solves against the same matrix. */
static inline double dsq_gptq_damped(double h, bool diagonal, bool dead, double damp)
{
    return diagonal ? (dead ? 1.0 : h) + damp : h;
}

/* U [n x n] (float, processing order perm; dead diagonals set to 1): the
 * upper Cholesky factor of the damped inverse Hessian, factored in float as
 * the reference does (gptq_factor.c), with dampening o->percdamp of the mean
 * diagonal doubled up to 1 until H factors. U is the factorization's only
 * workspace; H (symmetric) is only read. Fills rep->percdamp, rep->damp and
 * rep->damp_tries. */
dsq_status dsq_gptq_factor(const double *H, const int64_t *perm, const uint8_t *dead, int64_t n, const dsq_gptq_opts *o,
                           const char *name, float *U, dsq_gptq_report *rep);

/* dsq_gptq_refit_scales with work, a [cols x cols] float buffer (GPTQ's
 * factor, done with by then), as the damped H's copy: a wide layer's largest
 * buffer taken over instead of allocated afresh (its pages zeroed by the
 * kernel again: 0.8 GB for a 14336-wide down_proj). NULL allocates one. */
dsq_status dsq_gptq_refit_scales_in(const float *w, const double *H, double damp, dsq_intq *q, const char *name,
                                    int64_t *n_changed, float *work);

/* Column i's error feedback inside a lazy batch of cnt columns: w1 the
 * batch's weights of one row, err[i] (already set) column i's scaled error,
 * U0 the factor at the batch's first row and column (row stride n). Column
 * i feeds the rest of its panel of DSQ_GPTQ_PANEL columns at once; the last
 * column of a panel feeds every later column of the batch with the panel's
 * errors in one rank-k update, whose rows of y stay in registers (a rank-1
 * update per column loaded and stored each element once per column). Every
 * element still takes its fused updates in column order, so the bits are
 * those of the column-by-column loop. */
#define DSQ_GPTQ_PANEL 16
void dsq_gptq_feedback(int64_t i, int64_t cnt, float *w1, const float *err, const float *U0, int64_t n);

#endif
