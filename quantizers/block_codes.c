/* Code maps of the GGUF block types; see block_codes.h. Each type says
 * where element e's low bits lie (byte, shift, width) and, for the 5-bit and
 * 3-/6-bit types, its high bits; values follow the dequantizers' expressions. */
#include "quantizers/block_codes.h"

#include <math.h>
#include <stddef.h>

#include "core/dtype.h"
#include "quantizers/quant_common.h"

typedef struct code_pos {
    size_t lo_byte;
    int lo_shift, lo_bits;
    size_t hi_byte; /* hi_bits 0: none */
    int hi_shift, hi_bits;
} code_pos;

/* 32 elements in 16 bytes: e < 16 the low nibble of byte e, else the high nibble of byte e - 16. */
static void nibble32(size_t qs, int e, code_pos *p)
{
    p->lo_byte = qs + (size_t)(e % 16);
    p->lo_shift = e < 16 ? 0 : 4;
    p->lo_bits = 4;
}

/* q2_K / q3_K 2-bit fields: e = 128 h + 32 j + k lies in qs[32 h + k] at bits 2j. */
static void twobit256(size_t qs, int e, code_pos *p)
{
    int h = e / 128, j = (e % 128) / 32, k = e % 32;
    p->lo_byte = qs + (size_t)(32 * h + k);
    p->lo_shift = 2 * j;
    p->lo_bits = 2;
}

/* q4_K / q5_K low nibbles: chunk c = e / 64 of 32 bytes, low nibbles then high. */
static void nibble256(size_t qs, int e, code_pos *p)
{
    int c = e / 64, r = e % 64;
    p->lo_byte = qs + (size_t)(32 * c + r % 32);
    p->lo_shift = r < 32 ? 0 : 4;
    p->lo_bits = 4;
}

static bool code_pos_of(dsq_type t, int e, code_pos *p)
{
    *p = (code_pos){0};
    switch (t) {
    case DSQ_TYPE_Q4_0: nibble32(offsetof(dsq_block_q4_0, qs), e, p); return true;
    case DSQ_TYPE_Q4_1: nibble32(offsetof(dsq_block_q4_1, qs), e, p); return true;
    case DSQ_TYPE_IQ4_NL: nibble32(offsetof(dsq_block_iq4_nl, qs), e, p); return true;
    case DSQ_TYPE_Q5_0:
    case DSQ_TYPE_Q5_1: {
        bool q50 = t == DSQ_TYPE_Q5_0;
        nibble32(q50 ? offsetof(dsq_block_q5_0, qs) : offsetof(dsq_block_q5_1, qs), e, p);
        p->hi_byte = (q50 ? offsetof(dsq_block_q5_0, qh) : offsetof(dsq_block_q5_1, qh)) + (size_t)(e / 8);
        p->hi_shift = e % 8; /* bit e of the little-endian uint32 */
        p->hi_bits = 1;
        return true;
    }
    case DSQ_TYPE_Q8_0:
        p->lo_byte = offsetof(dsq_block_q8_0, qs) + (size_t)e;
        p->lo_bits = 8;
        return true;
    case DSQ_TYPE_Q2_K: twobit256(offsetof(dsq_block_q2_K, qs), e, p); return true;
    case DSQ_TYPE_Q3_K: {
        twobit256(offsetof(dsq_block_q3_K, qs), e, p);
        int h = e / 128, j = (e % 128) / 32, k = e % 32;
        p->hi_byte = offsetof(dsq_block_q3_K, hmask) + (size_t)k;
        p->hi_shift = 4 * h + j;
        p->hi_bits = 1;
        return true;
    }
    case DSQ_TYPE_Q4_K: nibble256(offsetof(dsq_block_q4_K, qs), e, p); return true;
    case DSQ_TYPE_Q5_K:
        nibble256(offsetof(dsq_block_q5_K, qs), e, p);
        p->hi_byte = offsetof(dsq_block_q5_K, qh) + (size_t)(e % 32);
        p->hi_shift = e / 32;
        p->hi_bits = 1;
        return true;
    case DSQ_TYPE_Q6_K: {
        /* e = 128 h + 32 g + l: ql[64 h + l + 32 (g & 1)] nibble g / 2, qh[32 h + l] bits 2g */
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        p->lo_byte = offsetof(dsq_block_q6_K, ql) + (size_t)(64 * h + l + 32 * (g & 1));
        p->lo_shift = g < 2 ? 0 : 4;
        p->lo_bits = 4;
        p->hi_byte = offsetof(dsq_block_q6_K, qh) + (size_t)(32 * h + l);
        p->hi_shift = 2 * g;
        p->hi_bits = 2;
        return true;
    }
    case DSQ_TYPE_IQ4_XS: nibble32(offsetof(dsq_block_iq4_xs, qs) + (size_t)(16 * (e / 32)), e % 32, p); return true;
    default: return false;
    }
}

