/* quantization_config keys as the writers put them: AutoAWQ
 * (awq/models/_config.py to_transformers_dict), AutoGPTQ / GPTQModel
 * (BaseQuantizeConfig.to_dict, "checkpoint_format" or newer "format"), and
 * compressed-tensors (quantization/quant_config.py: format, config_groups,
 * ignore); formats/pack_*.h cite the sources of the tensor layouts. */
#include "runtime/model_quant.h"

#include <fnmatch.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/json.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_w8.h"

#define CONFIG_MAX_BYTES (16u << 20)

void dsq_hfq_free(dsq_hfq *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n_skip; i++) free(q->skip[i]);
    free(q->skip);
    free(q->dir);
    memset(q, 0, sizeof *q);
}

/* ---- config parsing ---- */

static dsq_status int_field(const cJSON *o, const char *key, bool required, int def, int *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is missing", path, key);
        *out = def;
        return DSQ_OK;
    }
    /* range first: converting an out-of-range double to int is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -1 && v->valuedouble <= 1e6) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a small integer", path, key);
    *out = (int)v->valuedouble;
    return DSQ_OK;
}

static dsq_status bool_field(const cJSON *o, const char *key, bool def, bool *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return DSQ_OK;
    }
    if (!cJSON_IsBool(v)) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a boolean", path, key);
    *out = cJSON_IsTrue(v);
    return DSQ_OK;
}

/* A string field, or def when absent or null. */
static const char *str_field(const cJSON *o, const char *key, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : def;
}

static dsq_status skip_list(const cJSON *o, const char *key, dsq_hfq *q, const char *path)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a || cJSON_IsNull(a)) return DSQ_OK;
    if (!cJSON_IsArray(a)) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a list", path, key);
    int n = cJSON_GetArraySize(a);
    q->skip = calloc(n > 0 ? (size_t)n : 1, sizeof *q->skip);
    if (!q->skip) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s holds a non-string", path, key);
        if (!(q->skip[q->n_skip] = strdup(e->valuestring))) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
        q->n_skip++;
    }
    return DSQ_OK;
}

static dsq_status parse_awq(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *version = str_field(c, "version", "gemm");
    if (strcasecmp(version, "gemm") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: AWQ version \"%s\" is not supported (only \"gemm\")", path, version);
    DSQ_TRY(int_field(c, "bits", true, 0, &q->bits, path));
    if (q->bits != 4)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: AWQ with %d bits is not supported (only 4)", path, q->bits);
    DSQ_TRY(int_field(c, "group_size", true, 0, &q->group_size, path));
    bool zero_point = true;
    DSQ_TRY(bool_field(c, "zero_point", true, &zero_point, path));
    q->sym = !zero_point;
    return skip_list(c, "modules_to_not_convert", q, path);
}

static dsq_status parse_gptq(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *fmt = str_field(c, "checkpoint_format", str_field(c, "format", "gptq"));
    if (!strcmp(fmt, "gptq"))
        q->gptq_format = DSQ_GPTQ_FORMAT_V1;
    else if (!strcmp(fmt, "gptq_v2"))
        q->gptq_format = DSQ_GPTQ_FORMAT_V2;
    else
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: GPTQ checkpoint_format \"%s\" is not supported (gptq, gptq_v2)", path,
                        fmt);
    DSQ_TRY(int_field(c, "bits", true, 0, &q->bits, path));
    DSQ_TRY(int_field(c, "group_size", false, -1, &q->group_size, path));
    DSQ_TRY(bool_field(c, "sym", true, &q->sym, path));
    return skip_list(c, "modules_to_not_convert", q, path);
}

/* The one config group that targets Linear; weight-only integer quantization. */
static dsq_status parse_ct_group(const cJSON *g, const char *name, dsq_hfq *q, const char *path)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
    if (in && !cJSON_IsNull(in))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors group %s quantizes activations (only weight-only)",
                        path, name);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
    if (!cJSON_IsObject(w))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: compressed-tensors group %s has no weights", path, name);
    const char *type = str_field(w, "type", "int"), *strategy = str_field(w, "strategy", "group");
    if (strcmp(type, "int") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors weights of type \"%s\" are not supported (int)",
                        path, type);
    DSQ_TRY(int_field(w, "num_bits", true, 0, &q->bits, path));
    DSQ_TRY(bool_field(w, "symmetric", true, &q->sym, path));
    if (!strcmp(strategy, "channel")) {
        q->group_size = -1;
        return DSQ_OK;
    }
    if (strcmp(strategy, "group") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors strategy \"%s\" is not supported (group, channel)",
                        path, strategy);
    return int_field(w, "group_size", true, 0, &q->group_size, path);
}

