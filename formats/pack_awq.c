/* AutoAWQ GEMM packing; the layout and its sources are in pack_awq.h. */
#include "formats/pack_awq.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Nibble i of a word holds column AWQ_ORDER[i] of its 8 (gemm.py order_map). */
static const int k_awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* Packs 8 values v[m * stride] (m = logical column) into one AWQ-ordered word. */
static uint32_t awq_word(const uint8_t *v, int64_t stride)
{
    uint32_t w = 0;
    for (int i = 0; i < 8; i++) w |= ((uint32_t)v[k_awq_order[i] * stride] & 0xFu) << (4 * i);
    return w;
}

static void awq_unword(uint32_t w, uint8_t *v, int64_t stride)
{
    for (int i = 0; i < 8; i++) v[k_awq_order[i] * stride] = (uint8_t)((w >> (4 * i)) & 0xFu);
}

static bool trivial_g_idx(const dsq_intq *q)
{
    if (!q->g_idx) return true;
    for (int64_t c = 0; c < q->cols; c++)
        if (q->g_idx[c] != c / q->group_size) return false;
    return true;
}

/* The tensors of the GEMM layout for s; data NULL: planned only. */
static dsq_status awq_layout(const dsq_intq_shape *s, dsq_packed *out, uint32_t **qw, uint32_t **qz, void **sc)
{
    const int64_t N = s->rows, K = s->cols, G = s->cols / s->group_size;
    if (s->bits != 4)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq: the GEMM format stores 4-bit codes only, not %d-bit", s->bits);
    if (N % 8 != 0) return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq: out_features %lld is not a multiple of 8", (long long)N);
    if (s->g_idx || K % s->group_size != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq: the GEMM format has no g_idx; act-order groups cannot be stored");
    const int64_t qw_shape[2] = {K, N / 8}, qz_shape[2] = {G, N / 8}, s_shape[2] = {G, N};
    dsq_status st = dsq_packed_add(out, "qweight", DSQ_TYPE_I32, 2, qw_shape, (void **)qw);
    if (st == DSQ_OK) st = dsq_packed_add(out, "qzeros", DSQ_TYPE_I32, 2, qz_shape, (void **)qz);
    if (st == DSQ_OK) st = dsq_packed_add(out, "scales", DSQ_TYPE_F16, 2, s_shape, sc);
    if (st != DSQ_OK) dsq_packed_free(out);
    return st;
}

dsq_status dsq_awq_pack_shape(const dsq_intq_shape *s, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    return awq_layout(s, out, NULL, NULL, NULL);
}

dsq_status dsq_awq_pack(const dsq_intq *q, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_intq_validate(q));
    const int64_t N = q->rows, K = q->cols, G = q->n_groups;
    dsq_intq_shape sh = dsq_intq_shape_of(q);
    sh.g_idx = !trivial_g_idx(q); /* in-order indices are the plain layout */
    uint32_t *qw, *qz;
    void *sc;
    DSQ_TRY(awq_layout(&sh, out, &qw, &qz, &sc));
    /* codes are [N x K]: column block j of input k starts at codes[(8j) * K + k]. */
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N / 8; j++) qw[k * (N / 8) + j] = awq_word(q->codes + 8 * j * K + k, K);
    for (int64_t g = 0; g < G; g++) {
        for (int64_t j = 0; j < N / 8; j++) qz[g * (N / 8) + j] = awq_word(q->zeros + 8 * j * G + g, G);
        for (int64_t n = 0; n < N; n++) dsq_pack_put_scale(sc, g * N + n, DSQ_TYPE_F16, q->scales[n * G + g]);
    }
    return DSQ_OK;
}

dsq_status dsq_awq_unpack(const dsq_tensor *qweight, const dsq_tensor *qzeros, const dsq_tensor *scales, int group_size,
                          dsq_intq *out)
{
    memset(out, 0, sizeof *out);
    if (!qweight) return dsq_fail(DSQ_ERR_NOT_FOUND, "awq: qweight is missing");
    if (qweight->n_dims != 2 || qweight->shape[0] <= 0 || qweight->shape[1] <= 0 || qweight->shape[1] > INT64_MAX / 8 ||
        qweight->shape[0] > INT32_MAX)
        return dsq_fail(DSQ_ERR_FORMAT, "awq: qweight (%s) must be a non-empty 2-D [in, out/8] tensor",
                        qweight->name ? qweight->name : "?");
    const int64_t K = qweight->shape[0], N = qweight->shape[1] * 8;
    if (group_size != -1 && (group_size <= 0 || K % group_size != 0))
        return dsq_fail(DSQ_ERR_FORMAT, "awq: group size %d does not divide in_features %lld", group_size,
                        (long long)K);
    const int64_t gs = group_size == -1 ? K : group_size, G = K / gs;
    dsq_type st_type;
    DSQ_TRY(dsq_pack_expect(qweight, "awq qweight", DSQ_TYPE_I32, 2, K, N / 8));
    DSQ_TRY(dsq_pack_expect(qzeros, "awq qzeros", DSQ_TYPE_I32, 2, G, N / 8));
    DSQ_TRY(dsq_pack_expect_scale(scales, "awq scales", G, N, &st_type));
    dsq_intq q;
    DSQ_TRY(dsq_pack_intq_alloc(N, K, 4, gs, G, false, &q));
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N / 8; j++)
            awq_unword(dsq_pack_rd32(qweight->data, k * (N / 8) + j), q.codes + 8 * j * K + k, K);
    for (int64_t g = 0; g < G; g++) {
        for (int64_t j = 0; j < N / 8; j++)
            awq_unword(dsq_pack_rd32(qzeros->data, g * (N / 8) + j), q.zeros + 8 * j * G + g, G);
        for (int64_t c = 0; c < N; c++) q.scales[c * G + g] = dsq_pack_get_scale(scales->data, g * N + c, st_type);
    }
    dsq_status s = dsq_intq_validate(&q);
    if (s != DSQ_OK) {
        dsq_intq_free(&q);
        return dsq_fail_context(s, "awq %s", qweight->name ? qweight->name : "");
    }
    *out = q;
    return DSQ_OK;
}

dsq_status dsq_awq_config_json(int group_size, const char *const *modules_to_not_convert, size_t n_modules,
                               struct cJSON **out)
{
    *out = NULL;
    if (group_size != -1 && group_size <= 0) return dsq_fail(DSQ_ERR_ARG, "awq: group size %d", group_size);
    /* Children are attached as they are created: deleting o frees everything. */
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "quant_method", "awq") && cJSON_AddTrueToObject(o, "zero_point") &&
              cJSON_AddNumberToObject(o, "group_size", group_size) && cJSON_AddNumberToObject(o, "bits", 4) &&
              cJSON_AddStringToObject(o, "version", "gemm");
    if (ok && !modules_to_not_convert) ok = cJSON_AddNullToObject(o, "modules_to_not_convert") != NULL;
    if (ok && modules_to_not_convert) {
        cJSON *a = cJSON_AddArrayToObject(o, "modules_to_not_convert");
        ok = a != NULL;
        for (size_t i = 0; ok && i < n_modules; i++) {
            cJSON *s = cJSON_CreateString(modules_to_not_convert[i]);
            ok = s && cJSON_AddItemToArray(a, s);
            if (!ok) cJSON_Delete(s);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory building quantization_config");
    }
    *out = o;
    return DSQ_OK;
}
