/* INTn weight packers: AutoAWQ GEMM, GPTQ v1/v2, compressed-tensors
 * pack-quantized (formats/pack_*.h).
 *
 * - byte layouts against small hand-worked words from the format sources:
 *   AWQ's [0,2,4,6,1,3,5,7] nibble order, GPTQ's sequential nibbles along the
 *   input dim and its 3-bit 32-in-3 words (reference written here from
 *   AutoGPTQ's pack loop), the v1 "zero - 1" qzeros (0x77777777 for symmetric
 *   4-bit), compressed-tensors rows, padding and zero points along dim 0.
 * - round trips pack -> unpack for every bits x group x sym (x act-order g_idx)
 *   the format allows: codes, zeros and g_idx exact, scales equal to their
 *   F16/BF16 rounding.
 * - refusals: AWQ other than 4-bit or with act-order, widths that do not fill
 *   words, and hostile tensors (wrong type, shape, byte count, g_idx range).
 * - quantization_config JSON as the loaders read it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/pack_awq.h"
#include "formats/pack_common.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "quantizers/intq.h"
#include "tests/helpers/testutil.h"

/* An intq [rows x cols] whose codes come from f(n, k) and zeros from z(n, g). */
static void make_intq(dsq_intq *q, int bits, int gs, bool sym, int64_t rows, int64_t cols)
{
    dsq_intq_params p = {bits, gs, sym, DSQ_INTQ_RULE_GPTQ, 1.0f, DSQ_INTQ_GRID_MINMAX};
    assert_int_equal(dsq_intq_alloc(&p, rows, cols, q), DSQ_OK);
    for (int64_t i = 0; i < rows * q->n_groups; i++) {
        q->scales[i] = 0.5f;
        q->zeros[i] = (uint8_t)(1 << (bits - 1));
    }
}

static uint32_t word_of(const dsq_packed *p, const char *suffix, int64_t i)
{
    const dsq_pack_tensor *t = dsq_packed_find(p, suffix);
    assert_non_null(t);
    return dsq_pack_rd32(t->data, i);
}

static void test_bits_lines(void **state)
{
    (void)state;
    uint8_t v[40], back[40];
    uint32_t w[4];
    for (int k = 0; k < 40; k++) v[k] = (uint8_t)(k % 8);
    dsq_bits_pack_line(v, 32, 1, 3, w, 1);
    /* AutoGPTQ's 3-bit loop on values k % 8, worked out word by word. */
    assert_int_equal(w[0], 0x88fac688u);
    assert_int_equal(w[1], 0xc688fac6u);
    assert_int_equal(w[2], 0xfac688fau);
    dsq_bits_pack_line(v, 40, 1, 3, w, 1); /* 120 bits: 4 words, the last one padded */
    assert_int_equal(w[3], 0x00fac688u);
    dsq_bits_unpack_line(w, 1, 3, 40, back, 1);
    assert_memory_equal(v, back, 40);
    for (int k = 0; k < 16; k++) v[k] = (uint8_t)(k % 4);
    dsq_bits_pack_line(v, 16, 1, 2, w, 1);
    assert_int_equal(w[0], 0xe4e4e4e4u);
    const uint8_t b8[4] = {1, 2, 3, 0xfe};
    dsq_bits_pack_line(b8, 4, 1, 8, w, 1);
    assert_int_equal(w[0], 0xfe030201u);
}

