#include "formats/int_artifact.h"

#include <stdio.h>
#include <string.h>

static const char *const g_names[] = {"awq", "gptq", "compressed-tensors", "fp8", "modelopt"};

const char *dsq_int_format_name(dsq_int_format f)
{
    return (unsigned)f < sizeof g_names / sizeof g_names[0] ? g_names[f] : "?";
}

int dsq_int_format_parse(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof g_names / sizeof g_names[0]); i++)
        if (!strcmp(g_names[i], name)) return i;
    return -1;
}

/* The matrix of formats/int_artifact.h: vLLM's Fp8Config (vllm/model_executor/layers/quantization/fp8.py)
 * holds one weight_scale per tensor or a weight_block_size, and activation_scheme static | dynamic;
 * ModelOpt's FP8 export (hf_quant_config.json quant_algo FP8) is per-tensor weights and inputs. */
bool dsq_int_format_expresses(dsq_int_format f, const dsq_w8_scheme *s)
{
    if (!s) return false; /* no dsq_w8_scheme_check: a lookup writes no message */
    bool fp8 = s->kind == DSQ_W8_FP8;
    bool tensor_w = s->wgran == DSQ_W8_W_TENSOR;
    switch (f) {
    case DSQ_INT_FORMAT_CT: return true;
    case DSQ_INT_FORMAT_FP8:
        if (!fp8) return false;
        if (tensor_w) return s->act == DSQ_W8_ACT_TENSOR || s->act == DSQ_W8_ACT_TOKEN;
        return s->wgran == DSQ_W8_W_BLOCK && s->block_rows == 128 && s->block_cols == 128 &&
               s->act == DSQ_W8_ACT_GROUP && s->act_group == 128;
    case DSQ_INT_FORMAT_MODELOPT: return fp8 && tensor_w && s->act == DSQ_W8_ACT_TENSOR;
    default: return false;
    }
}

void dsq_int_formats_expressing(const dsq_w8_scheme *s, char *buf, size_t cap)
{
    if (!cap) return;
    buf[0] = 0;
    for (int f = 0; f < (int)(sizeof g_names / sizeof g_names[0]); f++) {
        if (!dsq_int_format_expresses((dsq_int_format)f, s)) continue;
        size_t u = strlen(buf);
        snprintf(buf + u, cap - u, "%s%s", u ? ", " : "", g_names[f]);
    }
}
