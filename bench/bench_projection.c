/* How long AWQ and GPTQ take on real model widths, projected to the whole
 * model at the default calibration sizes (issue 18: "a projection users can
 * trust").
 *
 * For each shape (Llama-3-8B, Qwen2.5-32B, Llama-3-70B: their hidden and
 * intermediate widths, heads and KV heads, Qwen's q/k/v biases) a one-layer
 * checkpoint with random BF16 weights and a 1024-token vocabulary is written
 * here; then each method runs on it in a child process (this program
 * re-executed; peak RSS from wait4) with the method's own window length
 * (AWQ 512, GPTQ 2048) at two window counts n1 < n2 and each thread count
 * asked for. The library is called as `dsquant awq|gptq` calls it (4 bits,
 * groups of 128, compressed-tensors output; AWQ asymmetric with its loss over
 * every window, GPTQ symmetric with its default grid and refit).
 *
 * The projection: the layer's time is fitted as t(n) = a + b n from the two
 * runs (a: per-layer work that does not grow with data, e.g. GPTQ's
 * factorization; b: per window) and evaluated at the CLI's default of 128
 * windows, times the model's layer count (the embedding and head take no
 * calibration work). For more cores it assumes the parallel efficiency
 * measured from 1 to 2 threads holds (t_N = t_1 / (N e), e = t_1 / (2 t_2)),
 * which is optimistic for the memory-bound parts: read the 16- and 64-core
 * columns as lower bounds. Peak RSS is the larger window count's.
 *
 * usage: bench_projection --workdir DIR [--shapes llama3-8b,qwen2.5-32b,llama3-70b|tiny]
 *        [--methods awq,gptq] [--windows 1,2] [--threads 1,2]
 * (internal: --stage write|awq|gptq --shape S [--windows N] [--threads T]) */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calibration/int_export.h"
#include "calibration/sequential.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/log.h"
#include "formats/convert.h"
#include "formats/safetensors.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "runtime/model.h"

enum { VOCAB = 1024, HEAD_DIM = 128, DEFAULT_WINDOWS = 128 };

/* One row per shape: the published configs' widths. */
typedef struct shape {
    const char *name, *arch, *model_type;
    int hidden, inter, heads, kv_heads, layers;
    bool qkv_bias;
} shape;

static const shape k_shapes[] = {
    {"llama3-8b", "LlamaForCausalLM", "llama", 4096, 14336, 32, 8, 32, false},
    {"qwen2.5-32b", "Qwen2ForCausalLM", "qwen2", 5120, 27648, 40, 8, 64, true},
    {"llama3-70b", "LlamaForCausalLM", "llama", 8192, 28672, 64, 8, 80, false},
    {"tiny", "LlamaForCausalLM", "llama", 256, 512, 2, 1, 2, false}, /* a smoke run of the bench itself */
};

static void die(const char *what)
{
    fprintf(stderr, "bench_projection: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

static const shape *find_shape(const char *name)
{
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(k_shapes[i].name, name)) return &k_shapes[i];
    return NULL;
}

/* ---------------------------------------------------------------- the layer */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

typedef struct wt {
    char name[96];
    int64_t rows, cols; /* cols 0: a vector */
} wt;

static int add(wt *t, int n, int64_t rows, int64_t cols, const char *name)
{
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].rows = rows, t[n].cols = cols;
    return n + 1;
}

static int plan(const shape *s, wt *t)
{
    const int64_t h = s->hidden, q = (int64_t)s->heads * HEAD_DIM, kv = (int64_t)s->kv_heads * HEAD_DIM;
    int n = 0;
    n = add(t, n, VOCAB, h, "model.embed_tokens.weight");
    n = add(t, n, h, 0, "model.layers.0.input_layernorm.weight");
    n = add(t, n, q, h, "model.layers.0.self_attn.q_proj.weight");
    n = add(t, n, kv, h, "model.layers.0.self_attn.k_proj.weight");
    n = add(t, n, kv, h, "model.layers.0.self_attn.v_proj.weight");
    if (s->qkv_bias) {
        n = add(t, n, q, 0, "model.layers.0.self_attn.q_proj.bias");
        n = add(t, n, kv, 0, "model.layers.0.self_attn.k_proj.bias");
        n = add(t, n, kv, 0, "model.layers.0.self_attn.v_proj.bias");
    }
    n = add(t, n, h, q, "model.layers.0.self_attn.o_proj.weight");
    n = add(t, n, h, 0, "model.layers.0.post_attention_layernorm.weight");
    n = add(t, n, s->inter, h, "model.layers.0.mlp.gate_proj.weight");
    n = add(t, n, s->inter, h, "model.layers.0.mlp.up_proj.weight");
    n = add(t, n, h, s->inter, "model.layers.0.mlp.down_proj.weight");
    n = add(t, n, h, 0, "model.norm.weight");
    n = add(t, n, VOCAB, h, "lm_head.weight");
    return n;
}