static void test_awq_layout(void **state)
{
    (void)state;
    dsq_intq q;
    make_intq(&q, 4, 32, false, 16, 64); /* N = 16 outputs, K = 64 inputs, 2 groups */
    for (int n = 0; n < 8; n++) {
        q.codes[n * 64 + 0] = (uint8_t)(n + 1); /* input 0: outputs 0..7 = 1..8 */
        q.zeros[n * 2 + 1] = (uint8_t)n;        /* group 1: zeros 0..7 */
    }
    q.scales[3 * 2 + 1] = 0.25f;
    dsq_packed p;
    assert_int_equal(dsq_awq_pack(&q, &p), DSQ_OK);
    const dsq_pack_tensor *qw = dsq_packed_find(&p, "qweight"), *qz = dsq_packed_find(&p, "qzeros"),
                          *sc = dsq_packed_find(&p, "scales");
    assert_int_equal(qw->type, DSQ_TYPE_I32);
    assert_true(qw->shape[0] == 64 && qw->shape[1] == 2);
    assert_true(qz->shape[0] == 2 && qz->shape[1] == 2);
    assert_true(sc->type == DSQ_TYPE_F16 && sc->shape[0] == 2 && sc->shape[1] == 16);
    /* nibbles hold columns 0,2,4,6,1,3,5,7: values 1,3,5,7,2,4,6,8 */
    assert_int_equal(word_of(&p, "qweight", 0), 0x86427531u);
    assert_int_equal(word_of(&p, "qweight", 1), 0x00000000u); /* outputs 8..15 of input 0 */
    assert_int_equal(word_of(&p, "qzeros", 0), 0x88888888u);  /* group 0: zeros stored as is */
    assert_int_equal(word_of(&p, "qzeros", 2), 0x75316420u);  /* group 1, columns 0..7 */
    const uint8_t *s = sc->data;
    assert_int_equal(s[2 * (1 * 16 + 3)] | s[2 * (1 * 16 + 3) + 1] << 8, 0x3400); /* f16(0.25) at [g=1, n=3] */
    assert_int_equal(s[0] | s[1] << 8, 0x3800);                                   /* f16(0.5) */
    dsq_packed_free(&p);
    dsq_intq_free(&q);
}

static void test_gptq_layout(void **state)
{
    (void)state;
    dsq_intq q;
    make_intq(&q, 4, 32, true, 8, 32);
    for (int k = 0; k < 32; k++) q.codes[0 * 32 + k] = (uint8_t)(k & 15);
    dsq_packed p;
    int64_t wrapped = -1;
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, &wrapped), DSQ_OK);
    assert_int_equal(wrapped, 0);
    const dsq_pack_tensor *qw = dsq_packed_find(&p, "qweight");
    assert_true(qw->shape[0] == 4 && qw->shape[1] == 8);
    /* column 0 down the input dim: inputs 0..7 in word (0, 0), 8..15 in (1, 0) */
    assert_int_equal(word_of(&p, "qweight", 0 * 8 + 0), 0x76543210u);
    assert_int_equal(word_of(&p, "qweight", 1 * 8 + 0), 0xfedcba98u);
    assert_int_equal(word_of(&p, "qweight", 0 * 8 + 1), 0u);
    /* symmetric 4-bit: z = 8 stored as 7 in every field */
    assert_int_equal(word_of(&p, "qzeros", 0), 0x77777777u);
    const dsq_pack_tensor *gi = dsq_packed_find(&p, "g_idx");
    assert_true(gi->type == DSQ_TYPE_I32 && gi->shape[0] == 32);
    for (int k = 0; k < 32; k++) assert_int_equal((int32_t)dsq_pack_rd32(gi->data, k), 0);
    dsq_packed_free(&p);
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V2, DSQ_TYPE_F16, &p, NULL), DSQ_OK);
    assert_int_equal(word_of(&p, "qzeros", 0), 0x88888888u);
    dsq_packed_free(&p);
    dsq_intq_free(&q);

    /* 3-bit: 32 inputs in 3 words per column; zeros along 32 outputs in 3 words. */
    make_intq(&q, 3, 32, false, 32, 32);
    for (int k = 0; k < 32; k++) q.codes[5 * 32 + k] = (uint8_t)(k % 8);
    for (int n = 0; n < 32; n++) q.zeros[n] = (uint8_t)((n + 1) % 8); /* v1 stores n % 8 */
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, &wrapped), DSQ_OK);
    assert_int_equal(wrapped, 4); /* zeros 0 at n = 7, 15, 23, 31 */
    assert_int_equal(word_of(&p, "qweight", 0 * 32 + 5), 0x88fac688u);
    assert_int_equal(word_of(&p, "qweight", 1 * 32 + 5), 0xc688fac6u);
    assert_int_equal(word_of(&p, "qweight", 2 * 32 + 5), 0xfac688fau);
    assert_int_equal(word_of(&p, "qzeros", 0), 0x88fac688u);
    assert_int_equal(word_of(&p, "qzeros", 2), 0xfac688fau);
    dsq_packed_free(&p);
    dsq_intq_free(&q);
}