static bool targets_linear(const cJSON *g)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(g, "targets");
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && e->valuestring && !strcmp(e->valuestring, "Linear")) return true;
    return false;
}

/* ---- 8-bit schemes (formats/pack_w8.h) ---- */

/* One QuantizationArgs object of an 8-bit scheme (compressed-tensors
 * quant_args.py: strategy inferred from group_size when absent, symmetric
 * and dynamic default true / false, block_structure a pair or "RxC"). */
typedef struct ct_args {
    dsq_w8_kind kind;
    const char *strategy;
    bool dynamic;
    int group, block[2];
} ct_args;

static dsq_status ct_block(const cJSON *b, int *out, const char *what, const char *path)
{
    if (cJSON_IsString(b) && b->valuestring) {
        char tail;
        if (sscanf(b->valuestring, "%dx%d%c", &out[0], &out[1], &tail) == 2 && out[0] > 0 && out[1] > 0) return DSQ_OK;
    } else if (cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2) {
        bool ok = true;
        for (int i = 0; i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(b, i);
            ok = ok && cJSON_IsNumber(e) && e->valuedouble >= 1 && e->valuedouble <= (1 << 20) &&
                 e->valuedouble == (double)(int)e->valuedouble;
            if (ok) out[i] = (int)e->valuedouble;
        }
        if (ok) return DSQ_OK;
    }
    return dsq_fail(DSQ_ERR_FORMAT, "%s: %s.block_structure is not two positive integers", path, what);
}

static dsq_status ct_args_parse(const cJSON *a, const char *what, ct_args *out, const char *path)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(a)) return dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not an object", path, what);
    const char *type = str_field(a, "type", "int");
    if (strcmp(type, "int") != 0 && strcmp(type, "float") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (int, float)", path, what, type);
    out->kind = !strcmp(type, "int") ? DSQ_W8_INT8 : DSQ_W8_FP8;
    int bits = 0, group = 0;
    bool sym = true;
    DSQ_TRY(int_field(a, "num_bits", false, 8, &bits, path));
    if (bits != 8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s.num_bits %d in an 8-bit format (only 8)", path, what, bits);
    DSQ_TRY(bool_field(a, "symmetric", true, &sym, path));
    if (!sym) return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s is asymmetric (zero points are not supported)", path, what);
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(a, "dynamic");
    if (dyn && !cJSON_IsNull(dyn) && !cJSON_IsBool(dyn))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s.dynamic is not true or false", path, what);
    out->dynamic = cJSON_IsTrue(dyn);
    DSQ_TRY(int_field(a, "group_size", false, 0, &group, path));
    out->group = group;
    out->strategy = str_field(a, "strategy", group == -1 ? "channel" : group > 0 ? "group" : "tensor");
    if (!strcmp(out->strategy, "block"))
        return ct_block(cJSON_GetObjectItemCaseSensitive(a, "block_structure"), out->block, what, path);
    return DSQ_OK;
}

static dsq_status ct_w8_weights(const ct_args *a, dsq_w8_scheme *s, const char *path)
{
    s->kind = a->kind;
    if (a->dynamic) return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: dynamic weight quantization is not supported", path);
    if (!strcmp(a->strategy, "tensor"))
        s->wgran = DSQ_W8_W_TENSOR;
    else if (!strcmp(a->strategy, "channel"))
        s->wgran = DSQ_W8_W_CHANNEL;
    else if (!strcmp(a->strategy, "block")) {
        s->wgran = DSQ_W8_W_BLOCK;
        s->block_rows = a->block[0], s->block_cols = a->block[1];
    } else
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: 8-bit weights with strategy \"%s\" are not supported (tensor, channel, block)", path,
                        a->strategy);
    return DSQ_OK;
}