static void write_config(const char *dir, const shape *s)
{
    char path[4096], cfg[1536];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d,"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
             " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"max_position_embeddings\": 8192,"
             " \"vocab_size\": %d, \"tie_word_embeddings\": false, \"bos_token_id\": 0, \"eos_token_id\": 1,"
             " \"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"}\n",
             s->arch, s->model_type, s->hidden, s->inter, s->heads, s->kv_heads, VOCAB);
    if (dsq_path_join(path, sizeof path, dir, "config.json") != DSQ_OK) die(dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(cfg, f) < 0 || fclose(f)) die(path);
}

/* Weights uniform in about +-1/sqrt(cols) (a trained layer's scale, so the
 * activations stay finite through the layer), norms 1, biases small. */
static dsq_status write_tensor(dsq_st_writer *w, const wt *t, uint16_t *buf, int64_t buf_elems)
{
    const bool norm = !t->cols && strstr(t->name, "norm");
    const float amp = t->cols ? 1.7f / sqrtf((float)t->cols) : 0.02f;
    const int64_t n = t->cols ? t->rows * t->cols : t->rows;
    for (int64_t i0 = 0; i0 < n; i0 += buf_elems) {
        const int64_t m = n - i0 < buf_elems ? n - i0 : buf_elems;
        for (int64_t i = 0; i < m; i++)
            buf[i] = dsq_f32_to_bf16(norm ? 1.0f : amp * ((float)(rnd() & 0xffff) / 32768.0f - 1.0f));
        DSQ_TRY(dsq_st_writer_write(w, buf, (uint64_t)m * 2));
    }
    return DSQ_OK;
}

static void stage_write(const char *dir, const shape *s)
{
    if (mkdir(dir, 0755) && errno != EEXIST) die(dir);
    write_config(dir, s);
    wt t[20];
    const int n = plan(s, t);
    const int64_t buf_elems = 1 << 22;
    uint16_t *buf = malloc((size_t)buf_elems * sizeof *buf);
    if (!buf) die("out of memory");
    dsq_st_writer *w;
    if (dsq_st_writer_new(dir, "model", DSQ_CONVERT_DEFAULT_SHARD_BYTES, &w) != DSQ_OK) die(dir);
    for (int i = 0; i < n; i++) {
        const int64_t shape2[2] = {t[i].rows, t[i].cols};
        if (dsq_st_writer_add(w, t[i].name, DSQ_TYPE_BF16, t[i].cols ? 2 : 1, shape2) != DSQ_OK) die(t[i].name);
    }
    if (dsq_st_writer_begin(w) != DSQ_OK) die(dir);
    for (int i = 0; i < n; i++)
        if (write_tensor(w, &t[i], buf, buf_elems) != DSQ_OK) die(t[i].name);
    if (dsq_st_writer_finish(w) != DSQ_OK) die(dir);
    dsq_st_writer_free(w);
    free(buf);
}

/* ---------------------------------------------------------------- one run */

/* The method on the layer as `dsquant awq|gptq` runs it, `windows` random
 * windows of the method's length; prints the library's own seconds. */
