/* compressed-tensors pack-quantized; the layout and its sources are in pack_ct.h. */
#include "formats/pack_ct.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The tensors of the pack-quantized layout for s; data NULL: planned only. */
static dsq_status ct_layout(const dsq_intq_shape *s, dsq_type scale_type, dsq_packed *out, uint32_t **wp, void **sc,
                            int64_t **shp, uint32_t **zp, int32_t **gi)
{
    if (!dsq_pack_scale_type_ok(scale_type))
        return dsq_fail(DSQ_ERR_ARG, "compressed-tensors: scales cannot be stored as %s", dsq_type_name(scale_type));
    const int b = s->bits;
    const int64_t N = s->rows, K = s->cols, G = s->cols / s->group_size;
    if (!s->g_idx && G * s->group_size != K)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "compressed-tensors: groups of %d do not tile in_features %lld",
                        s->group_size, (long long)K);
    const int64_t KW = dsq_bits_words(K, b), NW = dsq_bits_words(N, b);
    const int64_t wp_shape[2] = {N, KW}, s_shape[2] = {N, G}, shp_shape[1] = {2}, zp_shape[2] = {NW, G},
                  g_shape[1] = {K};
    dsq_status st = dsq_packed_add(out, "weight_packed", DSQ_TYPE_I32, 2, wp_shape, (void **)wp);
    if (st == DSQ_OK) st = dsq_packed_add(out, "weight_scale", scale_type, 2, s_shape, sc);
    if (st == DSQ_OK) st = dsq_packed_add(out, "weight_shape", DSQ_TYPE_I64, 1, shp_shape, (void **)shp);
    if (st == DSQ_OK && !s->sym) st = dsq_packed_add(out, "weight_zero_point", DSQ_TYPE_I32, 2, zp_shape, (void **)zp);
    if (st == DSQ_OK && s->g_idx) st = dsq_packed_add(out, "weight_g_idx", DSQ_TYPE_I32, 1, g_shape, (void **)gi);
    if (st != DSQ_OK) dsq_packed_free(out);
    return st;
}

dsq_status dsq_ct_pack_shape(const dsq_intq_shape *s, dsq_type scale_type, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    return ct_layout(s, scale_type, out, NULL, NULL, NULL, NULL, NULL);
}

dsq_status dsq_ct_pack(const dsq_intq *q, dsq_type scale_type, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_intq_validate(q));
    const int b = q->bits;
    const int64_t N = q->rows, K = q->cols, G = q->n_groups, KW = dsq_bits_words(K, b);
    dsq_intq_shape sh = dsq_intq_shape_of(q);
    uint32_t *wp, *zp = NULL;
    int64_t *shp;
    int32_t *gi = NULL;
    void *sc;
    DSQ_TRY(ct_layout(&sh, scale_type, out, &wp, &sc, &shp, q->sym ? NULL : &zp, q->g_idx ? &gi : NULL));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) dsq_bits_pack_line(q->codes + n * K, K, 1, b, wp + n * KW, 1);
    for (int64_t i = 0; i < N * G; i++) dsq_pack_put_scale(sc, i, scale_type, q->scales[i]);
    shp[0] = N;
    shp[1] = K;
    if (zp)
        for (int64_t g = 0; g < G; g++) dsq_bits_pack_line(q->zeros + g, N, G, b, zp + g, G);
    if (gi)
        for (int64_t c = 0; c < K; c++) gi[c] = q->g_idx[c];
    return DSQ_OK;
}

