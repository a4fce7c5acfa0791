/* The codes of one GGUF block with its scales held fixed: where each
 * element's code lives in the block's bytes, and the value each code stands
 * for. GPTQ into blocks (quantizers/gptq_blocks.h) rounds an element again
 * after error feedback moved its weight, to the nearest value the block's
 * scales can express, and writes that code back: the block stays a standard
 * block of its type. Layouts and value expressions are ggml's dequantizers'
 * (ggml-quants.c at llama.cpp c392e509; ours in quantizers/legacy.c,
 * kquants_dot.c and iq4.c), so dsq_block_value equals the dequantized value
 * bit for bit. */
#ifndef DSQ_QUANTIZERS_BLOCK_CODES_H
#define DSQ_QUANTIZERS_BLOCK_CODES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

#define DSQ_BLOCK_CODES_MAX 256 /* elements of the largest block */

/* Element e's value for code q: a[e] * level(q) + b[e], where level(q) is
 * q + c0 (affine types) or table[q] (the IQ4 types); codes run lo..hi. */
typedef struct dsq_block_grid {
    dsq_type type;
    int n;      /* elements in the block */
    int lo, hi; /* code range */
    int c0;
    const int8_t *table; /* NULL: affine */
    float a[DSQ_BLOCK_CODES_MAX], b[DSQ_BLOCK_CODES_MAX];
} dsq_block_grid;

/* Whether t has a code map here (every type gptq_blocks quantizes to). */
bool dsq_block_codes_supported(dsq_type t);

/* The grid of the block at blk (its scales as stored). */
void dsq_block_grid_get(dsq_type t, const void *blk, dsq_block_grid *g);

/* Element e's code, and setting it (lo <= q <= hi) without touching the rest. */
int dsq_block_code_get(dsq_type t, const void *blk, int e);
void dsq_block_code_set(dsq_type t, void *blk, int e, int q);

/* The value code q stands for at element e. */
static inline float dsq_block_value(const dsq_block_grid *g, int e, int q)
{
    const float lv = g->table ? (float)g->table[q] : (float)(q + g->c0);
    return g->b[e] == 0.0f ? g->a[e] * lv : g->a[e] * lv + g->b[e];
}

/* The code whose value is nearest x at element e (ties: the lower code). */
int dsq_block_nearest(const dsq_block_grid *g, int e, float x);

#endif