static void test_ct_layout(void **state)
{
    (void)state;
    dsq_intq q;
    make_intq(&q, 4, -1, false, 9, 20); /* channel strategy; K = 20 pads to 3 words, N = 9 to 2 */
    for (int k = 0; k < 20; k++) q.codes[1 * 20 + k] = (uint8_t)(k & 15);
    for (int n = 0; n < 9; n++) q.zeros[n] = (uint8_t)(n + 1);
    dsq_packed p;
    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_BF16, &p), DSQ_OK);
    const dsq_pack_tensor *wp = dsq_packed_find(&p, "weight_packed"), *ws = dsq_packed_find(&p, "weight_scale"),
                          *zp = dsq_packed_find(&p, "weight_zero_point"), *sh = dsq_packed_find(&p, "weight_shape");
    assert_true(wp->shape[0] == 9 && wp->shape[1] == 3);
    assert_true(ws->type == DSQ_TYPE_BF16 && ws->shape[0] == 9 && ws->shape[1] == 1);
    assert_true(zp->shape[0] == 2 && zp->shape[1] == 1);
    assert_true(sh->type == DSQ_TYPE_I64 && sh->shape[0] == 2);
    assert_null(dsq_packed_find(&p, "weight_g_idx"));
    assert_int_equal(word_of(&p, "weight_packed", 3 + 0), 0x76543210u);
    assert_int_equal(word_of(&p, "weight_packed", 3 + 1), 0xfedcba98u);
    assert_int_equal(word_of(&p, "weight_packed", 3 + 2), 0x00003210u);
    assert_int_equal(word_of(&p, "weight_zero_point", 0), 0x87654321u);
    assert_int_equal(word_of(&p, "weight_zero_point", 1), 0x00000009u);
    assert_int_equal(word_of(&p, "weight_shape", 0), 9u);
    assert_int_equal(word_of(&p, "weight_shape", 2), 20u);
    const uint8_t *s = ws->data;
    assert_int_equal(s[0] | s[1] << 8, 0x3f00); /* bf16(0.5) */
    dsq_packed_free(&p);
    q.sym = true;
    for (int n = 0; n < 9; n++) q.zeros[n] = 8;
    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_F16, &p), DSQ_OK);
    assert_null(dsq_packed_find(&p, "weight_zero_point"));
    assert_int_equal(p.n, 3);
    dsq_packed_free(&p);
    dsq_intq_free(&q);
}

/* ---- round trips ---- */

static void random_intq(dsq_intq *q, int bits, int gs, bool sym, int64_t rows, int64_t cols, bool act, uint64_t seed)
{
    make_intq(q, bits, gs, sym, rows, cols);
    const int maxq = (1 << bits) - 1;
    for (int64_t i = 0; i < rows * cols; i++) q->codes[i] = (uint8_t)(dsq_test_rand(&seed) % (uint64_t)(maxq + 1));
    for (int64_t i = 0; i < rows * q->n_groups; i++) {
        q->scales[i] = 0.01f + (float)(dsq_test_rand(&seed) % 1000) * 1e-4f;
        if (!sym) q->zeros[i] = (uint8_t)(dsq_test_rand(&seed) % (uint64_t)(maxq + 1));
    }
    if (act && q->n_groups > 1) { /* a shuffled grouping, as act-order makes */
        q->g_idx = malloc(sizeof(int32_t) * cols);
        for (int64_t c = 0; c < cols; c++) q->g_idx[c] = (int32_t)(c / q->group_size);
        for (int64_t c = cols - 1; c > 0; c--) {
            int64_t j = (int64_t)(dsq_test_rand(&seed) % (uint64_t)(c + 1));
            int32_t t = q->g_idx[c];
            q->g_idx[c] = q->g_idx[j];
            q->g_idx[j] = t;
        }
    }
}

