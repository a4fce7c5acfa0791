/* Test-only program: quantizes a random [rows x cols] linear layer (RTN or
 * GPTQ) and writes it in every INT format that can hold it, plus the
 * reference codes for tests/integration/test_pack_formats.py to compare with
 * its own unpacker.
 *
 *   dsq_pack_tool OUT_DIR [--rows N] [--cols K] [--bits B] [--group G] [--sym]
 *                 [--rule awq|gptq] [--method rtn|gptq] [--act-order]
 *                 [--static-groups] [--scale-dtype f16|bf16] [--seed S]
 *
 * OUT_DIR (created) receives:
 *   ref/weight.npy f4 [N, K], ref/codes.npy u1 [N, K], ref/scales.npy f4 [N, G],
 *   ref/zeros.npy u1 [N, G], ref/g_idx.npy i4 [K] (the group of every column)
 *   awq/  model.safetensors + config.json        (4-bit without act-order only)
 *   gptq/ model.safetensors + config.json + quantize_config.json (whole words only)
 *   ct/   model.safetensors + config.json
 * Tensors are named "model.layers.0.mlp.down_proj.<suffix>". A format that
 * cannot hold the layer is skipped with a line on stdout. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/status.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"
#include "quantizers/gptq.h"
#include "quantizers/intq.h"

#define MODULE "model.layers.0.mlp.down_proj"

typedef struct opts {
    const char *out;
    int64_t rows, cols;
    dsq_intq_params q;
    bool gptq, act_order, static_groups;
    dsq_type scale_type;
    uint64_t seed;
} opts;

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float randn(uint64_t *s)
{
    double u1 = ((double)(rng(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static int usage(void)
{
    fprintf(stderr, "usage: dsq_pack_tool OUT_DIR [--rows N] [--cols K] [--bits B] [--group G] [--sym] "
                    "[--rule awq|gptq] [--method rtn|gptq] [--act-order] [--static-groups] "
                    "[--scale-dtype f16|bf16] [--seed S]\n");
    return 2;
}

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->rows = 64;
    o->cols = 256;
    o->q = (dsq_intq_params){4, 128, false, DSQ_INTQ_RULE_GPTQ, 1.0f, DSQ_INTQ_GRID_MINMAX};
    o->scale_type = DSQ_TYPE_F16;
    o->seed = 1;
    if (argc < 2) return usage();
    o->out = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sym"))
            o->q.sym = true;
        else if (!strcmp(a, "--act-order"))
            o->act_order = true;
        else if (!strcmp(a, "--static-groups"))
            o->static_groups = true;
        else if (!v)
            return usage();
        else if (!strcmp(a, "--rows"))
            o->rows = atoll(argv[++i]);
        else if (!strcmp(a, "--cols"))
            o->cols = atoll(argv[++i]);
        else if (!strcmp(a, "--bits"))
            o->q.bits = atoi(argv[++i]);
        else if (!strcmp(a, "--group"))
            o->q.group_size = atoi(argv[++i]);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--rule"))
            o->q.rule = !strcmp(argv[++i], "awq") ? DSQ_INTQ_RULE_AWQ : DSQ_INTQ_RULE_GPTQ;
        else if (!strcmp(a, "--method"))
            o->gptq = !strcmp(argv[++i], "gptq");
        else if (!strcmp(a, "--scale-dtype"))
            o->scale_type = !strcmp(argv[++i], "bf16") ? DSQ_TYPE_BF16 : DSQ_TYPE_F16;
        else
            return usage();
    }
    return 0;
}

/* ---- .npy (format version 1.0) ---- */
static dsq_status write_npy(const char *path, const char *descr, int n_dims, const int64_t *shape, const void *data,
                            size_t nbytes)
{
    char dict[160], shp[64] = "";
    size_t l = 0;
    for (int i = 0; i < n_dims; i++) l += (size_t)snprintf(shp + l, sizeof shp - l, "%lld, ", (long long)shape[i]);
    if (n_dims > 1)
        shp[l - 2] = '\0'; /* (N, K) ; a 1-D shape keeps its comma: (K,) */
    else
        shp[l - 1] = '\0';
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shp);
    size_t total = 10 + (size_t)dl + 1, pad = (64 - total % 64) % 64;
    uint8_t head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hl = (uint16_t)(dl + pad + 1);
    head[8] = (uint8_t)hl;
    head[9] = (uint8_t)(hl >> 8);
    dsq_outfile *f;
    DSQ_TRY(dsq_outfile_open(path, true, &f));
    char spaces[64];
    memset(spaces, ' ', sizeof spaces);
    dsq_status st = dsq_outfile_write(f, head, 10);
    if (st == DSQ_OK) st = dsq_outfile_write(f, dict, (size_t)dl);
    if (st == DSQ_OK) st = dsq_outfile_write(f, spaces, pad);
    if (st == DSQ_OK) st = dsq_outfile_write(f, "\n", 1);
    if (st == DSQ_OK) st = dsq_outfile_write(f, data, nbytes);
    if (st != DSQ_OK) {
        dsq_outfile_abort(f);
        return st;
    }
    return dsq_outfile_commit(f);
}

