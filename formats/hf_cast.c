/* FP8 block-scaled checkpoints to float ones (formats/hf_cast.h), after
 * DeepSeek-V3's inference/fp8_cast_bf16.py and kernel.py weight_dequant:
 * y = x.float() * s over 128 x 128 blocks, stored as BF16. */
#include "formats/hf_cast.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/log.h"
#include "formats/safetensors.h"
#include "kernels/fp8.h"

#define SCALE_SUFFIX ".weight_scale_inv"
#define SIDE_FILE_MAX ((size_t)1 << 30)

/* What becomes of one input tensor. */
typedef enum cast_kind { CAST_COPY = 0, CAST_FLOAT, CAST_FP8, CAST_DROP } cast_kind;

typedef struct cast_item {
    cast_kind kind;
    dsq_type out;
    int64_t scale; /* CAST_FP8: index of its weight_scale_inv */
} cast_item;

typedef struct cast_job {
    const char *in_dir;
    dsq_st_model *st;
    cast_item *items;
    dsq_type target; /* FP8 weights' output type */
    bool convert_floats;
    int block[2]; /* rows x cols of a scale block */
    char *config; /* config.json text to write, or NULL when the folder has none */
    uint64_t total_in, done_in;
    int64_t n_nonfinite;
} cast_job;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static dsq_type target_type(dsq_convert_dtype d)
{
    return d == DSQ_CONVERT_F32 ? DSQ_TYPE_F32 : d == DSQ_CONVERT_F16 ? DSQ_TYPE_F16 : DSQ_TYPE_BF16;
}

static const char *torch_name(dsq_type t)
{
    return t == DSQ_TYPE_F32 ? "float32" : t == DSQ_TYPE_F16 ? "float16" : "bfloat16";
}

/* ---- config.json: block size in, quantization_config out ---- */

static dsq_status read_block(const cJSON *qc, int block[2], const char *path)
{
    block[0] = block[1] = 128;
    const cJSON *b = qc ? cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size") : NULL;
    if (!b || cJSON_IsNull(b)) return DSQ_OK;
    if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.weight_block_size is not two integers", path);
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetArrayItem(b, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
            v->valuedouble > 65536)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.weight_block_size is not two positive integers",
                            path);
        block[i] = (int)v->valuedouble;
    }
    return DSQ_OK;
}

/* dir/config.json parsed into *root (NULL, and no error, when the folder has none). */
static dsq_status read_config(const char *dir, char *path, size_t cap, cJSON **root)
{
    *root = NULL;
    DSQ_TRY(dsq_path_join(path, cap, dir, "config.json"));
    if (!dsq_exists(path)) return DSQ_OK;
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, 16 << 20, &text, &len));
    dsq_status why;
    *root = dsq_json_parse(text, len, NULL, &why);
    free(text);
    if (!*root && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    if (cJSON_IsObject(*root)) return DSQ_OK;
    cJSON_Delete(*root);
    *root = NULL;
    return dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
}

dsq_status dsq_hf_fp8_block(const char *dir, int block[2])
{
    block[0] = block[1] = 128;
    char path[4096];
    cJSON *root;
    DSQ_TRY(read_config(dir, path, sizeof path, &root));
    if (!root) return DSQ_OK;
    dsq_status s = read_block(cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), block, path);
    cJSON_Delete(root);
    return s;
}

static dsq_status edit_config(cast_job *j, const cJSON *root, cJSON *copy, const char *path)
{
    DSQ_TRY(read_block(cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), j->block, path));
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "quantization_config");
    const char *keys[] = {"torch_dtype", "dtype"};
    for (size_t i = 0; i < 2; i++)
        if (cJSON_GetObjectItemCaseSensitive(copy, keys[i]) &&
            !cJSON_ReplaceItemInObjectCaseSensitive(copy, keys[i], cJSON_CreateString(torch_name(j->target))))
            return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    j->config = cJSON_Print(copy);
    return j->config ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
}