static dsq_status ct_w8_inputs(const cJSON *in, dsq_w8_scheme *s, const char *path)
{
    if (!in || cJSON_IsNull(in)) {
        s->act = DSQ_W8_ACT_NONE;
        return DSQ_OK;
    }
    ct_args a;
    DSQ_TRY(ct_args_parse(in, "input_activations", &a, path));
    if (a.kind != s->kind)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s weights with %s activations are not supported", path,
                        dsq_w8_kind_name(s->kind), dsq_w8_kind_name(a.kind));
    if (!strcmp(a.strategy, "token") && a.dynamic)
        s->act = DSQ_W8_ACT_TOKEN;
    else if (!strcmp(a.strategy, "tensor") && !a.dynamic)
        s->act = DSQ_W8_ACT_TENSOR;
    else if (!strcmp(a.strategy, "group") && a.dynamic && a.group > 0)
        s->act = DSQ_W8_ACT_GROUP, s->act_group = a.group;
    else
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: %s input activations with strategy \"%s\" are not supported (dynamic token, static "
                        "tensor, dynamic group)",
                        path, a.dynamic ? "dynamic" : "static", a.strategy);
    return DSQ_OK;
}

/* kv_cache_scheme: null, or FP8 per-tensor (what vLLM's FP8 KV cache takes). */
static dsq_status kv_scheme(const cJSON *kv, bool *out, const char *path)
{
    *out = false;
    if (!kv || cJSON_IsNull(kv)) return DSQ_OK;
    ct_args a;
    DSQ_TRY(ct_args_parse(kv, "kv_cache_scheme", &a, path));
    if (a.kind != DSQ_W8_FP8 || strcmp(a.strategy, "tensor") != 0 || a.dynamic)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: kv_cache_scheme other than static FP8 per-tensor is not supported",
                        path);
    *out = true;
    return DSQ_OK;
}

static dsq_status parse_ct_w8(const cJSON *c, const cJSON *g, dsq_hfq *q, const char *path)
{
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output_activations");
    if (out && !cJSON_IsNull(out))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: output_activations quantization is not supported", path);
    ct_args w;
    DSQ_TRY(ct_args_parse(cJSON_GetObjectItemCaseSensitive(g, "weights"), "weights", &w, path));
    q->method = DSQ_HFQ_W8;
    q->w8_format = DSQ_INT_FORMAT_CT;
    q->bits = 8;
    DSQ_TRY(ct_w8_weights(&w, &q->w8, path));
    DSQ_TRY(ct_w8_inputs(cJSON_GetObjectItemCaseSensitive(g, "input_activations"), &q->w8, path));
    DSQ_TRY_CTX(dsq_w8_scheme_check(&q->w8), "%s", path);
    DSQ_TRY(kv_scheme(cJSON_GetObjectItemCaseSensitive(c, "kv_cache_scheme"), &q->kv_fp8, path));
    return skip_list(c, "ignore", q, path);
}

static bool is_w8_ct_format(const char *f)
{
    return !strcmp(f, "int-quantized") || !strcmp(f, "float-quantized") || !strcmp(f, "naive-quantized");
}

/* vLLM's Fp8Config.from_config: activation_scheme required, weight_block_size
 * optional (dynamic only), ignored_layers; DeepSeek-V3 adds fmt "e4m3". */
static dsq_status parse_fp8(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *act = str_field(c, "activation_scheme", NULL), *fmt = str_field(c, "fmt", "e4m3");
    if (!act) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.activation_scheme is missing", path);
    if (strcmp(act, "static") != 0 && strcmp(act, "dynamic") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: activation_scheme \"%s\" is not supported (static, dynamic)", path,
                        act);
    if (strcmp(fmt, "e4m3") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: fp8 fmt \"%s\" is not supported (e4m3)", path, fmt);
    q->method = DSQ_HFQ_W8;
    q->w8_format = DSQ_INT_FORMAT_FP8;
    q->bits = 8;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c, "weight_block_size");
    bool dynamic = !strcmp(act, "dynamic");
    if (b && !cJSON_IsNull(b)) {
        int blk[2];
        if (!cJSON_IsArray(b)) return dsq_fail(DSQ_ERR_FORMAT, "%s: weight_block_size is not a list", path);
        DSQ_TRY(ct_block(b, blk, "quantization_config", path));
        if (!dynamic)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: weight_block_size needs activation_scheme \"dynamic\"", path);
        q->w8 = (dsq_w8_scheme){DSQ_W8_FP8, DSQ_W8_W_BLOCK, blk[0], blk[1], DSQ_W8_ACT_GROUP, blk[1]};
    } else {
        q->w8 = (dsq_w8_scheme){DSQ_W8_FP8, DSQ_W8_W_TENSOR, 0, 0, dynamic ? DSQ_W8_ACT_TOKEN : DSQ_W8_ACT_TENSOR, 0};
    }
    return skip_list(c, "ignored_layers", q, path);
}

