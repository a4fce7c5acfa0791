/* Shared pieces of the INTn weight packers; see pack_common.h. */
#include "formats/pack_common.h"

#include <stdlib.h>
#include <string.h>

/* The packers fill their int32 tensors as native words. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "formats/pack_*.c write little-endian words natively; add byte swapping for this host"
#endif

void dsq_bits_pack_line(const uint8_t *v, int64_t n, int64_t vstride, int bits, uint32_t *w, int64_t wstride)
{
    const int64_t nw = dsq_bits_words(n, bits);
    for (int64_t k = 0; k < nw; k++) w[k * wstride] = 0;
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t x = (uint32_t)v[i * vstride] & mask;
        const int64_t bit = i * bits, k = bit / 32;
        const int sh = (int)(bit % 32);
        w[k * wstride] |= x << sh;
        if (sh + bits > 32) w[(k + 1) * wstride] |= x >> (32 - sh); /* straddles two words (3 bits) */
    }
}

void dsq_bits_unpack_line(const uint32_t *w, int64_t wstride, int bits, int64_t n, uint8_t *v, int64_t vstride)
{
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t i = 0; i < n; i++) {
        const int64_t bit = i * bits, k = bit / 32;
        const int sh = (int)(bit % 32);
        uint32_t x = w[k * wstride] >> sh;
        if (sh + bits > 32) x |= w[(k + 1) * wstride] << (32 - sh);
        v[i * vstride] = (uint8_t)(x & mask);
    }
}

dsq_status dsq_packed_add(dsq_packed *p, const char *suffix, dsq_type type, int n_dims, const int64_t *shape,
                          void **data)
{
    if (p->n >= DSQ_PACK_MAX_TENSORS) return dsq_fail(DSQ_ERR_INTERNAL, "pack: too many tensors");
    if (strlen(suffix) >= sizeof p->t[0].suffix) return dsq_fail(DSQ_ERR_INTERNAL, "pack: name %s too long", suffix);
    uint64_t n, bytes;
    if (n_dims < 0 || n_dims > 2 || !dsq_mul_dims(shape, n_dims, &n) || dsq_type_nbytes(type, n, &bytes) != DSQ_OK)
        return dsq_fail(DSQ_ERR_ARG, "pack: %s has a bad shape", suffix);
    void *d = NULL;
    if (data && !(d = calloc(bytes ? (size_t)bytes : 1, 1)))
        return dsq_fail(DSQ_ERR_NOMEM, "pack: out of memory for %s (%llu bytes)", suffix, (unsigned long long)bytes);
    dsq_pack_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    strcpy(t->suffix, suffix);
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->shape[i] = shape[i];
    t->data = d;
    t->nbytes = bytes;
    if (data) *data = d;
    return DSQ_OK;
}

dsq_intq_shape dsq_intq_shape_of(const dsq_intq *q)
{
    return (dsq_intq_shape){q->rows, q->cols, q->bits, q->group_size, q->sym, q->g_idx != NULL};
}

const dsq_pack_tensor *dsq_packed_find(const dsq_packed *p, const char *suffix)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->t[i].suffix, suffix) == 0) return &p->t[i];
    return NULL;
}

dsq_tensor dsq_packed_view(const dsq_pack_tensor *t)
{
    dsq_tensor v;
    memset(&v, 0, sizeof v);
    v.name = t->suffix;
    v.type = t->type;
    v.n_dims = t->n_dims;
    for (int i = 0; i < t->n_dims; i++) v.shape[i] = t->shape[i];
    v.data = t->data;
    v.nbytes = t->nbytes;
    return v;
}

void dsq_packed_free(dsq_packed *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) free(p->t[i].data);
    memset(p, 0, sizeof *p);
}

bool dsq_pack_scale_type_ok(dsq_type t) { return t == DSQ_TYPE_F16 || t == DSQ_TYPE_BF16 || t == DSQ_TYPE_F32; }

void dsq_pack_put_scale(void *base, int64_t i, dsq_type t, float v)
{
    uint8_t *p = base;
    if (t == DSQ_TYPE_F32) {
        uint32_t u;
        memcpy(&u, &v, 4);
        dsq_pack_wr32(p, i, u);
        return;
    }
    uint16_t h = t == DSQ_TYPE_F16 ? dsq_f32_to_f16(v) : dsq_f32_to_bf16(v);
    p[2 * i] = (uint8_t)h;
    p[2 * i + 1] = (uint8_t)(h >> 8);
}