bool dsq_block_codes_supported(dsq_type t)
{
    code_pos p;
    return code_pos_of(t, 0, &p);
}

int dsq_block_code_get(dsq_type t, const void *blk, int e)
{
    code_pos p;
    if (!code_pos_of(t, e, &p)) return 0;
    const uint8_t *b = blk;
    if (t == DSQ_TYPE_Q8_0) return (int8_t)b[p.lo_byte];
    int q = (b[p.lo_byte] >> p.lo_shift) & ((1 << p.lo_bits) - 1);
    if (p.hi_bits) q |= ((b[p.hi_byte] >> p.hi_shift) & ((1 << p.hi_bits) - 1)) << p.lo_bits;
    return q;
}

void dsq_block_code_set(dsq_type t, void *blk, int e, int q)
{
    code_pos p;
    if (!code_pos_of(t, e, &p)) return;
    uint8_t *b = blk;
    if (t == DSQ_TYPE_Q8_0) {
        b[p.lo_byte] = (uint8_t)(int8_t)q;
        return;
    }
    const int lm = (1 << p.lo_bits) - 1;
    b[p.lo_byte] = (uint8_t)((b[p.lo_byte] & ~(lm << p.lo_shift)) | ((q & lm) << p.lo_shift));
    if (p.hi_bits) {
        const int hm = (1 << p.hi_bits) - 1;
        b[p.hi_byte] = (uint8_t)((b[p.hi_byte] & ~(hm << p.hi_shift)) | (((q >> p.lo_bits) & hm) << p.hi_shift));
    }
}

static void fill(dsq_block_grid *g, int from, int n, float a, float b)
{
    for (int e = from; e < from + n; e++) {
        g->a[e] = a;
        g->b[e] = b;
    }
}

static void grid_legacy(dsq_type t, const void *blk, dsq_block_grid *g)
{
    switch (t) {
    case DSQ_TYPE_Q4_0:
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = 0, .hi = 15, .c0 = -8};
        fill(g, 0, 32, dsq_f16_to_f32(((const dsq_block_q4_0 *)blk)->d), 0.0f);
        break;
    case DSQ_TYPE_Q4_1: {
        const dsq_block_q4_1 *x = blk;
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = 0, .hi = 15};
        fill(g, 0, 32, dsq_f16_to_f32(x->d), dsq_f16_to_f32(x->m));
        break;
    }
    case DSQ_TYPE_Q5_0:
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = 0, .hi = 31, .c0 = -16};
        fill(g, 0, 32, dsq_f16_to_f32(((const dsq_block_q5_0 *)blk)->d), 0.0f);
        break;
    case DSQ_TYPE_Q5_1: {
        const dsq_block_q5_1 *x = blk;
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = 0, .hi = 31};
        fill(g, 0, 32, dsq_f16_to_f32(x->d), dsq_f16_to_f32(x->m));
        break;
    }
    case DSQ_TYPE_Q8_0:
        /* -127..127: ggml's quantizer never writes -128, and the AVX2 dots' sign trick cannot take it */
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = -127, .hi = 127};
        fill(g, 0, 32, dsq_f16_to_f32(((const dsq_block_q8_0 *)blk)->d), 0.0f);
        break;
    case DSQ_TYPE_IQ4_NL:
        *g = (dsq_block_grid){.type = t, .n = 32, .lo = 0, .hi = 15, .table = dsq_kvalues_iq4nl};
        fill(g, 0, 32, dsq_f16_to_f32(((const dsq_block_iq4_nl *)blk)->d), 0.0f);
        break;
    default: break;
    }
}