/* ModelOpt: {"quantization": {quant_algo, kv_cache_quant_algo, exclude_modules}}
 * (hf_quant_config.json, and older config.json) or the flat config.json form
 * {quant_algo, kv_cache_scheme, ignore} (vLLM modelopt.py from_config). */
static dsq_status parse_modelopt(const cJSON *c, dsq_hfq *q, const char *path)
{
    const cJSON *nested = cJSON_GetObjectItemCaseSensitive(c, "quantization");
    const cJSON *src = cJSON_IsObject(nested) ? nested : c;
    const char *algo = str_field(src, "quant_algo", NULL);
    if (!algo) return dsq_fail(DSQ_ERR_FORMAT, "%s: modelopt config has no quant_algo", path);
    if (strcasecmp(algo, "FP8") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: modelopt quant_algo \"%s\" is not supported (FP8)", path, algo);
    q->method = DSQ_HFQ_W8;
    q->w8_format = DSQ_INT_FORMAT_MODELOPT;
    q->bits = 8;
    q->w8 = dsq_w8_scheme_fp8_static();
    if (src == nested) {
        const char *kv = str_field(src, "kv_cache_quant_algo", NULL);
        if (kv && strcasecmp(kv, "FP8") != 0)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: kv_cache_quant_algo \"%s\" is not supported (FP8)", path, kv);
        q->kv_fp8 = kv != NULL;
        return skip_list(src, "exclude_modules", q, path);
    }
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(c, "kv_cache_scheme");
    if (kv && !cJSON_IsNull(kv)) {
        int bits = 0;
        if (!cJSON_IsObject(kv) || strcmp(str_field(kv, "type", "?"), "float") != 0 ||
            int_field(kv, "num_bits", true, 0, &bits, path) != DSQ_OK || bits != 8)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: modelopt kv_cache_scheme other than FP8 is not supported", path);
        q->kv_fp8 = true;
    }
    return skip_list(c, "ignore", q, path);
}

static dsq_status parse_ct(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *fmt = str_field(c, "format", NULL);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(c, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: compressed-tensors config has no config_groups", path);
    const cJSON *found = NULL;
    for (const cJSON *g = groups->child; g; g = g->next) {
        if (!targets_linear(g))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors group %s does not target Linear", path,
                            g->string ? g->string : "?");
        if (found) return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: several compressed-tensors groups target Linear", path);
        found = g;
    }
    if (!fmt) fmt = str_field(found, "format", "?");
    if (is_w8_ct_format(fmt)) return parse_ct_w8(c, found, q, path);
    if (strcmp(fmt, "pack-quantized") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: compressed-tensors format \"%s\" is not supported (pack-quantized, int-quantized, "
                        "float-quantized, naive-quantized)",
                        path, fmt);
    DSQ_TRY(parse_ct_group(found, found->string ? found->string : "?", q, path));
    return skip_list(c, "ignore", q, path);
}

static dsq_status parse(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *method = str_field(c, "quant_method", NULL);
    if (!method) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config has no quant_method", path);
    if (!strcmp(method, "awq")) {
        q->method = DSQ_HFQ_AWQ;
        return parse_awq(c, q, path);
    }
    if (!strcmp(method, "gptq")) {
        q->method = DSQ_HFQ_GPTQ;
        return parse_gptq(c, q, path);
    }
    if (!strcmp(method, "compressed-tensors")) {
        q->method = DSQ_HFQ_CT;
        return parse_ct(c, q, path);
    }
    if (!strcmp(method, "fp8")) return parse_fp8(c, q, path);
    if (!strncasecmp(method, "modelopt", 8)) return parse_modelopt(c, q, path);
    return dsq_fail(DSQ_ERR_UNSUPPORTED,
                    "%s: quant_method \"%s\" is not supported (awq, gptq, compressed-tensors, fp8, modelopt)", path,
                    method);
}

static dsq_status read_json(const char *path, cJSON **out)
{
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, CONFIG_MAX_BYTES, &text, &len));
    dsq_status why = DSQ_OK;
    *out = dsq_json_parse(text, len, NULL, &why);
    free(text);
    if (*out) return DSQ_OK;
    return why == DSQ_ERR_NOMEM ? dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path)
                                : dsq_fail(DSQ_ERR_FORMAT, "%s: not valid JSON", path);
}

