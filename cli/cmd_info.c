/* dsquant info: what a model file or folder holds, as text or JSON. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/utf8.h"
#include "core/status.h"
#include "core/tensor.h"
#include "formats/checkpoint.h"

static const char g_usage[] =
    "usage: dsquant info PATH [--json] [--no-tensors]\n"
    "\n"
    "Shows the format, architecture, tensors (name, type, shape outermost first,\n"
    "bytes), totals and metadata of a GGUF file, a Hugging Face folder or a\n"
    ".safetensors file. Long GGUF arrays are abbreviated, e.g. [49152 strings].\n"
    "\n"
    "options:\n"
    "  --json         one JSON object on stdout\n"
    "  --no-tensors   leave out the tensor table\n"
    "  -h, --help     this text\n";

/* Arrays up to this length are shown in full. */
#define SHORT_ARRAY 8
/* Strings longer than this are cut in the text output. */
#define SHORT_STRING 100

static const char *vtype_label(dsq_gguf_vtype t)
{
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
                                        "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* "[49152 strings]", "[3 x i32]"-style summary of a long array. */
static void array_summary(const dsq_gguf_array *a, char *buf, size_t cap)
{
    if (a->elem_type == DSQ_GGUF_STRING)
        snprintf(buf, cap, "[%" PRIu64 " strings]", a->n);
    else if (a->elem_type == DSQ_GGUF_ARRAY)
        snprintf(buf, cap, "[%" PRIu64 " arrays]", a->n);
    else
        snprintf(buf, cap, "[%" PRIu64 " x %s]", a->n, vtype_label(a->elem_type));
}

/* One array element as a number (scalar element types only). */
static double array_num(const dsq_gguf_array *a, uint64_t i)
{
    const void *p = a->data;
    switch (a->elem_type) {
    case DSQ_GGUF_U8: return ((const uint8_t *)p)[i];
    case DSQ_GGUF_I8: return ((const int8_t *)p)[i];
    case DSQ_GGUF_U16: return ((const uint16_t *)p)[i];
    case DSQ_GGUF_I16: return ((const int16_t *)p)[i];
    case DSQ_GGUF_U32: return ((const uint32_t *)p)[i];
    case DSQ_GGUF_I32: return ((const int32_t *)p)[i];
    case DSQ_GGUF_F32: return ((const float *)p)[i];
    case DSQ_GGUF_BOOL: return ((const uint8_t *)p)[i];
    case DSQ_GGUF_U64: return (double)((const uint64_t *)p)[i];
    case DSQ_GGUF_I64: return (double)((const int64_t *)p)[i];
    case DSQ_GGUF_F64: return ((const double *)p)[i];
    default: return 0;
    }
}

/* Shortest decimal that reads back to the same value (as float for F32). */
static void fmt_float(double v, bool is_f32, char *buf, size_t cap)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (is_f32 ? (float)back == (float)v : back == v) return;
    }
}

/* ---------------------------------------------------------------- text */

static void print_str_escaped(const char *s, uint64_t len)
{
    putchar('"');
    uint64_t n = len > SHORT_STRING ? SHORT_STRING : len;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '"') fputs("\\\"", stdout);
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (len > n) printf("... (%" PRIu64 " bytes)", len);
}

static void print_value(const dsq_gguf_value *v)
{
    switch (v->type) {
    case DSQ_GGUF_U8: case DSQ_GGUF_U16: case DSQ_GGUF_U32: case DSQ_GGUF_U64:
        printf("%" PRIu64, v->v.u64);
        break;
    case DSQ_GGUF_I8: case DSQ_GGUF_I16: case DSQ_GGUF_I32: case DSQ_GGUF_I64:
        printf("%" PRId64, v->v.i64);
        break;
    case DSQ_GGUF_F32: case DSQ_GGUF_F64: {
        char buf[40];
        fmt_float(v->v.f64, v->type == DSQ_GGUF_F32, buf, sizeof buf);
        fputs(buf, stdout);
        break;
    }
    case DSQ_GGUF_BOOL: fputs(v->v.b ? "true" : "false", stdout); break;
    case DSQ_GGUF_STRING: print_str_escaped(v->v.str.ptr, v->v.str.len); break;
    case DSQ_GGUF_ARRAY: {
        const dsq_gguf_array *a = &v->v.arr;
        char buf[64];
        if (a->n > SHORT_ARRAY || a->elem_type == DSQ_GGUF_ARRAY) {
            array_summary(a, buf, sizeof buf);
            fputs(buf, stdout);
            break;
        }
        putchar('[');
        for (uint64_t i = 0; i < a->n; i++) {
            if (i) fputs(", ", stdout);
            if (a->elem_type == DSQ_GGUF_STRING) {
                const dsq_gguf_str *s = &((const dsq_gguf_str *)a->data)[i];
                print_str_escaped(s->ptr, s->len);
            } else {
                char num[40];
                fmt_float(array_num(a, i), a->elem_type == DSQ_GGUF_F32, num, sizeof num);
                fputs(num, stdout);
            }
        }
        putchar(']');
        break;
    }
    default: fputs("?", stdout);
    }
}