static void grid_kquant(dsq_type t, const void *blk, dsq_block_grid *g)
{
    *g = (dsq_block_grid){.type = t, .n = DSQ_QK_K};
    switch (t) {
    case DSQ_TYPE_Q2_K: {
        const dsq_block_q2_K *x = blk;
        float d = dsq_f16_to_f32(x->d), min = dsq_f16_to_f32(x->dmin);
        g->hi = 3;
        for (int s = 0; s < 16; s++)
            fill(g, 16 * s, 16, d * (float)(x->scales[s] & 0xF), -(min * (float)(x->scales[s] >> 4)));
        break;
    }
    case DSQ_TYPE_Q3_K: {
        const dsq_block_q3_K *x = blk;
        float d = dsq_f16_to_f32(x->d);
        g->hi = 7;
        g->c0 = -4;
        for (int s = 0; s < 16; s++) fill(g, 16 * s, 16, d * (float)(dsq_kq_q3_scale(x->scales, s) - 32), 0.0f);
        break;
    }
    case DSQ_TYPE_Q4_K:
    case DSQ_TYPE_Q5_K: {
        const bool q4 = t == DSQ_TYPE_Q4_K;
        const uint8_t *sc = q4 ? ((const dsq_block_q4_K *)blk)->scales : ((const dsq_block_q5_K *)blk)->scales;
        uint16_t hd = q4 ? ((const dsq_block_q4_K *)blk)->d : ((const dsq_block_q5_K *)blk)->d;
        uint16_t hm = q4 ? ((const dsq_block_q4_K *)blk)->dmin : ((const dsq_block_q5_K *)blk)->dmin;
        float d = dsq_f16_to_f32(hd), min = dsq_f16_to_f32(hm);
        g->hi = q4 ? 15 : 31;
        for (int s = 0; s < 8; s++) {
            uint8_t scl, m;
            dsq_kq_scale_min(s, sc, &scl, &m);
            fill(g, 32 * s, 32, d * (float)scl, -(min * (float)m));
        }
        break;
    }
    case DSQ_TYPE_Q6_K: {
        const dsq_block_q6_K *x = blk;
        float d = dsq_f16_to_f32(x->d);
        g->hi = 63;
        g->c0 = -32;
        for (int s = 0; s < 16; s++) fill(g, 16 * s, 16, d * (float)x->scales[s], 0.0f);
        break;
    }
    case DSQ_TYPE_IQ4_XS: {
        const dsq_block_iq4_xs *x = blk;
        float d = dsq_f16_to_f32(x->d);
        g->hi = 15;
        g->table = dsq_kvalues_iq4nl;
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x->scales_h >> 2 * ib) & 3) << 4);
            fill(g, 32 * ib, 32, d * (float)(ls - 32), 0.0f);
        }
        break;
    }
    default: break;
    }
}

void dsq_block_grid_get(dsq_type t, const void *blk, dsq_block_grid *g)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (ti && ti->block_elems == DSQ_QK_K)
        grid_kquant(t, blk, g);
    else
        grid_legacy(t, blk, g);
}

int dsq_block_nearest(const dsq_block_grid *g, int e, float x)
{
    int best = g->lo;
    float best_err = INFINITY;
    if (!g->table && g->a[e] != 0.0f) {
        /* affine: round, then look at the neighbours (float rounding of the division) */
        float r = (x - g->b[e]) / g->a[e] - (float)g->c0;
        if (isnan(r)) return g->lo; /* feedback blew up; the caller's loss check reports it */
        int q = r < (float)g->lo ? g->lo : r > (float)g->hi ? g->hi : (int)lrintf(r);
        for (int c = q - 1; c <= q + 1; c++) {
            if (c < g->lo || c > g->hi) continue;
            float err = fabsf(dsq_block_value(g, e, c) - x);
            if (err < best_err) best_err = err, best = c;
        }
        return best;
    }
    for (int c = g->lo; c <= g->hi; c++) {
        float err = fabsf(dsq_block_value(g, e, c) - x);
        if (err < best_err) best_err = err, best = c;
    }
    return best;
}