static void stage_quant(const char *in, const char *out, const dsq_method *method, int windows, int threads)
{
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_cpu_set_threads(threads);
    dsq_model *m;
    if (dsq_model_open(in, &m) != DSQ_OK) die(in);
    dsq_calib_set c = {0};
    c.seqlen = method->default_seqlen;
    c.n_samples = windows;
    c.tokens = malloc((size_t)c.n_samples * (size_t)c.seqlen * sizeof *c.tokens);
    if (!c.tokens) die("out of memory");
    for (int i = 0; i < c.n_samples * c.seqlen; i++) c.tokens[i] = (int32_t)(rnd() % VOCAB);
    const bool awq = method == &dsq_method_awq;
    dsq_seq_opts o = dsq_seq_default_opts();
    o.method = method;
    o.threads = threads;
    o.q.bits = 4, o.q.group_size = 128, o.q.sym = !awq;
    o.q.grid = method->default_grid;
    if (awq)
        o.awq.q = o.q;
    else
        o.refit = true;                 /* the CLI's gptq default */
    o.bf16 = dsq_gemm_bf16_preferred(); /* --compute auto */
    dsq_int_spec spec = {.format = DSQ_INT_FORMAT_CT, .bits = 4, .group = 128, .sym = !awq, .damp = 0.01};
    dsq_outdir *d;
    dsq_seq_report rep;
    if (dsq_outdir_open(out, true, &d) != DSQ_OK) die(out);
    if (dsq_int_export(m, &c, &o, &spec, d, &rep, NULL) != DSQ_OK) die(in);
    if (dsq_outdir_commit(d) != DSQ_OK) die(out);
    printf("%.3f\n", rep.seconds);
    free(c.tokens);
    dsq_model_close(m);
}

/* ---------------------------------------------------------------- the parent */

typedef struct run_result {
    double secs, rss_mib;
} run_result;

/* Runs this program's stage in a child; its stdout's first number is the
 * library's seconds. */
static run_result run_stage(const char *self, const char *work, const char *stage, const char *shape_name, int windows,
                            int threads)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --workdir '%s' --stage %s --shape %s --windows %d --threads %d", self, work, stage,
             shape_name, windows, threads);
    int fds[2];
    if (pipe(fds)) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char out[256] = {0};
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof out - 1 && (r = read(fds[0], out + got, sizeof out - 1 - (size_t)got)) > 0) got += r;
    close(fds[0]);
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) die("wait4");
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "bench_projection: %s failed\n", cmd);
        exit(1);
    }
    run_result res = {strtod(out, NULL), (double)ru.ru_maxrss / 1024.0};
    return res;
}