static float round_scale(float v, dsq_type t)
{
    if (t == DSQ_TYPE_F16) return dsq_f16_to_f32(dsq_f32_to_f16(v));
    if (t == DSQ_TYPE_BF16) return dsq_bf16_to_f32(dsq_f32_to_bf16(v));
    return v;
}

static void assert_same(const dsq_intq *a, const dsq_intq *b, dsq_type scale_type)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->cols, b->cols);
    assert_int_equal(a->bits, b->bits);
    assert_int_equal(a->n_groups, b->n_groups);
    assert_int_equal(a->group_size, b->group_size);
    assert_memory_equal(a->codes, b->codes, (size_t)(a->rows * a->cols));
    assert_memory_equal(a->zeros, b->zeros, (size_t)(a->rows * a->n_groups));
    for (int64_t i = 0; i < a->rows * a->n_groups; i++)
        assert_true(b->scales[i] == round_scale(a->scales[i], scale_type));
    assert_int_equal(a->g_idx != NULL, b->g_idx != NULL);
    if (a->g_idx) assert_memory_equal(a->g_idx, b->g_idx, sizeof(int32_t) * (size_t)a->cols);
}

static const dsq_tensor *view_or_null(const dsq_packed *p, const char *suffix, dsq_tensor *v)
{
    const dsq_pack_tensor *t = dsq_packed_find(p, suffix);
    if (!t) return NULL;
    *v = dsq_packed_view(t);
    return v;
}

static void test_round_trips(void **state)
{
    (void)state;
    const int bits[] = {2, 3, 4, 8}, gss[] = {32, 128, -1};
    uint64_t seed = 11;
    for (int b = 0; b < 4; b++)
        for (int g = 0; g < 3; g++)
            for (int sym = 0; sym < 2; sym++)
                for (int act = 0; act < 2; act++) {
                    dsq_intq q, back;
                    dsq_packed p;
                    dsq_tensor v[5];
                    random_intq(&q, bits[b], gss[g], sym, 64, 256, act, seed++);
                    /* AWQ: 4-bit, no act-order */
                    if (bits[b] == 4 && !q.g_idx) {
                        assert_int_equal(dsq_awq_pack(&q, &p), DSQ_OK);
                        assert_int_equal(dsq_awq_unpack(view_or_null(&p, "qweight", &v[0]),
                                                        view_or_null(&p, "qzeros", &v[1]),
                                                        view_or_null(&p, "scales", &v[2]), gss[g], &back),
                                         DSQ_OK);
                        back.sym = q.sym; /* AWQ does not record symmetry */
                        assert_same(&q, &back, DSQ_TYPE_F16);
                        dsq_intq_free(&back);
                        dsq_packed_free(&p);
                    }
                    for (int fmt = 0; fmt < 2; fmt++) {
                        assert_int_equal(dsq_gptq_pack(&q, (dsq_gptq_format)fmt, DSQ_TYPE_F16, &p, NULL), DSQ_OK);
                        assert_int_equal(
                            dsq_gptq_unpack(view_or_null(&p, "qweight", &v[0]), view_or_null(&p, "qzeros", &v[1]),
                                            view_or_null(&p, "scales", &v[2]), view_or_null(&p, "g_idx", &v[3]),
                                            bits[b], gss[g], sym, (dsq_gptq_format)fmt, &back),
                            DSQ_OK);
                        assert_same(&q, &back, DSQ_TYPE_F16);
                        dsq_intq_free(&back);
                        dsq_packed_free(&p);
                    }
                    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_BF16, &p), DSQ_OK);
                    assert_int_equal(
                        dsq_ct_unpack(view_or_null(&p, "weight_packed", &v[0]), view_or_null(&p, "weight_scale", &v[1]),
                                      view_or_null(&p, "weight_zero_point", &v[2]),
                                      view_or_null(&p, "weight_shape", &v[3]), view_or_null(&p, "weight_g_idx", &v[4]),
                                      bits[b], gss[g], sym, &back),
                        DSQ_OK);
                    assert_same(&q, &back, DSQ_TYPE_BF16);
                    dsq_intq_free(&back);
                    dsq_packed_free(&p);
                    dsq_intq_free(&q);
                }
}