static void print_arch(const dsq_checkpoint *c)
{
    if (!c->has_arch) {
        printf("architecture: unknown (%s)\n", c->arch_note);
        return;
    }
    const dsq_arch *a = &c->arch;
    printf("architecture: %s (model_type %s)\n", a->hf_architecture, a->model_type);
    printf("  hidden_size %" PRId64 ", intermediate_size %" PRId64 ", layers %" PRId64 ", heads %" PRId64
           ", kv_heads %" PRId64 ", head_dim %" PRId64 "\n",
           a->hidden_size, a->intermediate_size, a->n_layers, a->n_heads, a->n_kv_heads, a->head_dim);
    printf("  vocab_size %" PRId64 ", max_position_embeddings %" PRId64 ", rms_norm_eps %g, rope_theta %g\n",
           a->vocab_size, a->max_position_embeddings, a->rms_norm_eps, a->rope_theta);
    static const char *const scaling[] = {"none", "linear", "llama3", "yarn"};
    printf("  rope_scaling %s", scaling[a->rope_scaling]);
    if (a->rope_scaling != DSQ_ROPE_SCALING_NONE) printf(" (factor %g)", a->rope_factor);
    printf(", tie_word_embeddings %s, attention_bias %s, bos %" PRId64 ", eos %" PRId64 "\n",
           a->tie_word_embeddings ? "true" : "false", a->attention_bias ? "true" : "false", a->bos_token_id,
           a->eos_token_id);
}

static void shape_str(const dsq_tensor *t, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

typedef struct totals {
    uint64_t count, params, bytes;
    uint64_t by_count[DSQ_TYPE_COUNT], by_params[DSQ_TYPE_COUNT], by_bytes[DSQ_TYPE_COUNT];
} totals;

static dsq_status gather(const dsq_checkpoint *c, totals *t, size_t *name_w)
{
    memset(t, 0, sizeof *t);
    *name_w = 4;
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        dsq_tensor x;
        DSQ_TRY(dsq_checkpoint_tensor(c, i, &x));
        uint64_t n = dsq_tensor_nelems(&x);
        t->count++;
        t->params += n;
        t->bytes += x.nbytes;
        if ((int)x.type < 0 || x.type >= DSQ_TYPE_COUNT) return dsq_fail(DSQ_ERR_INTERNAL, "tensor %s: bad type", x.name);
        t->by_count[x.type]++;
        t->by_params[x.type] += n;
        t->by_bytes[x.type] += x.nbytes;
        size_t l = strlen(x.name);
        if (l > *name_w) *name_w = l;
    }
    return DSQ_OK;
}

static dsq_status print_tensors(const dsq_checkpoint *c, size_t name_w)
{
    printf("\ntensors (shape outermost first):\n");
    printf("  %-*s  %-8s  %-22s  %14s\n", (int)name_w, "name", "dtype", "shape", "bytes");
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        dsq_tensor x;
        DSQ_TRY(dsq_checkpoint_tensor(c, i, &x));
        char shape[128];
        shape_str(&x, shape, sizeof shape);
        printf("  %-*s  %-8s  %-22s  %14" PRIu64 "\n", (int)name_w, x.name, dsq_type_name(x.type), shape, x.nbytes);
    }
    return DSQ_OK;
}

static void print_totals(const totals *t)
{
    printf("\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64 " bytes (%.1f MB)\n", t->count,
           t->params, t->bytes, (double)t->bytes / 1e6);
    for (int ty = 0; ty < DSQ_TYPE_COUNT; ty++)
        if (t->by_count[ty])
            printf("  %-8s %6" PRIu64 " tensors %14" PRIu64 " parameters %14" PRIu64 " bytes\n",
                   dsq_type_name((dsq_type)ty), t->by_count[ty], t->by_params[ty], t->by_bytes[ty]);
}