/* A comma-separated list of positive ints into v (at most cap); returns the count. */
static int parse_ints(const char *s, int *v, int cap)
{
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x <= 0 || x > 4096) return -1;
        v[n++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void project(const char *self, const char *work, const shape *s, const char *method, const int *win,
                    const int *thr, int n_thr)
{
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/%s", work, s->name);
    snprintf(out, sizeof out, "%s/out", work);
    double t1 = 0, per_thread_total[8] = {0}, rss = 0;
    for (int k = 0; k < n_thr; k++) {
        run_result a = run_stage(self, work, method, s->name, win[0], thr[k]);
        run_result b = run_stage(self, work, method, s->name, win[1], thr[k]);
        const double slope = (b.secs - a.secs) / (double)(win[1] - win[0]);
        if (slope <= 0.0)
            fprintf(stderr,
                    "bench_projection: %s %s at %d threads: the larger run was not slower (noise); use more "
                    "windows, e.g. --windows 2,8\n",
                    s->name, method, thr[k]);
        rss = b.rss_mib > rss ? b.rss_mib : rss;
        if (slope <= 0.0) { /* no projection from noise: the runs only, and no total from them */
            printf("| %s | %s | %d | %.1f s (%d w) | %.1f s (%d w) | fixed cost only (slope below noise) | - | - |\n",
                   s->name, method, thr[k], a.secs, win[0], b.secs, win[1]);
            fflush(stdout);
            continue;
        }
        const double fixed = a.secs - slope * win[0];
        const double layer = fixed + slope * DEFAULT_WINDOWS;
        per_thread_total[k] = layer * s->layers;
        if (thr[k] == 1) t1 = per_thread_total[k];
        printf("| %s | %s | %d | %.1f s (%d w) | %.1f s (%d w) | %.1f + %.2f n | %.1f s | %.2f h |\n", s->name, method,
               thr[k], a.secs, win[0], b.secs, win[1], fixed, slope, layer, per_thread_total[k] / 3600.0);
        fflush(stdout);
    }
    double t2 = 0;
    for (int k = 0; k < n_thr; k++)
        if (thr[k] == 2) t2 = per_thread_total[k];
    if (t1 > 0 && t2 > 0) {
        const double e = t1 / (2.0 * t2);
        printf("| %s | %s | whole model, 128 windows: 1 core %.2f h; efficiency 1->2 threads %.2f; 16 cores >= %.2f h, "
               "64 cores >= %.2f h; peak RSS %.0f MiB |\n",
               s->name, method, t1 / 3600.0, e, t1 / (16.0 * e) / 3600.0, t1 / (64.0 * e) / 3600.0, rss);
    } else {
        printf("| %s | %s | peak RSS %.0f MiB (1 and 2 threads give the core projection) |\n", s->name, method, rss);
    }
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", out);
    if (system(cmd) != 0) fprintf(stderr, "bench_projection: cleaning %s failed\n", out);
}

int main(int argc, char **argv)
{
    const char *work = NULL, *stage = NULL, *shapes = "llama3-8b,qwen2.5-32b,llama3-70b", *methods = "awq,gptq";
    const char *shape_name = NULL, *windows = "1,2", *threads = "1,2";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--workdir"))
            work = v;
        else if (!strcmp(a, "--stage"))
            stage = v;
        else if (!strcmp(a, "--shapes"))
            shapes = v;
        else if (!strcmp(a, "--shape"))
            shape_name = v;
        else if (!strcmp(a, "--methods"))
            methods = v;
        else if (!strcmp(a, "--windows"))
            windows = v;
        else if (!strcmp(a, "--threads"))
            threads = v;
        else
            goto usage;
        i++;
    }
    if (!work) goto usage;
    int win[2], thr[8];
    const int n_win = parse_ints(windows, win, 2), n_thr = parse_ints(threads, thr, 8);
    if (stage) {
        const shape *s = shape_name ? find_shape(shape_name) : NULL;
        if (!s || n_win < 1 || n_thr < 1) goto usage;
        char in[4096], out[4096];
        snprintf(in, sizeof in, "%s/%s", work, s->name);
        snprintf(out, sizeof out, "%s/out", work);
        if (!strcmp(stage, "write")) return stage_write(in, s), 0;
        if (!strcmp(stage, "awq")) return stage_quant(in, out, &dsq_method_awq, win[0], thr[0]), 0;
        if (!strcmp(stage, "gptq")) return stage_quant(in, out, &dsq_method_gptq, win[0], thr[0]), 0;
        goto usage;
    }
    if (n_win != 2 || win[0] >= win[1] || n_thr < 1) {
        fprintf(stderr, "bench_projection: --windows takes two counts, the smaller first\n");
        return 2;
    }
    if (mkdir(work, 0755) && errno != EEXIST) die(work);
    char cpu[128];
    dsq_cpu_model(cpu, sizeof cpu);
    printf("CPU: %s; windows %d and %d, projected to %d (AWQ 512 tokens each, GPTQ 2048)\n\n", cpu, win[0], win[1],
           DEFAULT_WINDOWS);
    printf("| shape | method | threads | run 1 | run 2 | layer fit (s) | layer at 128 w | model |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    char list[256];
    snprintf(list, sizeof list, "%s", shapes);
    for (char *save = NULL, *sn = strtok_r(list, ",", &save); sn; sn = strtok_r(NULL, ",", &save)) {
        const shape *s = find_shape(sn);
        if (!s) {
            fprintf(stderr, "bench_projection: unknown shape %s\n", sn);
            return 2;
        }
        double t0 = dsq_now_s();
        run_stage(argv[0], work, "write", s->name, 1, 1);
        fprintf(stderr, "bench_projection: %s layer written in %.1f s\n", s->name, dsq_now_s() - t0);
        char ml[64];
        snprintf(ml, sizeof ml, "%s", methods);
        for (char *s2 = NULL, *mn = strtok_r(ml, ",", &s2); mn; mn = strtok_r(NULL, ",", &s2)) {
            if (strcmp(mn, "awq") && strcmp(mn, "gptq")) {
                fprintf(stderr, "bench_projection: unknown method %s\n", mn);
                return 2;
            }
            project(argv[0], work, s, mn, win, thr, n_thr);
        }
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "rm -rf -- '%s/%s'", work, s->name);
        if (system(cmd) != 0) fprintf(stderr, "bench_projection: cleaning up failed\n");
    }
    return 0;
usage:
    fprintf(stderr,
            "usage: %s --workdir DIR [--shapes llama3-8b,qwen2.5-32b,llama3-70b] [--methods awq,gptq] "
            "[--windows 1,2] [--threads 1,2]\n",
            argv[0]);
    return 2;
}