static void test_v1_zero_wrap(void **state)
{
    (void)state;
    dsq_intq q, back;
    make_intq(&q, 4, 32, false, 8, 32);
    q.zeros[3] = 0; /* output 3 */
    dsq_packed p;
    int64_t wrapped;
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, &wrapped), DSQ_OK);
    assert_int_equal(wrapped, 1);
    /* per-field -1: the other fields keep 7, field 3 holds 0xF (no borrow into field 4) */
    assert_int_equal(word_of(&p, "qzeros", 0), 0x7777f777u);
    dsq_tensor v[4];
    assert_int_equal(dsq_gptq_unpack(view_or_null(&p, "qweight", &v[0]), view_or_null(&p, "qzeros", &v[1]),
                                     view_or_null(&p, "scales", &v[2]), NULL, 4, 32, false, DSQ_GPTQ_FORMAT_V1, &back),
                     DSQ_OK);
    assert_int_equal(back.zeros[3], 0);
    assert_int_equal(back.zeros[4], 8);
    dsq_intq_free(&back);
    dsq_packed_free(&p);
    dsq_intq_free(&q);
}

static void test_refusals(void **state)
{
    (void)state;
    dsq_intq q;
    dsq_packed p;
    make_intq(&q, 3, 32, true, 32, 64);
    assert_int_equal(dsq_awq_pack(&q, &p), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "4-bit"));
    dsq_intq_free(&q);
    random_intq(&q, 4, 32, false, 16, 64, true, 5);
    assert_int_equal(dsq_awq_pack(&q, &p), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "g_idx"));
    dsq_intq_free(&q);
    make_intq(&q, 4, 32, true, 12, 64);
    assert_int_equal(dsq_awq_pack(&q, &p), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "12"));
    dsq_intq_free(&q);
    make_intq(&q, 3, -1, true, 32, 48); /* 48 inputs do not fill 3-bit words */
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, NULL), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "48"));
    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_F16, &p), DSQ_OK); /* compressed-tensors pads */
    dsq_packed_free(&p);
    dsq_intq_free(&q);
    make_intq(&q, 4, 32, true, 8, 64);
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_I32, &p, NULL), DSQ_ERR_ARG);
    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_I8, &p), DSQ_ERR_ARG);
    q.codes[5] = 16; /* not a 4-bit code */
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, NULL), DSQ_ERR_FORMAT);
    dsq_intq_free(&q);
}