static void print_metadata(const dsq_checkpoint *c)
{
    if (c->gguf) {
        printf("\nmetadata (%" PRIu64 " keys):\n", c->gguf->n_kv);
        for (uint64_t i = 0; i < c->gguf->n_kv; i++) {
            printf("  %s = ", c->gguf->kv[i].key);
            print_value(&c->gguf->kv[i].value);
            putchar('\n');
        }
        return;
    }
    printf("\nmetadata:\n");
    for (size_t f = 0; f < c->st->n_files; f++) {
        const dsq_st_file *sf = c->st->files[f];
        const char *base = strrchr(sf->map.path, '/');
        base = base ? base + 1 : sf->map.path;
        if (sf->n_meta == 0) printf("  %s: (no __metadata__)\n", base);
        for (size_t k = 0; k < sf->n_meta; k++) {
            printf("  %s: %s = ", base, sf->meta_keys[k]);
            print_str_escaped(sf->meta_vals[k], strlen(sf->meta_vals[k]));
            putchar('\n');
        }
    }
}

static void print_format(const dsq_checkpoint *c)
{
    printf("path: %s\n", c->path);
    if (c->gguf)
        printf("format: gguf (version %u, alignment %u)\n", c->gguf->version, c->gguf->alignment);
    else
        printf("format: %s (%zu safetensors file%s)\n", c->kind == DSQ_CKPT_HF_DIR ? "hf" : "safetensors",
               c->st->n_files, c->st->n_files == 1 ? "" : "s");
}

static int info_text(const dsq_checkpoint *c, bool tensors)
{
    totals t;
    size_t name_w;
    if (gather(c, &t, &name_w) != DSQ_OK) return dsq_cli_fail();
    print_format(c);
    print_arch(c);
    if (tensors && print_tensors(c, name_w) != DSQ_OK) return dsq_cli_fail();
    print_totals(&t);
    print_metadata(c);
    return 0;
}

/* ---------------------------------------------------------------- JSON */

/* GGUF strings are meant to be UTF-8 but a file can hold anything: what
 * cannot be JSON text is shown as U+FFFD, so the output always parses. */
static cJSON *json_str_n(const char *s, uint64_t len)
{
    char *tmp = dsq_utf8_repair(s, (size_t)len);
    if (!tmp) return NULL;
    cJSON *j = cJSON_CreateString(tmp);
    free(tmp);
    return j;
}

static cJSON *json_value(const dsq_gguf_value *v)
{
    switch (v->type) {
    case DSQ_GGUF_U8: case DSQ_GGUF_U16: case DSQ_GGUF_U32: case DSQ_GGUF_U64:
        return cJSON_CreateNumber((double)v->v.u64);
    case DSQ_GGUF_I8: case DSQ_GGUF_I16: case DSQ_GGUF_I32: case DSQ_GGUF_I64:
        return cJSON_CreateNumber((double)v->v.i64);
    case DSQ_GGUF_F32: case DSQ_GGUF_F64: return cJSON_CreateNumber(v->v.f64);
    case DSQ_GGUF_BOOL: return cJSON_CreateBool(v->v.b);
    case DSQ_GGUF_STRING: return json_str_n(v->v.str.ptr, v->v.str.len);
    case DSQ_GGUF_ARRAY: {
        const dsq_gguf_array *a = &v->v.arr;
        if (a->n > SHORT_ARRAY || a->elem_type == DSQ_GGUF_ARRAY) {
            char buf[64];
            array_summary(a, buf, sizeof buf);
            return cJSON_CreateString(buf);
        }
        cJSON *arr = cJSON_CreateArray();
        for (uint64_t i = 0; arr && i < a->n; i++) {
            const dsq_gguf_str *s = a->data;
            cJSON_AddItemToArray(arr, a->elem_type == DSQ_GGUF_STRING ? json_str_n(s[i].ptr, s[i].len)
                                                                       : cJSON_CreateNumber(array_num(a, i)));
        }
        return arr;
    }
    default: return cJSON_CreateNull();
    }
}

static cJSON *json_arch(const dsq_checkpoint *c)
{
    if (!c->has_arch) return cJSON_CreateNull();
    const dsq_arch *a = &c->arch;
    static const char *const scaling[] = {"none", "linear", "llama3", "yarn"};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "hf_architecture", a->hf_architecture);
    cJSON_AddStringToObject(o, "model_type", a->model_type);
    cJSON_AddNumberToObject(o, "hidden_size", (double)a->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)a->intermediate_size);
    cJSON_AddNumberToObject(o, "n_layers", (double)a->n_layers);
    cJSON_AddNumberToObject(o, "n_heads", (double)a->n_heads);
    cJSON_AddNumberToObject(o, "n_kv_heads", (double)a->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", (double)a->head_dim);
    cJSON_AddNumberToObject(o, "vocab_size", (double)a->vocab_size);
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double)a->max_position_embeddings);
    cJSON_AddNumberToObject(o, "rms_norm_eps", a->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", a->rope_theta);
    cJSON_AddStringToObject(o, "rope_scaling", scaling[a->rope_scaling]);
    cJSON_AddNumberToObject(o, "rope_factor", a->rope_factor);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", a->tie_word_embeddings);
    cJSON_AddBoolToObject(o, "attention_bias", a->attention_bias);
    cJSON_AddNumberToObject(o, "bos_token_id", (double)a->bos_token_id);
    cJSON_AddNumberToObject(o, "eos_token_id", (double)a->eos_token_id);
    cJSON_AddStringToObject(o, "torch_dtype", a->torch_dtype);
    return o;
}