float dsq_pack_get_scale(const void *base, int64_t i, dsq_type t)
{
    const uint8_t *p = base;
    if (t == DSQ_TYPE_F32) {
        uint32_t u = dsq_pack_rd32(p, i);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return t == DSQ_TYPE_F16 ? dsq_f16_to_f32(h) : dsq_bf16_to_f32(h);
}

static dsq_status expect_shape(const dsq_tensor *t, const char *what, int n_dims, int64_t d0, int64_t d1)
{
    const int64_t want[2] = {d0, d1};
    bool ok = t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == want[i];
    if (ok) {
        uint64_t n, bytes;
        ok = dsq_mul_dims(t->shape, t->n_dims, &n) && dsq_type_nbytes(t->type, n, &bytes) == DSQ_OK &&
             bytes == t->nbytes && (bytes == 0 || t->data);
    }
    if (ok) return DSQ_OK;
    if (n_dims == 1)
        return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected shape [%lld], found %d dims [%lld, ...]", what,
                        t->name ? t->name : "?", (long long)d0, t->n_dims,
                        (long long)(t->n_dims > 0 ? t->shape[0] : 0));
    return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected shape [%lld, %lld], found %d dims [%lld, %lld]", what,
                    t->name ? t->name : "?", (long long)d0, (long long)d1, t->n_dims,
                    (long long)(t->n_dims > 0 ? t->shape[0] : 0), (long long)(t->n_dims > 1 ? t->shape[1] : 0));
}

dsq_status dsq_pack_expect(const dsq_tensor *t, const char *what, dsq_type type, int n_dims, int64_t d0, int64_t d1)
{
    if (!t) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s is missing", what);
    if (t->type != type)
        return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected %s, found %s", what, t->name ? t->name : "?",
                        dsq_type_name(type), dsq_type_name(t->type));
    return expect_shape(t, what, n_dims, d0, d1);
}

dsq_status dsq_pack_expect_scale(const dsq_tensor *t, const char *what, int64_t d0, int64_t d1, dsq_type *type_out)
{
    if (!t) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s is missing", what);
    if (!dsq_pack_scale_type_ok(t->type))
        return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected F16, BF16 or F32, found %s", what, t->name ? t->name : "?",
                        dsq_type_name(t->type));
    *type_out = t->type;
    return expect_shape(t, what, 2, d0, d1);
}

dsq_status dsq_pack_load_words(const dsq_tensor *t, uint32_t **out)
{
    const int64_t n = (int64_t)(t->nbytes / 4);
    uint32_t *w = malloc(n ? (size_t)n * 4 : 1);
    if (!w) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", t->name ? t->name : "packed tensor");
    for (int64_t i = 0; i < n; i++) w[i] = dsq_pack_rd32(t->data, i);
    *out = w;
    return DSQ_OK;
}

dsq_status dsq_pack_intq_alloc(int64_t rows, int64_t cols, int bits, int64_t group_size, int64_t n_groups, bool sym,
                               dsq_intq *q)
{
    memset(q, 0, sizeof *q);
    int64_t dims[2] = {rows, cols}, gdims[2] = {rows, n_groups};
    uint64_t n, ng;
    if (rows <= 0 || cols <= 0 || cols > INT32_MAX || group_size <= 0 || group_size > INT32_MAX || n_groups <= 0 ||
        !dsq_mul_dims(dims, 2, &n) || !dsq_mul_dims(gdims, 2, &ng) || n > SIZE_MAX / 4 || ng > SIZE_MAX / 4)
        return dsq_fail(DSQ_ERR_FORMAT, "packed weight [%lld x %lld] with %lld groups is out of range", (long long)rows,
                        (long long)cols, (long long)n_groups);
    q->rows = rows;
    q->cols = cols;
    q->bits = bits;
    q->group_size = (int)group_size;
    q->n_groups = n_groups;
    q->sym = sym;
    q->codes = malloc((size_t)n);
    q->scales = malloc((size_t)ng * sizeof(float));
    q->zeros = malloc((size_t)ng);
    if (!q->codes || !q->scales || !q->zeros) {
        dsq_intq_free(q);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory unpacking a [%lld x %lld] weight", (long long)rows,
                        (long long)cols);
    }
    return DSQ_OK;
}