static void test_hostile_unpack(void **state)
{
    (void)state;
    dsq_intq q, back;
    dsq_packed p;
    dsq_tensor v[4];
    make_intq(&q, 4, 32, true, 8, 64);
    assert_int_equal(dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &p, NULL), DSQ_OK);
    const dsq_tensor *qw = view_or_null(&p, "qweight", &v[0]), *qz = view_or_null(&p, "qzeros", &v[1]),
                     *sc = view_or_null(&p, "scales", &v[2]), *gi = view_or_null(&p, "g_idx", &v[3]);
    /* scales claim 2 groups but the config says per channel */
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, -1, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "qzeros"));
    /* short byte count */
    v[2].nbytes -= 2;
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, 32, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "scales"));
    v[2].nbytes += 2;
    /* wrong type */
    v[1].type = DSQ_TYPE_F32;
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, 32, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "gptq qzeros"));
    v[1].type = DSQ_TYPE_I32;
    /* g_idx out of range */
    dsq_pack_wr32((void *)v[3].data, 10, 2);
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, 32, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "entry 10"));
    dsq_pack_wr32((void *)v[3].data, 10, 0);
    /* symmetric config but zeros that are not the midpoint (asym file) */
    dsq_pack_wr32((void *)v[1].data, 0, 0x77777770u);
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, 32, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "zero point"));
    assert_int_equal(dsq_gptq_unpack(qw, qz, sc, gi, 4, 32, false, DSQ_GPTQ_FORMAT_V1, &back), DSQ_OK);
    assert_int_equal(back.zeros[0], 1);
    dsq_intq_free(&back);
    assert_int_equal(dsq_gptq_unpack(NULL, qz, sc, gi, 4, 32, true, DSQ_GPTQ_FORMAT_V1, &back), DSQ_ERR_NOT_FOUND);
    assert_int_equal(dsq_awq_unpack(qw, qz, sc, 48, &back), DSQ_ERR_FORMAT);
    dsq_packed_free(&p);

    assert_int_equal(dsq_ct_pack(&q, DSQ_TYPE_F16, &p), DSQ_OK);
    const dsq_tensor *wp = view_or_null(&p, "weight_packed", &v[0]), *ws = view_or_null(&p, "weight_scale", &v[1]),
                     *sh = view_or_null(&p, "weight_shape", &v[2]);
    assert_int_equal(dsq_ct_unpack(wp, ws, NULL, sh, NULL, 4, 32, true, &back), DSQ_OK);
    dsq_intq_free(&back);
    assert_int_equal(dsq_ct_unpack(wp, ws, NULL, sh, NULL, 4, 32, false, &back), DSQ_ERR_NOT_FOUND); /* asym needs zp */
    assert_int_equal(dsq_ct_unpack(wp, ws, wp, sh, NULL, 4, 32, true, &back), DSQ_ERR_FORMAT);
    int64_t *shape = (int64_t *)v[2].data;
    shape[1] = 1LL << 40; /* hostile in_features */
    assert_int_equal(dsq_ct_unpack(wp, ws, NULL, sh, NULL, 4, 32, true, &back), DSQ_ERR_FORMAT);
    shape[1] = 96; /* disagrees with weight_packed */
    assert_int_equal(dsq_ct_unpack(wp, ws, NULL, sh, NULL, 4, 32, true, &back), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "weight_packed"));
    dsq_packed_free(&p);
    dsq_intq_free(&q);
}

static cJSON *item(cJSON *o, const char *path)
{
    char buf[128];
    strcpy(buf, path);
    for (char *tok = strtok(buf, "."); tok && o; tok = strtok(NULL, ".")) o = cJSON_GetObjectItemCaseSensitive(o, tok);
    assert_non_null(o);
    return o;
}