static dsq_status load_config(cast_job *j)
{
    char path[4096];
    j->block[0] = j->block[1] = 128;
    cJSON *root;
    DSQ_TRY(read_config(j->in_dir, path, sizeof path, &root));
    if (!root) return DSQ_OK;
    cJSON *copy = cJSON_Duplicate(root, true);
    dsq_status s = copy ? edit_config(j, root, copy, path) : dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    cJSON_Delete(copy);
    cJSON_Delete(root);
    return s;
}

/* ---- the plan ---- */

static dsq_status view(const cast_job *j, size_t i, dsq_tensor *t) { return dsq_st_model_view(j->st, i, t); }

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static dsq_status plan_fp8(cast_job *j, size_t i, const dsq_tensor *w)
{
    char name[512];
    if (snprintf(name, sizeof name, "%.*s%s", (int)(strlen(w->name) - 7), w->name, SCALE_SUFFIX) >= (int)sizeof name)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: name too long", w->name);
    int64_t si = ends_with(w->name, ".weight") ? dsq_st_model_find(j->st, name) : -1;
    if (si < 0)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s is FP8 but %s (its block scales) is missing", w->name,
                        ends_with(w->name, ".weight") ? name : "<name>.weight_scale_inv");
    if (w->n_dims != 2) return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: FP8 weights must be 2-D", w->name);
    dsq_tensor s;
    DSQ_TRY(view(j, (size_t)si, &s));
    int64_t want0 = ceil_div(w->shape[0], j->block[0]), want1 = ceil_div(w->shape[1], j->block[1]);
    const dsq_type_info *ti = dsq_type_get((int)s.type);
    if (!ti || !ti->is_float)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: scales of type %s", s.name, dsq_type_name(s.type));
    if (s.n_dims != 2 || s.shape[0] != want0 || s.shape[1] != want1)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "tensor %s: shape [%lld, %lld] does not match %s [%lld, %lld] in %dx%d blocks "
                        "(expected [%lld, %lld])",
                        s.name, (long long)s.shape[0], (long long)(s.n_dims > 1 ? s.shape[1] : 0), w->name,
                        (long long)w->shape[0], (long long)w->shape[1], j->block[0], j->block[1], (long long)want0,
                        (long long)want1);
    j->items[i] = (cast_item){CAST_FP8, j->target, si};
    j->items[si].kind = CAST_DROP;
    return DSQ_OK;
}

static dsq_status plan(cast_job *j)
{
    size_t n = j->st->n_tensors;
    j->items = calloc(n ? n : 1, sizeof *j->items);
    if (!j->items) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        dsq_tensor t;
        DSQ_TRY(view(j, i, &t));
        j->total_in += t.nbytes;
        if (j->items[i].kind == CAST_DROP) continue;
        if (t.type == DSQ_TYPE_F8_E4M3) {
            DSQ_TRY(plan_fp8(j, i, &t));
            continue;
        }
        const dsq_type_info *ti = dsq_type_get((int)t.type);
        bool floaty = ti && ti->is_float && t.n_dims >= 2 && !ends_with(t.name, SCALE_SUFFIX);
        j->items[i] = (cast_item){floaty && j->convert_floats ? CAST_FLOAT : CAST_COPY,
                                  floaty && j->convert_floats ? j->target : t.type, -1};
    }
    for (size_t i = 0; i < n; i++) {
        dsq_tensor t;
        DSQ_TRY(view(j, i, &t));
        if (ends_with(t.name, SCALE_SUFFIX) && j->items[i].kind != CAST_DROP)
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: block scales without an FP8 weight", t.name);
    }
    return DSQ_OK;
}

/* ---- streaming ---- */

static void progress(cast_job *j, size_t i, double t0, double *last)
{
    double now = dsq_now_s();
    if (now - *last < 5.0 && i + 1 < j->st->n_tensors) return;
    *last = now;
    double rate = (double)j->done_in / (now - t0 > 1e-9 ? now - t0 : 1e-9);
    DSQ_LOGI("convert: tensor %zu/%zu, %.0f MB/s, ETA %.0f s", i + 1, j->st->n_tensors, rate / 1e6,
             rate > 0 ? (double)(j->total_in - j->done_in) / rate : 0.0);
}