/* A ModelOpt folder whose config.json has no quantization_config (older
 * exports) is described by hf_quant_config.json alone, as vLLM reads it. */
static dsq_status parse_hf_quant_config(const char *dir, dsq_hfq *out)
{
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "hf_quant_config.json"));
    if (!dsq_exists(path)) return DSQ_OK;
    cJSON *root;
    DSQ_TRY(read_json(path, &root));
    dsq_status s = cJSON_IsObject(root) ? parse_modelopt(root, out, path)
                                        : dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
    cJSON_Delete(root);
    return s;
}

dsq_status dsq_hfq_from_dir(const char *dir, dsq_hfq *out)
{
    memset(out, 0, sizeof *out);
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "config.json"));
    if (!dsq_exists(path)) return DSQ_OK;
    cJSON *root;
    DSQ_TRY(read_json(path, &root));
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    dsq_status s = DSQ_OK;
    if (qc && !cJSON_IsNull(qc))
        s = cJSON_IsObject(qc) ? parse(qc, out, path)
                               : dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config is not an object", path);
    else
        s = parse_hf_quant_config(dir, out);
    cJSON_Delete(root);
    if (s == DSQ_OK && out->method != DSQ_HFQ_NONE && !(out->dir = strdup(dir)))
        s = dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    if (s == DSQ_OK && out->method != DSQ_HFQ_NONE && out->bits != 2 && out->bits != 3 && out->bits != 4 &&
        out->bits != 8)
        s = dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %d-bit weights are not supported (2, 3, 4 or 8)", path, out->bits);
    if (s != DSQ_OK) dsq_hfq_free(out);
    return s;
}

/* ---- which modules stay dense ---- */

/* compressed-tensors "re:" patterns use Python's re.match (anchored at the
 * start only); POSIX extended syntax covers the patterns seen in practice. */
static bool regex_matches(const char *pattern, const char *module)
{
    size_t n = strlen(pattern);
    char *anchored = malloc(n + 4);
    if (!anchored) return false;
    snprintf(anchored, n + 4, "^(%s)", pattern);
    regex_t re;
    bool hit = false;
    if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB) == 0) {
        hit = regexec(&re, module, 0, NULL, 0) == 0;
        regfree(&re);
    }
    free(anchored);
    return hit;
}

bool dsq_hfq_skips(const dsq_hfq *q, const char *module)
{
    for (size_t i = 0; i < q->n_skip; i++) {
        const char *s = q->skip[i];
        bool ct = q->method == DSQ_HFQ_CT || (q->method == DSQ_HFQ_W8 && q->w8_format == DSQ_INT_FORMAT_CT);
        if (ct) {
            if (!strncmp(s, "re:", 3) ? regex_matches(s + 3, module) : !strcmp(s, module)) return true;
        } else if (q->method == DSQ_HFQ_W8 && q->w8_format == DSQ_INT_FORMAT_MODELOPT && fnmatch(s, module, 0) == 0) {
            return true; /* ModelOpt's exclude_modules are wildcards (vLLM modelopt.py is_layer_excluded) */
        } else if (*s && strstr(module, s)) {
            return true;
        }
    }
    return false;
}

/* ---- loading one linear ---- */

/* The tensor "<module>.<suffix>"; *found false when absent. */
static dsq_status part(const dsq_st_model *st, const char *module, const char *suffix, dsq_tensor *t, bool *found)
{
    char name[512];
    if (snprintf(name, sizeof name, "%s.%s", module, suffix) >= (int)sizeof name)
        return dsq_fail(DSQ_ERR_FORMAT, "module name %.64s... is too long", module);
    int64_t i = dsq_st_model_find(st, name);
    *found = i >= 0;
    return *found ? dsq_st_model_view(st, (size_t)i, t) : DSQ_OK;
}

static dsq_status need(const dsq_st_model *st, const char *module, const char *suffix, dsq_tensor *t)
{
    bool found;
    DSQ_TRY(part(st, module, suffix, t, &found));
    if (!found)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "quantized module %s: tensor %s.%s is missing", module, module, suffix);
    return DSQ_OK;
}

