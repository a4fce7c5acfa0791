/* GPTQ v1/v2 packing; the layout and its sources are in pack_gptq.h. */
#include "formats/pack_gptq.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t gptq_groups(int64_t K, int group_size)
{
    return group_size == -1 ? 1 : (K + group_size - 1) / group_size;
}

static uint8_t zero_store(int z, int bits, dsq_gptq_format fmt)
{
    return (uint8_t)(fmt == DSQ_GPTQ_FORMAT_V1 ? (z - 1) & ((1 << bits) - 1) : z);
}

static uint8_t zero_load(int v, int bits, dsq_gptq_format fmt)
{
    return (uint8_t)(fmt == DSQ_GPTQ_FORMAT_V1 ? (v + 1) & ((1 << bits) - 1) : v);
}

/* The tensors of the GPTQ layout for s; data NULL: planned only. */
static dsq_status gptq_layout(const dsq_intq_shape *s, dsq_gptq_format fmt, dsq_type scale_type, dsq_packed *out,
                              uint32_t **qw, uint32_t **qz, void **sc, int32_t **gi)
{
    const int b = s->bits;
    const int64_t N = s->rows, K = s->cols, G = s->cols / s->group_size;
    if ((K * b) % 32 != 0 || (N * b) % 32 != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "gptq: %d-bit packing needs in_features and out_features that fill whole int32 words "
                        "(multiples of %d); got [%lld x %lld]",
                        b, b == 3 ? 32 : 32 / b, (long long)N, (long long)K);
    if (!dsq_pack_scale_type_ok(scale_type))
        return dsq_fail(DSQ_ERR_ARG, "gptq: scales cannot be stored as %s", dsq_type_name(scale_type));
    if (fmt != DSQ_GPTQ_FORMAT_V1 && fmt != DSQ_GPTQ_FORMAT_V2) return dsq_fail(DSQ_ERR_ARG, "gptq: unknown format");
    const int64_t KW = K * b / 32, NW = N * b / 32;
    const int64_t qw_shape[2] = {KW, N}, qz_shape[2] = {G, NW}, s_shape[2] = {G, N}, g_shape[1] = {K};
    dsq_status st = dsq_packed_add(out, "qweight", DSQ_TYPE_I32, 2, qw_shape, (void **)qw);
    if (st == DSQ_OK) st = dsq_packed_add(out, "qzeros", DSQ_TYPE_I32, 2, qz_shape, (void **)qz);
    if (st == DSQ_OK) st = dsq_packed_add(out, "scales", scale_type, 2, s_shape, sc);
    if (st == DSQ_OK) st = dsq_packed_add(out, "g_idx", DSQ_TYPE_I32, 1, g_shape, (void **)gi);
    if (st != DSQ_OK) dsq_packed_free(out);
    return st;
}

dsq_status dsq_gptq_pack_shape(const dsq_intq_shape *s, dsq_gptq_format fmt, dsq_type scale_type, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    return gptq_layout(s, fmt, scale_type, out, NULL, NULL, NULL, NULL);
}

dsq_status dsq_gptq_pack(const dsq_intq *q, dsq_gptq_format fmt, dsq_type scale_type, dsq_packed *out,
                         int64_t *n_zero_wrapped)
{
    memset(out, 0, sizeof *out);
    if (n_zero_wrapped) *n_zero_wrapped = 0;
    DSQ_TRY(dsq_intq_validate(q));
    const int b = q->bits;
    const int64_t N = q->rows, K = q->cols, G = q->n_groups, NW = N * b / 32;
    dsq_intq_shape sh = dsq_intq_shape_of(q);
    uint32_t *qw, *qz;
    int32_t *gi;
    void *sc;
    DSQ_TRY(gptq_layout(&sh, fmt, scale_type, out, &qw, &qz, &sc, &gi));
    uint8_t *tmp = malloc((size_t)N);
    if (!tmp) {
        dsq_packed_free(out);
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) dsq_bits_pack_line(q->codes + n * K, K, 1, b, qw + n, N);
    int64_t wrapped = 0;
    for (int64_t g = 0; g < G; g++) {
        for (int64_t n = 0; n < N; n++) {
            const int z = q->zeros[n * G + g];
            wrapped += fmt == DSQ_GPTQ_FORMAT_V1 && z == 0;
            tmp[n] = zero_store(z, b, fmt);
            dsq_pack_put_scale(sc, g * N + n, scale_type, q->scales[n * G + g]);
        }
        dsq_bits_pack_line(tmp, N, 1, b, qz + g * NW, 1);
    }
    for (int64_t c = 0; c < K; c++) gi[c] = (int32_t)dsq_intq_group_of(q, c);
    free(tmp);
    if (n_zero_wrapped) *n_zero_wrapped = wrapped;
    return DSQ_OK;
}

/* g_idx from the file: every value a group index; NULL back when it is c / group. */
static dsq_status read_g_idx(const dsq_tensor *t, int64_t K, int64_t G, int gs, int32_t **out)
{
    *out = NULL;
    bool trivial = K % gs == 0;
    int32_t *g = malloc((size_t)K * sizeof *g);
    if (!g) return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for g_idx");
    for (int64_t c = 0; c < K; c++) {
        int32_t v = t ? (int32_t)dsq_pack_rd32(t->data, c) : (int32_t)(c / gs);
        if (v < 0 || v >= G) {
            free(g);
            return dsq_fail(DSQ_ERR_FORMAT, "gptq g_idx (%s): entry %lld = %d is outside [0, %lld)",
                            t && t->name ? t->name : "?", (long long)c, v, (long long)G);
        }
        g[c] = v;
        trivial = trivial && v == c / gs;
    }
    if (trivial) {
        free(g);
        g = NULL;
    }
    *out = g;
    return DSQ_OK;
}