/* Whether an E4M3 NaN code (x111 1111) is among q[0..n): eight bytes at a
 * time, a byte of (w & 0x7f..) ^ 0x7f.. being zero exactly where w has one. */
static bool has_nan_code(const uint8_t *q, int64_t n)
{
    const uint64_t lo = 0x0101010101010101ull, hi = 0x8080808080808080ull, m = 0x7f7f7f7f7f7f7f7full;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, q + i, 8);
        uint64_t y = (w & m) ^ m;
        if ((y - lo) & ~y & hi) return true;
    }
    for (; i < n; i++)
        if ((q[i] & 0x7f) == 0x7f) return true;
    return false;
}

/* One row of an FP8 weight times its block scales into f32 [cols]: block by
 * block, one scale per 128 columns, decoded by the kernel's row decoder (the
 * table's values times the scale, one F32 rounding). Returns the non-finite
 * values it carried over. */
static int64_t fp8_row(const cast_job *j, const uint8_t *q, const float *srow, int64_t cols, float *f32)
{
    const float *table = dsq_fp8_e4m3_table();
    int64_t bc = j->block[1], bad = 0;
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
        int64_t n = cols - c0 < bc ? cols - c0 : bc;
        float *d = f32 + c0, s = srow[c0 / bc];
        if (!isfinite(s) || has_nan_code(q + c0, n)) { /* carried over as they come, and counted */
            for (int64_t i = 0; i < n; i++) bad += !isfinite(d[i] = table[q[c0 + i]] * s);
            continue;
        }
        dsq_fp8_decode_row(q + c0, n, s, d);
    }
    return bad;
}

/* Rows [r0, r0 + nr) in the output type, the rows shared among the threads
 * (each decodes a row and converts it while it is in cache). */
static dsq_status fp8_rows(cast_job *j, const dsq_tensor *w, const float *scales, int64_t r0, int64_t nr, void *out,
                           dsq_type ot)
{
    int64_t cols = w->shape[1], sc = ceil_div(cols, j->block[1]);
    size_t osz = dsq_type_get((int)ot)->block_bytes;
    const uint8_t *codes = (const uint8_t *)w->data + r0 * cols;
    int64_t bad = 0;
    int failed = 0;
#pragma omp parallel reduction(+ : bad)
    {
        float *f32 = malloc((size_t)cols * sizeof *f32);
        if (!f32) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < nr; r++) {
            if (!f32) continue;
            bad += fp8_row(j, codes + r * cols, scales + ((r0 + r) / j->block[0]) * sc, cols, f32);
            if (dsq_convert_row(DSQ_TYPE_F32, f32, ot, (uint8_t *)out + (size_t)(r * cols) * osz, (size_t)cols) !=
                DSQ_OK) {
#pragma omp atomic write
                failed = 2;
            }
        }
        free(f32);
    }
    j->n_nonfinite += bad;
    if (failed == 1) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory", w->name);
    if (failed) return dsq_fail(DSQ_ERR_INTERNAL, "tensor %s: no conversion to %s", w->name, dsq_type_name(ot));
    return DSQ_OK;
}

/* Rows [r0, r0 + nr) into the writer: decoded straight into its buffer
 * where they fit (dsq_st_writer_reserve), else through buf. */
static dsq_status fp8_chunk(cast_job *j, dsq_st_writer *wr, const dsq_tensor *w, const float *scales, int64_t r0,
                            int64_t nr, void *buf, dsq_type ot)
{
    size_t rowb = (size_t)w->shape[1] * dsq_type_get((int)ot)->block_bytes;
    while (nr > 0) {
        uint8_t *p;
        size_t got;
        DSQ_TRY(dsq_st_writer_reserve(wr, rowb, (size_t)nr * rowb, &p, &got));
        int64_t k = p ? (int64_t)(got / rowb) : nr;
        DSQ_TRY(fp8_rows(j, w, scales, r0, k, p ? (void *)p : buf, ot));
        DSQ_TRY(p ? dsq_st_writer_produced(wr, (size_t)k * rowb) : dsq_st_writer_write(wr, buf, (uint64_t)k * rowb));
        r0 += k, nr -= k;
    }
    return DSQ_OK;
}