static dsq_status write_json(const char *dir, const char *name, cJSON *o)
{
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, name));
    char *text = cJSON_Print(o);
    if (!text) return dsq_fail(DSQ_ERR_NOMEM, "out of memory printing %s", name);
    dsq_outfile *f;
    dsq_status st = dsq_outfile_open(path, true, &f);
    if (st == DSQ_OK) st = dsq_outfile_write(f, text, strlen(text));
    if (st == DSQ_OK)
        st = dsq_outfile_commit(f);
    else if (f)
        dsq_outfile_abort(f);
    free(text);
    return st;
}

/* config.json: just enough to name the quantization. */
static dsq_status write_config(const char *dir, cJSON *qcfg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    cJSON *dup = cJSON_Duplicate(qcfg, true);
    if (!dup || !cJSON_AddItemToObject(o, "quantization_config", dup)) {
        cJSON_Delete(dup);
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    }
    dsq_status st = write_json(dir, "config.json", o);
    cJSON_Delete(o);
    return st;
}

static dsq_status write_packed(const char *dir, const dsq_packed *p)
{
    dsq_st_writer *w;
    DSQ_TRY(dsq_st_writer_new(dir, "model", 0, &w));
    dsq_status st = dsq_st_writer_set_meta(w, "format", "pt");
    char name[256];
    for (int i = 0; st == DSQ_OK && i < p->n; i++) {
        snprintf(name, sizeof name, "%s.%s", MODULE, p->t[i].suffix);
        st = dsq_st_writer_add(w, name, p->t[i].type, p->t[i].n_dims, p->t[i].shape);
    }
    if (st == DSQ_OK) st = dsq_st_writer_begin(w);
    for (int i = 0; st == DSQ_OK && i < p->n; i++) st = dsq_st_writer_write(w, p->t[i].data, p->t[i].nbytes);
    if (st == DSQ_OK) st = dsq_st_writer_finish(w);
    dsq_st_writer_free(w);
    return st;
}

static dsq_status subdir(const char *out, const char *name, char *buf, size_t cap)
{
    DSQ_TRY(dsq_path_join(buf, cap, out, name));
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return dsq_fail_errno(DSQ_ERR_IO, "%s", buf);
    return DSQ_OK;
}

static dsq_status write_refs(const opts *o, const float *w, const dsq_intq *q)
{
    char dir[4096], path[4096];
    DSQ_TRY(subdir(o->out, "ref", dir, sizeof dir));
    const int64_t wshape[2] = {q->rows, q->cols}, gshape[2] = {q->rows, q->n_groups}, kshape[1] = {q->cols};
    const size_t n = (size_t)(q->rows * q->cols), ng = (size_t)(q->rows * q->n_groups);
    int32_t *g = malloc((size_t)q->cols * sizeof *g);
    if (!g) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (int64_t c = 0; c < q->cols; c++) g[c] = (int32_t)dsq_intq_group_of(q, c);
    dsq_status st = dsq_path_join(path, sizeof path, dir, "weight.npy");
    if (st == DSQ_OK) st = write_npy(path, "<f4", 2, wshape, w, n * 4);
    if (st == DSQ_OK) st = dsq_path_join(path, sizeof path, dir, "codes.npy");
    if (st == DSQ_OK) st = write_npy(path, "|u1", 2, wshape, q->codes, n);
    if (st == DSQ_OK) st = dsq_path_join(path, sizeof path, dir, "scales.npy");
    if (st == DSQ_OK) st = write_npy(path, "<f4", 2, gshape, q->scales, ng * 4);
    if (st == DSQ_OK) st = dsq_path_join(path, sizeof path, dir, "zeros.npy");
    if (st == DSQ_OK) st = write_npy(path, "|u1", 2, gshape, q->zeros, ng);
    if (st == DSQ_OK) st = dsq_path_join(path, sizeof path, dir, "g_idx.npy");
    if (st == DSQ_OK) st = write_npy(path, "<i4", 1, kshape, g, (size_t)q->cols * 4);
    free(g);
    return st;
}

static dsq_status write_awq(const opts *o, const dsq_intq *q)
{
    dsq_packed p;
    dsq_status st = dsq_awq_pack(q, &p);
    if (st == DSQ_ERR_UNSUPPORTED) {
        printf("skip awq: %s\n", dsq_errmsg());
        return DSQ_OK;
    }
    DSQ_TRY(st);
    char dir[4096];
    cJSON *cfg = NULL;
    const char *skip[] = {"lm_head"};
    st = subdir(o->out, "awq", dir, sizeof dir);
    if (st == DSQ_OK) st = write_packed(dir, &p);
    if (st == DSQ_OK) st = dsq_awq_config_json(o->q.group_size, skip, 1, &cfg);
    if (st == DSQ_OK) st = write_config(dir, cfg);
    cJSON_Delete(cfg);
    dsq_packed_free(&p);
    return st;
}