static dsq_status read_shape(const dsq_tensor *t, int64_t *N, int64_t *K)
{
    if (!t) return dsq_fail(DSQ_ERR_NOT_FOUND, "compressed-tensors: weight_shape is missing");
    /* torch.tensor(weight.shape) is int64; compression_param_info declares int32: take both. */
    if (t->type == DSQ_TYPE_I64) {
        DSQ_TRY(dsq_pack_expect(t, "compressed-tensors weight_shape", DSQ_TYPE_I64, 1, 2, 0));
        uint64_t v[2];
        for (int i = 0; i < 2; i++)
            v[i] = (uint64_t)dsq_pack_rd32(t->data, 2 * i) | (uint64_t)dsq_pack_rd32(t->data, 2 * i + 1) << 32;
        *N = (int64_t)v[0];
        *K = (int64_t)v[1];
    } else {
        DSQ_TRY(dsq_pack_expect(t, "compressed-tensors weight_shape", DSQ_TYPE_I32, 1, 2, 0));
        *N = (int32_t)dsq_pack_rd32(t->data, 0);
        *K = (int32_t)dsq_pack_rd32(t->data, 1);
    }
    if (*N <= 0 || *K <= 0 || *N > INT32_MAX || *K > INT32_MAX)
        return dsq_fail(DSQ_ERR_FORMAT, "compressed-tensors weight_shape (%s) = [%lld, %lld] is out of range",
                        t->name ? t->name : "?", (long long)*N, (long long)*K);
    return DSQ_OK;
}

dsq_status dsq_ct_unpack(const dsq_tensor *weight_packed, const dsq_tensor *weight_scale,
                         const dsq_tensor *weight_zero_point, const dsq_tensor *weight_shape,
                         const dsq_tensor *weight_g_idx, int bits, int group_size, bool sym, dsq_intq *out)
{
    memset(out, 0, sizeof *out);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "compressed-tensors: %d bits (2, 3, 4 or 8)", bits);
    int64_t N, K;
    DSQ_TRY(read_shape(weight_shape, &N, &K));
    if (group_size != -1 && (group_size <= 0 || K % group_size != 0))
        return dsq_fail(DSQ_ERR_FORMAT, "compressed-tensors: group size %d does not divide in_features %lld",
                        group_size, (long long)K);
    const int64_t gs = group_size == -1 ? K : group_size, G = K / gs;
    const int64_t KW = dsq_bits_words(K, bits), NW = dsq_bits_words(N, bits);
    dsq_type st_type;
    DSQ_TRY(dsq_pack_expect(weight_packed, "compressed-tensors weight_packed", DSQ_TYPE_I32, 2, N, KW));
    DSQ_TRY(dsq_pack_expect_scale(weight_scale, "compressed-tensors weight_scale", N, G, &st_type));
    if (sym && weight_zero_point)
        return dsq_fail(DSQ_ERR_FORMAT, "compressed-tensors: a symmetric scheme has no weight_zero_point (%s)",
                        weight_zero_point->name ? weight_zero_point->name : "?");
    if (!sym)
        DSQ_TRY(dsq_pack_expect(weight_zero_point, "compressed-tensors weight_zero_point", DSQ_TYPE_I32, 2, NW, G));
    if (weight_g_idx) DSQ_TRY(dsq_pack_expect(weight_g_idx, "compressed-tensors weight_g_idx", DSQ_TYPE_I32, 1, K, 0));
    dsq_intq q;
    DSQ_TRY(dsq_pack_intq_alloc(N, K, bits, gs, G, sym, &q));
    uint32_t *wp = NULL, *zp = NULL;
    dsq_status st = dsq_pack_load_words(weight_packed, &wp);
    if (st == DSQ_OK && !sym) st = dsq_pack_load_words(weight_zero_point, &zp);
    if (st == DSQ_OK && weight_g_idx) {
        q.g_idx = malloc((size_t)K * sizeof(int32_t));
        if (!q.g_idx) st = dsq_fail(DSQ_ERR_NOMEM, "compressed-tensors: out of memory for g_idx");
        for (int64_t c = 0; st == DSQ_OK && c < K; c++) q.g_idx[c] = (int32_t)dsq_pack_rd32(weight_g_idx->data, c);
    }
    if (st == DSQ_OK) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) dsq_bits_unpack_line(wp + n * KW, 1, bits, K, q.codes + n * K, 1);
        for (int64_t i = 0; i < N * G; i++) {
            q.scales[i] = dsq_pack_get_scale(weight_scale->data, i, st_type);
            q.zeros[i] = (uint8_t)(1 << (bits - 1));
        }
        if (zp)
            for (int64_t g = 0; g < G; g++) dsq_bits_unpack_line(zp + g, G, bits, N, q.zeros + g, G);
        st = dsq_intq_validate(&q);
        if (st != DSQ_OK)
            st = dsq_fail_context(st, "compressed-tensors %s", weight_packed->name ? weight_packed->name : "");
    }
    free(wp);
    free(zp);
    if (st != DSQ_OK) {
        dsq_intq_free(&q);
        return st;
    }
    *out = q;
    return DSQ_OK;
}