static dsq_status unpack(const dsq_hfq *q, const dsq_st_model *st, const char *module, dsq_intq *iq)
{
    dsq_tensor a, b, c, d, e;
    bool has_d, has_e;
    switch (q->method) {
    case DSQ_HFQ_AWQ:
        DSQ_TRY(need(st, module, "qweight", &a));
        DSQ_TRY(need(st, module, "qzeros", &b));
        DSQ_TRY(need(st, module, "scales", &c));
        return dsq_awq_unpack(&a, &b, &c, q->group_size, iq);
    case DSQ_HFQ_GPTQ:
        DSQ_TRY(need(st, module, "qweight", &a));
        DSQ_TRY(need(st, module, "qzeros", &b));
        DSQ_TRY(need(st, module, "scales", &c));
        DSQ_TRY(part(st, module, "g_idx", &d, &has_d));
        return dsq_gptq_unpack(&a, &b, &c, has_d ? &d : NULL, q->bits, q->group_size, q->sym, q->gptq_format, iq);
    case DSQ_HFQ_CT:
        DSQ_TRY(need(st, module, "weight_packed", &a));
        DSQ_TRY(need(st, module, "weight_scale", &b));
        DSQ_TRY(need(st, module, "weight_shape", &c));
        DSQ_TRY(part(st, module, "weight_zero_point", &d, &has_d));
        DSQ_TRY(part(st, module, "weight_g_idx", &e, &has_e));
        return dsq_ct_unpack(&a, &b, has_d ? &d : NULL, &c, has_e ? &e : NULL, q->bits, q->group_size, q->sym, iq);
    case DSQ_HFQ_W8:
    case DSQ_HFQ_NONE: break;
    }
    return dsq_fail(DSQ_ERR_INTERNAL, "quantized module %s: no method", module);
}

/* The tensor whose presence marks a module as packed. */
static const char *marker(dsq_hfq_method m) { return m == DSQ_HFQ_CT ? "weight_packed" : "qweight"; }

static bool eight_bit(dsq_type t) { return t == DSQ_TYPE_I8 || t == DSQ_TYPE_F8_E4M3; }

static dsq_status read_w8(const dsq_hfq *q, const dsq_st_model *st, const char *module, bool view, dsq_w8q *out,
                          bool *found);

dsq_status dsq_hfq_read_w8(const dsq_hfq *q, const dsq_st_model *st, const char *module, dsq_w8q *out, bool *found)
{
    return read_w8(q, st, module, false, out, found);
}

static dsq_status read_w8(const dsq_hfq *q, const dsq_st_model *st, const char *module, bool view, dsq_w8q *out,
                          bool *found)
{
    memset(out, 0, sizeof *out);
    *found = false;
    if (q->method != DSQ_HFQ_W8) return dsq_fail(DSQ_ERR_INTERNAL, "quantized module %s: not an 8-bit folder", module);
    const char *ss = dsq_w8_scale_suffix(q->w8_format, &q->w8);
    dsq_tensor w, sc, in;
    bool has_w, has_sc, has_in;
    DSQ_TRY(part(st, module, "weight", &w, &has_w));
    DSQ_TRY(part(st, module, ss, &sc, &has_sc));
    /* a float weight is a linear the quantizer left dense (lm_head, ignore) */
    if (!has_w || !eight_bit(w.type)) {
        if (has_w && has_sc)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: %s.weight is %s but %s.%s exists (8-bit weights expected)",
                            q->dir ? q->dir : "?", module, dsq_type_name(w.type), module, ss);
        return DSQ_OK;
    }
    if (!has_sc)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s.%s is missing (the 8-bit weight's scales)",
                        q->dir ? q->dir : "?", module, ss);
    DSQ_TRY(part(st, module, "input_scale", &in, &has_in));
    dsq_status s = view ? dsq_w8_unpack_view(&q->w8, &w, &sc, has_in ? &in : NULL, out)
                        : dsq_w8_unpack(&q->w8, &w, &sc, has_in ? &in : NULL, out);
    if (view) dsq_release_pages(w.data, w.nbytes); /* read once for the checks; the forward reads them again */
    if (s != DSQ_OK) return dsq_fail_context(s, "%s", q->dir ? q->dir : "?");
    *found = true;
    return DSQ_OK;
}