static dsq_status write_gptq(const opts *o, const dsq_intq *q)
{
    dsq_packed p;
    int64_t wrapped = 0;
    dsq_status st = dsq_gptq_pack(q, DSQ_GPTQ_FORMAT_V1, o->scale_type, &p, &wrapped);
    if (st == DSQ_ERR_UNSUPPORTED) {
        printf("skip gptq: %s\n", dsq_errmsg());
        return DSQ_OK;
    }
    DSQ_TRY(st);
    printf("gptq v1 zeros wrapped: %lld\n", (long long)wrapped);
    char dir[4096];
    cJSON *cfg = NULL;
    dsq_gptq_config gc = {o->q.bits,        o->q.group_size, 0.01, o->act_order,
                          o->static_groups, o->q.sym,        true, DSQ_GPTQ_FORMAT_V1, NULL};
    st = subdir(o->out, "gptq", dir, sizeof dir);
    if (st == DSQ_OK) st = write_packed(dir, &p);
    if (st == DSQ_OK) st = dsq_gptq_config_json(&gc, &cfg);
    if (st == DSQ_OK) st = write_json(dir, "quantize_config.json", cfg);
    if (st == DSQ_OK) st = write_config(dir, cfg);
    cJSON_Delete(cfg);
    dsq_packed_free(&p);
    return st;
}

static dsq_status write_ct(const opts *o, const dsq_intq *q)
{
    dsq_packed p;
    DSQ_TRY(dsq_ct_pack(q, o->scale_type == DSQ_TYPE_F16 ? DSQ_TYPE_F16 : DSQ_TYPE_BF16, &p));
    char dir[4096];
    cJSON *cfg = NULL;
    const char *skip[] = {"lm_head"};
    /* act-order with static groups needs no g_idx ("weight"); without, g_idx ("group"). */
    const char *actorder = !o->act_order || q->group_size == q->cols ? NULL : q->g_idx ? "group" : "weight";
    dsq_ct_config cc = {o->q.bits, o->q.group_size, o->q.sym, actorder, skip, 1, NULL};
    dsq_status st = subdir(o->out, "ct", dir, sizeof dir);
    if (st == DSQ_OK) st = write_packed(dir, &p);
    if (st == DSQ_OK) st = dsq_ct_config_json(&cc, &cfg);
    if (st == DSQ_OK) st = write_config(dir, cfg);
    cJSON_Delete(cfg);
    dsq_packed_free(&p);
    return st;
}

static dsq_status quantize(const opts *o, const float *w, dsq_intq *q)
{
    if (!o->gptq) return dsq_intq_quantize(w, o->rows, o->cols, &o->q, NULL, q);
    /* Correlated inputs with uneven scales, so act-order has an order to find. */
    const int64_t n = 4 * o->cols, k = o->cols;
    float *x = malloc((size_t)(n * k) * sizeof *x);
    if (!x) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    uint64_t s = o->seed * 7919 + 1;
    for (int64_t t = 0; t < n; t++) {
        float prev = 0.0f;
        for (int64_t c = 0; c < k; c++) {
            float v = 0.6f * prev + randn(&s);
            prev = v;
            x[t * k + c] = v * (1.0f + (float)((c * 37) % 11));
        }
    }
    dsq_hessian h;
    dsq_status st = dsq_hessian_init(&h, k);
    if (st == DSQ_OK) st = dsq_hessian_add(&h, x, n);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&h);
    free(x);
    if (st == DSQ_OK) {
        dsq_gptq_opts go = dsq_gptq_default_opts();
        go.q = o->q;
        go.act_order = o->act_order;
        go.static_groups = o->static_groups;
        go.name = MODULE;
        st = dsq_gptq_quantize(w, o->rows, o->cols, h.h, &go, q, NULL);
    }
    dsq_hessian_free(&h);
    return st;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) {
        perror(o.out);
        return 1;
    }
    if (o.rows <= 0 || o.cols <= 0 || o.rows * o.cols > (1 << 26)) return usage();
    float *w = malloc((size_t)(o.rows * o.cols) * sizeof *w);
    if (!w) return 1;
    uint64_t s = o.seed;
    for (int64_t i = 0; i < o.rows * o.cols; i++) w[i] = 0.02f * randn(&s) + (i % 13 == 0 ? 0.01f : 0.0f);
    dsq_intq q;
    dsq_status st = quantize(&o, w, &q);
    if (st == DSQ_OK) {
        st = write_refs(&o, w, &q);
        if (st == DSQ_OK) st = write_awq(&o, &q);
        if (st == DSQ_OK) st = write_gptq(&o, &q);
        if (st == DSQ_OK) st = write_ct(&o, &q);
        printf("g_idx: %s\n", q.g_idx ? "act-order" : "trivial");
        dsq_intq_free(&q);
    }
    free(w);
    if (st != DSQ_OK) {
        fprintf(stderr, "dsq_pack_tool: %s\n", dsq_errmsg());
        return 1;
    }
    return 0;
}