static dsq_status write_fp8(cast_job *j, dsq_st_writer *wr, const dsq_tensor *w, const cast_item *it)
{
    dsq_tensor s;
    DSQ_TRY(view(j, (size_t)it->scale, &s));
    uint64_t ns = dsq_tensor_nelems(&s);
    int64_t cols = w->shape[1], rows = w->shape[0], br = j->block[0];
    size_t osz = dsq_type_get((int)it->out)->block_bytes;
    float *scales = malloc((size_t)ns * sizeof *scales);
    void *out = malloc((size_t)(br * cols) * osz);
    dsq_status st = scales && out ? dsq_to_f32_row(s.type, s.data, scales, (size_t)ns)
                                  : dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory", w->name);
    for (int64_t r0 = 0; st == DSQ_OK && r0 < rows; r0 += br) {
        int64_t nr = rows - r0 < br ? rows - r0 : br;
        st = fp8_chunk(j, wr, w, scales, r0, nr, out, it->out);
        dsq_release_pages((const uint8_t *)w->data + r0 * cols, (uint64_t)(nr * cols));
    }
    free(scales);
    free(out);
    return st;
}

#define CHUNK_ELEMS ((size_t)1 << 20)

static dsq_status write_plain(cast_job *j, dsq_st_writer *wr, const dsq_tensor *t, const cast_item *it)
{
    (void)j;
    if (it->kind == CAST_COPY || it->out == t->type) {
        for (uint64_t off = 0; off < t->nbytes; off += 64u << 20) {
            uint64_t n = t->nbytes - off < (64u << 20) ? t->nbytes - off : (64u << 20);
            DSQ_TRY(dsq_st_writer_write(wr, (const uint8_t *)t->data + off, n));
            dsq_release_pages((const uint8_t *)t->data + off, n);
        }
        return DSQ_OK;
    }
    size_t isz = dsq_type_get((int)t->type)->block_bytes, osz = dsq_type_get((int)it->out)->block_bytes;
    uint64_t n = dsq_tensor_nelems(t);
    void *buf = malloc(CHUNK_ELEMS * osz);
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory", t->name);
    dsq_status st = DSQ_OK;
    for (uint64_t e = 0; st == DSQ_OK && e < n; e += CHUNK_ELEMS) {
        size_t k = n - e < CHUNK_ELEMS ? (size_t)(n - e) : CHUNK_ELEMS;
        const uint8_t *src = (const uint8_t *)t->data + e * isz;
        st = dsq_convert_row(t->type, src, it->out, buf, k);
        if (st == DSQ_OK) st = dsq_st_writer_write(wr, buf, (uint64_t)k * osz);
        dsq_release_pages(src, (uint64_t)k * isz);
    }
    free(buf);
    return st;
}

static dsq_status stream(cast_job *j, dsq_st_writer *wr)
{
    double t0 = dsq_now_s(), last = t0;
    for (size_t i = 0; i < j->st->n_tensors; i++) {
        dsq_tensor t;
        DSQ_TRY(view(j, i, &t));
        const cast_item *it = &j->items[i];
        if (it->kind == CAST_FP8)
            DSQ_TRY_CTX(write_fp8(j, wr, &t, it), "tensor %s", t.name);
        else if (it->kind != CAST_DROP)
            DSQ_TRY_CTX(write_plain(j, wr, &t, it), "tensor %s", t.name);
        j->done_in += t.nbytes;
        progress(j, i, t0, &last);
    }
    return DSQ_OK;
}