static dsq_status json_tensors(const dsq_checkpoint *c, cJSON *arr)
{
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        dsq_tensor x;
        DSQ_TRY(dsq_checkpoint_tensor(c, i, &x));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", json_str_n(x.name, strlen(x.name)));
        cJSON_AddStringToObject(o, "dtype", dsq_type_name(x.type));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < x.n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)x.shape[d]));
        cJSON_AddNumberToObject(o, "bytes", (double)x.nbytes);
        cJSON_AddItemToArray(arr, o);
    }
    return DSQ_OK;
}

static cJSON *json_totals(const totals *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)t->count);
    cJSON_AddNumberToObject(o, "params", (double)t->params);
    cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
    cJSON *by = cJSON_AddObjectToObject(o, "by_dtype");
    for (int ty = 0; ty < DSQ_TYPE_COUNT; ty++) {
        if (!t->by_count[ty]) continue;
        cJSON *e = cJSON_AddObjectToObject(by, dsq_type_name((dsq_type)ty));
        cJSON_AddNumberToObject(e, "count", (double)t->by_count[ty]);
        cJSON_AddNumberToObject(e, "params", (double)t->by_params[ty]);
        cJSON_AddNumberToObject(e, "bytes", (double)t->by_bytes[ty]);
    }
    return o;
}

/* GGUF: {key: value}; safetensors: {file: {key: value}}. */
static cJSON *json_metadata(const dsq_checkpoint *c)
{
    cJSON *o = cJSON_CreateObject();
    if (c->gguf) {
        for (uint64_t i = 0; i < c->gguf->n_kv; i++) {
            const char *key = c->gguf->kv[i].key;
            char *shown = dsq_utf8_repair(key, strlen(key));
            if (shown) cJSON_AddItemToObject(o, shown, json_value(&c->gguf->kv[i].value));
            free(shown);
        }
        return o;
    }
    for (size_t f = 0; f < c->st->n_files; f++) {
        const dsq_st_file *sf = c->st->files[f];
        const char *base = strrchr(sf->map.path, '/');
        cJSON *m = cJSON_AddObjectToObject(o, base ? base + 1 : sf->map.path);
        for (size_t k = 0; k < sf->n_meta; k++) cJSON_AddStringToObject(m, sf->meta_keys[k], sf->meta_vals[k]);
    }
    return o;
}

static int info_json(const dsq_checkpoint *c, bool tensors)
{
    totals t;
    size_t name_w;
    if (gather(c, &t, &name_w) != DSQ_OK) return dsq_cli_fail();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", c->path);
    cJSON_AddStringToObject(o, "format", dsq_checkpoint_kind_name(c->kind));
    if (c->gguf) {
        cJSON_AddNumberToObject(o, "gguf_version", c->gguf->version);
        cJSON_AddNumberToObject(o, "alignment", c->gguf->alignment);
    } else {
        cJSON_AddNumberToObject(o, "files", (double)c->st->n_files);
    }
    cJSON_AddItemToObject(o, "architecture", json_arch(c));
    if (!c->has_arch) cJSON_AddStringToObject(o, "architecture_note", c->arch_note);
    if (tensors && json_tensors(c, cJSON_AddArrayToObject(o, "tensors")) != DSQ_OK) {
        cJSON_Delete(o);
        return dsq_cli_fail();
    }
    cJSON_AddItemToObject(o, "totals", json_totals(&t));
    cJSON_AddItemToObject(o, "metadata", json_metadata(c));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) {
        fprintf(stderr, "dsquant: error: out of memory printing JSON\n");
        return 1;
    }
    puts(text);
    free(text);
    return 0;
}

int dsq_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, tensors = true;
    for (int i = 1; i < argc; i++) {
        int exit_now;
        if (dsq_cli_common_opt(argc, argv, &i, g_usage, &exit_now)) {
            if (exit_now) return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--no-tensors")) {
            tensors = false;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "dsquant: error: info: unknown option %s (see dsquant info --help)\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "dsquant: error: info: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "dsquant: error: info: missing PATH (see dsquant info --help)\n");
        return 2;
    }
    dsq_checkpoint *c = NULL;
    if (dsq_checkpoint_open(path, &c) != DSQ_OK) return dsq_cli_fail();
    int rc = json ? info_json(c, tensors) : info_text(c, tensors);
    dsq_checkpoint_close(c);
    return rc;
}
