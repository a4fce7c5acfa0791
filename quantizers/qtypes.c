#include "quantizers/qtypes.h"

#include <math.h>
#include <stddef.h>

#include "core/finite.h"
#include "quantizers/quants.h"

#define QROW(T, t, dot, dt, im)                                                                    \
    [DSQ_TYPE_##T] = {DSQ_TYPE_##T, dsq_quantize_row_##t, dsq_dequantize_row_##t, dot, DSQ_TYPE_##dt, im, NULL}
#define QROW_SIGMA(T, t, dot, dt)                                                                  \
    [DSQ_TYPE_##T] = {DSQ_TYPE_##T, dsq_quantize_row_##t, dsq_dequantize_row_##t, dot, DSQ_TYPE_##dt, true, \
                      dsq_quantize_row_##t##_sigma}

static const dsq_qtype g_qtypes[DSQ_GGML_TYPE_LIMIT] = {
    QROW_SIGMA(Q4_0, q4_0, dsq_vec_dot_q4_0_q8_0, Q8_0),
    QROW_SIGMA(Q4_1, q4_1, dsq_vec_dot_q4_1_q8_1, Q8_1),
    QROW_SIGMA(Q5_0, q5_0, dsq_vec_dot_q5_0_q8_0, Q8_0),
    QROW_SIGMA(Q5_1, q5_1, dsq_vec_dot_q5_1_q8_1, Q8_1),
    QROW(Q8_0, q8_0, dsq_vec_dot_q8_0_q8_0, Q8_0, false),
    QROW(Q8_1, q8_1, NULL, Q8_1, false),
    QROW(Q2_K, q2_K, dsq_vec_dot_q2_K_q8_K, Q8_K, true),
    QROW(Q3_K, q3_K, dsq_vec_dot_q3_K_q8_K, Q8_K, true),
    QROW(Q4_K, q4_K, dsq_vec_dot_q4_K_q8_K, Q8_K, true),
    QROW(Q5_K, q5_K, dsq_vec_dot_q5_K_q8_K, Q8_K, true),
    QROW(Q6_K, q6_K, dsq_vec_dot_q6_K_q8_K, Q8_K, true),
    QROW(Q8_K, q8_K, NULL, Q8_K, false),
    QROW(IQ4_NL, iq4_nl, dsq_vec_dot_iq4_nl_q8_0, Q8_0, true),
    QROW(IQ4_XS, iq4_xs, dsq_vec_dot_iq4_xs_q8_K, Q8_K, true),
};

const dsq_qtype *dsq_qtype_get(dsq_type t)
{
    if ((int)t < 0 || (int)t >= DSQ_GGML_TYPE_LIMIT) return NULL;
    const dsq_qtype *q = &g_qtypes[t];
    if (!q->dequantize_row) return NULL;
    return q;
}

dsq_status dsq_dequantize(dsq_type t, const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return dsq_fail(DSQ_ERR_UNSUPPORTED, "unknown type id %d", (int)t);
    if (n_per_row % ti->block_elems)
        return dsq_fail(DSQ_ERR_FORMAT, "row length %lld is not a multiple of the %s block size %u",
                        (long long)n_per_row, ti->name, ti->block_elems);
    size_t row_bytes = (size_t)(n_per_row / ti->block_elems) * ti->block_bytes;
    if (!ti->quantized) {
        for (int64_t r = 0; r < nrows; r++)
            DSQ_TRY(dsq_to_f32_row(t, (const uint8_t *)src + r * row_bytes, dst + r * n_per_row, (size_t)n_per_row));
        return DSQ_OK;
    }
    const dsq_qtype *q = dsq_qtype_get(t);
    if (!q) return dsq_fail(DSQ_ERR_UNSUPPORTED, "cannot dequantize type %s", ti->name);
    for (int64_t r = 0; r < nrows; r++)
        q->dequantize_row((const uint8_t *)src + r * row_bytes, dst + r * n_per_row, n_per_row);
    return DSQ_OK;
}

dsq_status dsq_quantize(dsq_type t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return dsq_fail(DSQ_ERR_UNSUPPORTED, "unknown type id %d", (int)t);
    if (n_per_row % ti->block_elems)
        return dsq_fail(DSQ_ERR_ARG, "row length %lld is not a multiple of the %s block size %u",
                        (long long)n_per_row, ti->name, ti->block_elems);
    const int64_t bad = dsq_find_nonfinite(src, nrows * n_per_row);
    if (bad >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC, "row %lld, column %lld: value is %s", (long long)(bad / n_per_row),
                        (long long)(bad % n_per_row), isnan(src[bad]) ? "NaN" : "Inf");
    size_t row_bytes = (size_t)(n_per_row / ti->block_elems) * ti->block_bytes;
    if (!ti->quantized) {
        for (int64_t r = 0; r < nrows; r++)
            DSQ_TRY(dsq_convert_row(DSQ_TYPE_F32, src + r * n_per_row, t, (uint8_t *)dst + r * row_bytes,
                                    (size_t)n_per_row));
        return DSQ_OK;
    }
    const dsq_qtype *q = dsq_qtype_get(t);
    if (!q || !q->quantize_row) return dsq_fail(DSQ_ERR_UNSUPPORTED, "cannot quantize to type %s", ti->name);
    for (int64_t r = 0; r < nrows; r++)
        q->quantize_row(src + r * n_per_row, (uint8_t *)dst + r * row_bytes, n_per_row, imatrix);
    return DSQ_OK;
}