static void test_configs(void **state)
{
    (void)state;
    cJSON *o;
    const char *skip[] = {"lm_head"};
    assert_int_equal(dsq_awq_config_json(128, skip, 1, &o), DSQ_OK);
    assert_string_equal(item(o, "quant_method")->valuestring, "awq");
    assert_string_equal(item(o, "version")->valuestring, "gemm");
    assert_true(cJSON_IsTrue(item(o, "zero_point")));
    assert_int_equal(item(o, "bits")->valueint, 4);
    assert_int_equal(item(o, "group_size")->valueint, 128);
    assert_string_equal(cJSON_GetArrayItem(item(o, "modules_to_not_convert"), 0)->valuestring, "lm_head");
    cJSON_Delete(o);
    assert_int_equal(dsq_awq_config_json(64, NULL, 0, &o), DSQ_OK);
    assert_true(cJSON_IsNull(item(o, "modules_to_not_convert")));
    cJSON_Delete(o);

    dsq_gptq_config gc = {3, -1, 0.01, true, false, true, true, DSQ_GPTQ_FORMAT_V1, NULL};
    assert_int_equal(dsq_gptq_config_json(&gc, &o), DSQ_OK);
    assert_string_equal(item(o, "quant_method")->valuestring, "gptq");
    assert_string_equal(item(o, "checkpoint_format")->valuestring, "gptq");
    assert_int_equal(item(o, "bits")->valueint, 3);
    assert_int_equal(item(o, "group_size")->valueint, -1);
    assert_true(cJSON_IsTrue(item(o, "desc_act")) && cJSON_IsTrue(item(o, "sym")));
    assert_true(cJSON_IsFalse(item(o, "static_groups")));
    assert_true(item(o, "damp_percent")->valuedouble == 0.01);
    assert_true(cJSON_IsNull(item(o, "model_name_or_path")));
    cJSON_Delete(o);
    gc.format = DSQ_GPTQ_FORMAT_V2;
    assert_int_equal(dsq_gptq_config_json(&gc, &o), DSQ_OK);
    assert_string_equal(item(o, "checkpoint_format")->valuestring, "gptq_v2");
    cJSON_Delete(o);
    gc.damp_percent = 0.0; /* transformers refuses it */
    assert_int_equal(dsq_gptq_config_json(&gc, &o), DSQ_ERR_ARG);

    dsq_ct_config cc = {4, 128, false, NULL, skip, 1, NULL};
    assert_int_equal(dsq_ct_config_json(&cc, &o), DSQ_OK);
    assert_string_equal(item(o, "quant_method")->valuestring, "compressed-tensors");
    assert_string_equal(item(o, "format")->valuestring, "pack-quantized");
    assert_string_equal(item(o, "quantization_status")->valuestring, "compressed");
    assert_string_equal(cJSON_GetArrayItem(item(o, "config_groups.group_0.targets"), 0)->valuestring, "Linear");
    assert_string_equal(item(o, "config_groups.group_0.weights.strategy")->valuestring, "group");
    assert_int_equal(item(o, "config_groups.group_0.weights.group_size")->valueint, 128);
    assert_int_equal(item(o, "config_groups.group_0.weights.num_bits")->valueint, 4);
    assert_true(cJSON_IsFalse(item(o, "config_groups.group_0.weights.symmetric")));
    assert_true(cJSON_IsNull(item(o, "config_groups.group_0.weights.actorder")));
    assert_true(cJSON_IsNull(item(o, "config_groups.group_0.input_activations")));
    assert_string_equal(cJSON_GetArrayItem(item(o, "ignore"), 0)->valuestring, "lm_head");
    cJSON_Delete(o);
    cc.group_size = -1;
    cc.sym = true;
    assert_int_equal(dsq_ct_config_json(&cc, &o), DSQ_OK);
    assert_string_equal(item(o, "config_groups.group_0.weights.strategy")->valuestring, "channel");
    assert_true(cJSON_IsNull(item(o, "config_groups.group_0.weights.group_size")));
    cJSON_Delete(o);
    cc.actorder = "weight"; /* needs the group strategy */
    assert_int_equal(dsq_ct_config_json(&cc, &o), DSQ_ERR_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bits_lines), cmocka_unit_test(test_awq_layout),     cmocka_unit_test(test_gptq_layout),
        cmocka_unit_test(test_ct_layout),  cmocka_unit_test(test_round_trips),    cmocka_unit_test(test_v1_zero_wrap),
        cmocka_unit_test(test_refusals),   cmocka_unit_test(test_hostile_unpack), cmocka_unit_test(test_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