dsq_status dsq_gptq_unpack(const dsq_tensor *qweight, const dsq_tensor *qzeros, const dsq_tensor *scales,
                           const dsq_tensor *g_idx, int bits, int group_size, bool sym, dsq_gptq_format fmt,
                           dsq_intq *out)
{
    memset(out, 0, sizeof *out);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "gptq: %d bits (2, 3, 4 or 8)", bits);
    if (!qweight) return dsq_fail(DSQ_ERR_NOT_FOUND, "gptq: qweight is missing");
    if (qweight->n_dims != 2 || qweight->shape[0] <= 0 || qweight->shape[1] <= 0 ||
        qweight->shape[0] > INT32_MAX / 32 || (qweight->shape[0] * 32) % bits != 0 ||
        (qweight->shape[1] * bits) % 32 != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "gptq: qweight (%s) is not a [in*%d/32, out] tensor of whole words",
                        qweight->name ? qweight->name : "?", bits);
    const int64_t K = qweight->shape[0] * 32 / bits, N = qweight->shape[1];
    if (group_size != -1 && group_size <= 0) return dsq_fail(DSQ_ERR_FORMAT, "gptq: group size %d", group_size);
    const int gs = group_size == -1 ? (int)K : group_size;
    const int64_t G = gptq_groups(K, group_size), NW = N * bits / 32;
    dsq_type st_type;
    DSQ_TRY(dsq_pack_expect(qweight, "gptq qweight", DSQ_TYPE_I32, 2, K * bits / 32, N));
    DSQ_TRY(dsq_pack_expect(qzeros, "gptq qzeros", DSQ_TYPE_I32, 2, G, NW));
    DSQ_TRY(dsq_pack_expect_scale(scales, "gptq scales", G, N, &st_type));
    if (g_idx) DSQ_TRY(dsq_pack_expect(g_idx, "gptq g_idx", DSQ_TYPE_I32, 1, K, 0));
    dsq_intq q;
    DSQ_TRY(dsq_pack_intq_alloc(N, K, bits, gs, G, sym, &q));
    uint32_t *qw = NULL, *qz = NULL;
    uint8_t *tmp = malloc((size_t)N);
    dsq_status st = tmp ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory");
    if (st == DSQ_OK) st = read_g_idx(g_idx, K, G, gs, &q.g_idx);
    if (st == DSQ_OK) st = dsq_pack_load_words(qweight, &qw);
    if (st == DSQ_OK) st = dsq_pack_load_words(qzeros, &qz);
    if (st == DSQ_OK) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) dsq_bits_unpack_line(qw + n, N, bits, K, q.codes + n * K, 1);
        for (int64_t g = 0; g < G; g++) {
            dsq_bits_unpack_line(qz + g * NW, 1, bits, N, tmp, 1);
            for (int64_t n = 0; n < N; n++) {
                q.zeros[n * G + g] = zero_load(tmp[n], bits, fmt);
                q.scales[n * G + g] = dsq_pack_get_scale(scales->data, g * N + n, st_type);
            }
        }
        st = dsq_intq_validate(&q);
        if (st != DSQ_OK) st = dsq_fail_context(st, "gptq %s", qweight->name ? qweight->name : "");
    }
    free(tmp);
    free(qw);
    free(qz);
    if (st != DSQ_OK) {
        dsq_intq_free(&q);
        return st;
    }
    *out = q;
    return DSQ_OK;
}

dsq_status dsq_gptq_config_json(const dsq_gptq_config *c, struct cJSON **out)
{
    *out = NULL;
    if (c->bits != 2 && c->bits != 3 && c->bits != 4 && c->bits != 8)
        return dsq_fail(DSQ_ERR_ARG, "gptq: %d bits in the config", c->bits);
    if (c->group_size != -1 && c->group_size <= 0) return dsq_fail(DSQ_ERR_ARG, "gptq: group size %d", c->group_size);
    /* transformers' GPTQConfig.post_init refuses damp_percent outside (0, 1). */
    if (!(c->damp_percent > 0.0 && c->damp_percent < 1.0))
        return dsq_fail(DSQ_ERR_ARG, "gptq: damp_percent %g is not in (0, 1)", c->damp_percent);
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "bits", c->bits) &&
              cJSON_AddNumberToObject(o, "group_size", c->group_size) &&
              cJSON_AddNumberToObject(o, "damp_percent", c->damp_percent) &&
              cJSON_AddBoolToObject(o, "desc_act", c->desc_act) &&
              cJSON_AddBoolToObject(o, "static_groups", c->static_groups) && cJSON_AddBoolToObject(o, "sym", c->sym) &&
              cJSON_AddBoolToObject(o, "true_sequential", c->true_sequential) &&
              cJSON_AddNullToObject(o, "model_name_or_path") && cJSON_AddNullToObject(o, "model_file_base_name") &&
              cJSON_AddStringToObject(o, "quant_method", "gptq") &&
              cJSON_AddStringToObject(o, "checkpoint_format", c->format == DSQ_GPTQ_FORMAT_V2 ? "gptq_v2" : "gptq");
    if (ok && c->grid) {
        cJSON *meta = cJSON_AddObjectToObject(o, "meta"), *who = meta ? cJSON_AddArrayToObject(meta, "quantizer") : NULL;
        cJSON *name = who ? cJSON_CreateString("dsquant") : NULL;
        if (name && !cJSON_AddItemToArray(who, name)) {
            cJSON_Delete(name);
            name = NULL;
        }
        ok = name && cJSON_AddStringToObject(meta, "grid", c->grid);
    }
    if (!ok) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory building quantize_config");
    }
    *out = o;
    return DSQ_OK;
}