static dsq_status load_w8(const dsq_hfq *q, const dsq_st_model *st, const char *module, int64_t out, int64_t in,
                          dsq_linear *W, bool *loaded)
{
    dsq_w8q w8;
    DSQ_TRY(read_w8(q, st, module, true, &w8, loaded));
    if (!*loaded) return DSQ_OK;
    dsq_status s = DSQ_OK;
    if (w8.rows != out || w8.cols != in)
        s = dsq_fail(DSQ_ERR_FORMAT, "%s: %s.weight is [%lld x %lld], the model expects [%lld x %lld]", q->dir, module,
                     (long long)w8.rows, (long long)w8.cols, (long long)out, (long long)in);
    if (s == DSQ_OK) s = dsq_linear_init_w8(W, &w8);
    dsq_w8q_free(&w8);
    if (s != DSQ_OK) *loaded = false;
    return s;
}

dsq_status dsq_hfq_load_kv(const dsq_hfq *q, const dsq_st_model *st, int64_t layer, float *k_scale, float *v_scale)
{
    *k_scale = *v_scale = 0.0f;
    if (q->method != DSQ_HFQ_W8) return DSQ_OK;
    char names[2][160];
    dsq_w8_kv_names(q->w8_format, layer, names[0], names[1], sizeof names[0]);
    float *dst[2] = {k_scale, v_scale};
    for (int i = 0; i < 2; i++) {
        int64_t idx = dsq_st_model_find(st, names[i]);
        if (idx < 0 && q->w8_format != DSQ_INT_FORMAT_MODELOPT) {
            /* older llm-compressor folders: k_proj.output_scale / v_proj.output_scale
             * (vLLM fp8.py get_cache_scale maps them to attn.k_scale / v_scale) */
            char legacy[160];
            snprintf(legacy, sizeof legacy, "model.layers.%lld.self_attn.%s_proj.output_scale", (long long)layer,
                     i ? "v" : "k");
            idx = dsq_st_model_find(st, legacy);
        }
        if (idx < 0) {
            /* vLLM's fp8 config has no KV key: the scales are optional there */
            if (!q->kv_fp8) continue;
            *k_scale = *v_scale = 0.0f;
            return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s is missing (the config has an FP8 KV-cache scheme)",
                            q->dir ? q->dir : "?", names[i]);
        }
        dsq_tensor t;
        dsq_status s = dsq_st_model_view(st, (size_t)idx, &t);
        if (s == DSQ_OK) s = dsq_w8_read_scalar(&t, "KV-cache scale", dst[i]);
        if (s != DSQ_OK) {
            *k_scale = *v_scale = 0.0f;
            return dsq_fail_context(s, "%s", q->dir ? q->dir : "?");
        }
    }
    if ((*k_scale > 0.0f) != (*v_scale > 0.0f)) {
        *k_scale = *v_scale = 0.0f;
        return dsq_fail(DSQ_ERR_FORMAT, "%s: layer %lld has only one of %s and %s", q->dir ? q->dir : "?",
                        (long long)layer, names[0], names[1]);
    }
    return DSQ_OK;
}

dsq_status dsq_hfq_load_linear(const dsq_hfq *q, const dsq_st_model *st, const char *module, int64_t out, int64_t in,
                               dsq_linear *W, bool *loaded)
{
    *loaded = false;
    if (q->method == DSQ_HFQ_NONE || dsq_hfq_skips(q, module)) return DSQ_OK;
    if (q->method == DSQ_HFQ_W8) return load_w8(q, st, module, out, in, W, loaded);
    dsq_tensor t;
    bool packed;
    DSQ_TRY(part(st, module, marker(q->method), &t, &packed));
    if (!packed) return DSQ_OK; /* left dense by the quantizer (e.g. lm_head): its .weight must be there */
    dsq_intq iq;
    memset(&iq, 0, sizeof iq);
    dsq_status s = unpack(q, st, module, &iq);
    if (s == DSQ_OK && (iq.rows != out || iq.cols != in))
        s = dsq_fail(DSQ_ERR_FORMAT, "quantized module %s: unpacked [%lld x %lld], expected [%lld x %lld]", module,
                     (long long)iq.rows, (long long)iq.cols, (long long)out, (long long)in);
    if (s == DSQ_OK) s = dsq_linear_init_intq(W, &iq);
    dsq_intq_free(&iq);
    if (s != DSQ_OK) return dsq_fail_context(s, "quantized module %s", module);
    *loaded = true;
    return DSQ_OK;
}