static dsq_status write_tensors(cast_job *j, const dsq_outdir *d, uint64_t max_shard)
{
    dsq_st_writer *w = NULL;
    DSQ_TRY(dsq_st_writer_new(dsq_outdir_tmp_path(d), "model", max_shard, &w));
    dsq_st_writer_set_direct(w, true); /* a checkpoint's worth of bytes: no page-cache copy */
    dsq_status s = dsq_st_writer_set_meta(w, "format", "pt");
    for (size_t i = 0; s == DSQ_OK && i < j->st->n_tensors; i++) {
        dsq_tensor t;
        s = view(j, i, &t);
        if (s == DSQ_OK && j->items[i].kind != CAST_DROP)
            s = dsq_st_writer_add(w, t.name, j->items[i].out, t.n_dims, t.shape);
    }
    if (s == DSQ_OK) s = dsq_st_writer_begin(w);
    if (s == DSQ_OK) s = stream(j, w);
    if (s == DSQ_OK) s = dsq_st_writer_finish(w);
    dsq_st_writer_free(w);
    return s;
}

/* ---- side files ---- */

static dsq_status write_text(const dsq_outdir *d, const char *name, const char *text, size_t len)
{
    char path[4096];
    dsq_outfile *f = NULL;
    DSQ_TRY(dsq_outdir_file(d, name, path, sizeof path));
    DSQ_TRY(dsq_outfile_open(path, false, &f));
    dsq_status s = dsq_outfile_write(f, text, len);
    if (s != DSQ_OK) {
        dsq_outfile_abort(f);
        return s;
    }
    return dsq_outfile_commit(f);
}

static bool is_side_file(const char *in_dir, const char *name)
{
    if (name[0] == '.' || ends_with(name, ".safetensors") || !strcmp(name, "model.safetensors.index.json") ||
        !strcmp(name, "config.json"))
        return false;
    char path[4096];
    struct stat sb;
    return dsq_path_join_fits(path, sizeof path, in_dir, name) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static dsq_status copy_side_file(const dsq_outdir *d, const char *in_dir, const char *name)
{
    char src[4096];
    DSQ_TRY(dsq_path_join(src, sizeof src, in_dir, name));
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(src, SIDE_FILE_MAX, &text, &len));
    dsq_status s = write_text(d, name, text, len);
    free(text);
    return s;
}

static dsq_status write_side_files(const cast_job *j, const dsq_outdir *d)
{
    if (j->config) DSQ_TRY(write_text(d, "config.json", j->config, strlen(j->config)));
    DIR *dir = opendir(j->in_dir);
    if (!dir) return dsq_fail_errno(DSQ_ERR_IO, "%s", j->in_dir);
    dsq_status s = DSQ_OK;
    for (struct dirent *e; s == DSQ_OK && (e = readdir(dir));)
        if (is_side_file(j->in_dir, e->d_name)) s = copy_side_file(d, j->in_dir, e->d_name);
    closedir(dir);
    return s;
}

static dsq_status run(cast_job *j, const char *out_dir, bool overwrite, uint64_t max_shard)
{
    DSQ_TRY(load_config(j));
    DSQ_TRY(dsq_st_model_open(j->in_dir, &j->st));
    DSQ_TRY(plan(j));
    dsq_outdir *d = NULL;
    DSQ_TRY(dsq_outdir_open(out_dir, overwrite, &d));
    dsq_status s = write_tensors(j, d, max_shard);
    if (s == DSQ_OK) s = write_side_files(j, d);
    if (s != DSQ_OK) {
        dsq_outdir_abort(d);
        return s;
    }
    if (j->n_nonfinite)
        DSQ_LOGW("%s: %lld dequantized weights are NaN or Inf (carried over)", j->in_dir, (long long)j->n_nonfinite);
    return dsq_outdir_commit(d);
}

dsq_status dsq_convert_hf_to_hf(const char *in_dir, const char *out_dir, dsq_convert_dtype dtype, bool overwrite,
                                uint64_t max_shard_bytes)
{
    cast_job j = {.in_dir = in_dir, .target = target_type(dtype), .convert_floats = dtype != DSQ_CONVERT_AUTO};
    dsq_status s = run(&j, out_dir, overwrite, max_shard_bytes ? max_shard_bytes : DSQ_CONVERT_DEFAULT_SHARD_BYTES);
    free(j.items);
    free(j.config);
    dsq_st_model_close(j.st);
    return s;
}