/* Children are attached to their parent as they are created, so deleting the
 * root on any failure frees everything. */
static bool add_str_or_null(cJSON *o, const char *key, const char *v)
{
    return v ? cJSON_AddStringToObject(o, key, v) != NULL : cJSON_AddNullToObject(o, key) != NULL;
}

static bool fill_weights(cJSON *w, const dsq_ct_config *c)
{
    bool ok = add_str_or_null(w, "actorder", c->actorder) && cJSON_AddNullToObject(w, "block_structure") &&
              cJSON_AddFalseToObject(w, "dynamic");
    ok = ok && (c->group_size > 0 ? cJSON_AddNumberToObject(w, "group_size", c->group_size) != NULL
                                  : cJSON_AddNullToObject(w, "group_size") != NULL);
    return ok && cJSON_AddNumberToObject(w, "num_bits", c->bits) && cJSON_AddStringToObject(w, "observer", c->observer ? c->observer : "minmax") &&
           cJSON_AddObjectToObject(w, "observer_kwargs") &&
           cJSON_AddStringToObject(w, "strategy", c->group_size > 0 ? "group" : "channel") &&
           cJSON_AddBoolToObject(w, "symmetric", c->sym) && cJSON_AddStringToObject(w, "type", "int");
}

static bool fill_config(cJSON *o, const dsq_ct_config *c)
{
    cJSON *groups = cJSON_AddObjectToObject(o, "config_groups");
    cJSON *g = groups ? cJSON_AddObjectToObject(groups, "group_0") : NULL;
    cJSON *targets =
        g && cJSON_AddNullToObject(g, "input_activations") && cJSON_AddNullToObject(g, "output_activations")
            ? cJSON_AddArrayToObject(g, "targets")
            : NULL;
    cJSON *lin = targets ? cJSON_CreateString("Linear") : NULL;
    if (!lin || !cJSON_AddItemToArray(targets, lin)) {
        cJSON_Delete(lin);
        return false;
    }
    cJSON *w = cJSON_AddObjectToObject(g, "weights");
    if (!w || !fill_weights(w, c)) return false;
    if (!cJSON_AddStringToObject(o, "format", "pack-quantized") ||
        !cJSON_AddNullToObject(o, "global_compression_ratio"))
        return false;
    cJSON *ignore = cJSON_AddArrayToObject(o, "ignore");
    for (size_t i = 0; ignore && i < c->n_ignore; i++) {
        cJSON *s = cJSON_CreateString(c->ignore[i]);
        if (!s || !cJSON_AddItemToArray(ignore, s)) {
            cJSON_Delete(s);
            return false;
        }
    }
    return ignore && cJSON_AddNullToObject(o, "kv_cache_scheme") &&
           cJSON_AddStringToObject(o, "quant_method", "compressed-tensors") &&
           cJSON_AddStringToObject(o, "quantization_status", "compressed");
}

dsq_status dsq_ct_config_json(const dsq_ct_config *c, struct cJSON **out)
{
    *out = NULL;
    if (c->bits < 1 || c->bits > 8) return dsq_fail(DSQ_ERR_ARG, "compressed-tensors: %d bits", c->bits);
    if (c->group_size != -1 && c->group_size <= 0)
        return dsq_fail(DSQ_ERR_ARG, "compressed-tensors: group size %d", c->group_size);
    if (c->actorder && strcmp(c->actorder, "weight") != 0 && strcmp(c->actorder, "group") != 0)
        return dsq_fail(DSQ_ERR_ARG, "compressed-tensors: actorder \"%s\" (weight or group)", c->actorder);
    if (c->actorder && c->group_size <= 0)
        return dsq_fail(DSQ_ERR_ARG, "compressed-tensors: actorder needs the group strategy");
    cJSON *o = cJSON_CreateObject();
    if (!o || !fill_config(o, c)) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "compressed-tensors: out of memory building quantization_config");
    }
    *out = o;
    return DSQ_OK;
}
