/* The type table. Block sizes follow ggml-common.h / gguf-py GGML_QUANT_SIZES
 * (see docs/formats.md); safetensors names follow the safetensors spec. */
#include "core/dtype.h"
#include "core/checked.h"

#include <string.h>
#include <strings.h>

#define ROW(t, nm, st, be, bb, q, fl) [t] = {nm, st, be, bb, q, fl}

static const dsq_type_info g_types[DSQ_TYPE_COUNT] = {
    ROW(DSQ_TYPE_F32, "f32", "F32", 1, 4, false, true),
    ROW(DSQ_TYPE_F16, "f16", "F16", 1, 2, false, true),
    ROW(DSQ_TYPE_Q4_0, "q4_0", NULL, 32, 18, true, false),
    ROW(DSQ_TYPE_Q4_1, "q4_1", NULL, 32, 20, true, false),
    ROW(DSQ_TYPE_Q5_0, "q5_0", NULL, 32, 22, true, false),
    ROW(DSQ_TYPE_Q5_1, "q5_1", NULL, 32, 24, true, false),
    ROW(DSQ_TYPE_Q8_0, "q8_0", NULL, 32, 34, true, false),
    ROW(DSQ_TYPE_Q8_1, "q8_1", NULL, 32, 36, true, false),
    ROW(DSQ_TYPE_Q2_K, "q2_K", NULL, 256, 84, true, false),
    ROW(DSQ_TYPE_Q3_K, "q3_K", NULL, 256, 110, true, false),
    ROW(DSQ_TYPE_Q4_K, "q4_K", NULL, 256, 144, true, false),
    ROW(DSQ_TYPE_Q5_K, "q5_K", NULL, 256, 176, true, false),
    ROW(DSQ_TYPE_Q6_K, "q6_K", NULL, 256, 210, true, false),
    ROW(DSQ_TYPE_Q8_K, "q8_K", NULL, 256, 292, true, false),
    ROW(DSQ_TYPE_IQ2_XXS, "iq2_xxs", NULL, 256, 66, true, false),
    ROW(DSQ_TYPE_IQ2_XS, "iq2_xs", NULL, 256, 74, true, false),
    ROW(DSQ_TYPE_IQ3_XXS, "iq3_xxs", NULL, 256, 98, true, false),
    ROW(DSQ_TYPE_IQ1_S, "iq1_s", NULL, 256, 50, true, false),
    ROW(DSQ_TYPE_IQ4_NL, "iq4_nl", NULL, 32, 18, true, false),
    ROW(DSQ_TYPE_IQ3_S, "iq3_s", NULL, 256, 110, true, false),
    ROW(DSQ_TYPE_IQ2_S, "iq2_s", NULL, 256, 82, true, false),
    ROW(DSQ_TYPE_IQ4_XS, "iq4_xs", NULL, 256, 136, true, false),
    ROW(DSQ_TYPE_I8, "i8", "I8", 1, 1, false, false),
    ROW(DSQ_TYPE_I16, "i16", "I16", 1, 2, false, false),
    ROW(DSQ_TYPE_I32, "i32", "I32", 1, 4, false, false),
    ROW(DSQ_TYPE_I64, "i64", "I64", 1, 8, false, false),
    ROW(DSQ_TYPE_F64, "f64", "F64", 1, 8, false, true),
    ROW(DSQ_TYPE_IQ1_M, "iq1_m", NULL, 256, 56, true, false),
    ROW(DSQ_TYPE_BF16, "bf16", "BF16", 1, 2, false, true),
    ROW(DSQ_TYPE_TQ1_0, "tq1_0", NULL, 256, 54, true, false),
    ROW(DSQ_TYPE_TQ2_0, "tq2_0", NULL, 256, 66, true, false),
    ROW(DSQ_TYPE_MXFP4, "mxfp4", NULL, 32, 17, true, false),
    ROW(DSQ_TYPE_F8_E4M3, "f8_e4m3", "F8_E4M3", 1, 1, false, true),
    ROW(DSQ_TYPE_F8_E5M2, "f8_e5m2", "F8_E5M2", 1, 1, false, true),
    ROW(DSQ_TYPE_U8, "u8", "U8", 1, 1, false, false),
    ROW(DSQ_TYPE_U16, "u16", "U16", 1, 2, false, false),
    ROW(DSQ_TYPE_U32, "u32", "U32", 1, 4, false, false),
    ROW(DSQ_TYPE_U64, "u64", "U64", 1, 8, false, false),
    ROW(DSQ_TYPE_BOOL, "bool", "BOOL", 1, 1, false, false),
};

const dsq_type_info *dsq_type_get(int t)
{
    if (t < 0 || t >= DSQ_TYPE_COUNT || !g_types[t].name) return NULL;
    return &g_types[t];
}

const char *dsq_type_name(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    return ti ? ti->name : "?";
}

bool dsq_type_is_ggml(dsq_type t) { return (int)t < DSQ_GGML_TYPE_LIMIT && dsq_type_get((int)t) != NULL; }

dsq_status dsq_type_from_ggml(uint32_t ggml_id, dsq_type *out)
{
    if (ggml_id >= DSQ_GGML_TYPE_LIMIT || !g_types[ggml_id].name)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "unknown ggml type id %u", ggml_id);
    *out = (dsq_type)ggml_id;
    return DSQ_OK;
}

dsq_status dsq_type_from_st_name(const char *st_name, dsq_type *out)
{
    for (int t = 0; t < DSQ_TYPE_COUNT; t++) {
        if (g_types[t].st_name && !strcmp(g_types[t].st_name, st_name)) {
            *out = (dsq_type)t;
            return DSQ_OK;
        }
    }
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "unknown safetensors dtype \"%s\"", st_name);
}

dsq_status dsq_type_from_name(const char *name, dsq_type *out)
{
    for (int t = 0; t < DSQ_TYPE_COUNT; t++) {
        if (g_types[t].name && !strcasecmp(g_types[t].name, name)) {
            *out = (dsq_type)t;
            return DSQ_OK;
        }
    }
    return dsq_fail(DSQ_ERR_ARG, "unknown type \"%s\"", name);
}

bool dsq_mul_dims(const int64_t *dims, int n, uint64_t *out)
{
    uint64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0) return false;
        if (!dsq_mul_u64(p, (uint64_t)dims[i], &p)) return false;
    }
    *out = p;
    return true;
}

dsq_status dsq_type_nbytes(dsq_type t, uint64_t n_elems, uint64_t *out)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return dsq_fail(DSQ_ERR_UNSUPPORTED, "unknown type id %d", (int)t);
    if (n_elems % ti->block_elems != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%llu elements is not a multiple of the %s block size %u",
                        (unsigned long long)n_elems, ti->name, ti->block_elems);
    uint64_t b;
    if (!dsq_mul_u64(n_elems / ti->block_elems, (uint64_t)ti->block_bytes, &b))
        return dsq_fail(DSQ_ERR_FORMAT, "tensor byte size overflows");
    *out = b;
    return DSQ_OK;
}
