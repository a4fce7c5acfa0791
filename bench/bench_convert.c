/* Conversion throughput and peak memory, against `cp` of the same bytes.
 *
 * Cases: HF F32 -> GGUF F32 (names, Q/K permutation, copy path) and GGUF F32
 * -> HF F16 (narrowing path), on the default model's HF F32 form and on a
 * synthetic ~2 GB Llama checkpoint made here (a few tensors of 64-400 MB).
 * Each timed command runs in a child process (this program re-executed, so
 * its peak RSS is its own, read from wait4's ru_maxrss); before each one the
 * input is read once so the page cache is warm for both the conversion and
 * the `cp` baseline, which also fsyncs what it wrote (the converter does);
 * pending writeback is flushed before each command and the order alternates.
 * Targets: throughput >= 0.7x cp; peak RSS <= 64 MB + the largest tensor.
 *
 * usage: bench_convert [--model GGUF] [--workdir DIR] [--reps N] [--no-synthetic]
 * Results and the command used are kept in docs/benchmarks.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/checkpoint.h"
#include "formats/convert.h"
#include "formats/safetensors.h"

#define MB 1e6

static void die(const char *what)
{
    fprintf(stderr, "bench_convert: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

/* ---------------------------------------------------------------- children */

typedef struct run_result {
    double secs;
    double rss_mb;
    int status;
} run_result;

static run_result run_child(char *const argv[])
{
    run_result r = {0};
    double t0 = dsq_now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        execvp(argv[0], argv);
        perror(argv[0]);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) {
        perror("wait4");
        exit(1);
    }
    r.secs = dsq_now_s() - t0;
    r.rss_mb = (double)ru.ru_maxrss * 1024.0 / MB;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return r;
}

/* The child side of a timed conversion. */
static int child_convert(const char *in, const char *out, const char *dtype)
{
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_convert_dtype d;
    if (dsq_convert_dtype_parse(dtype, &d) != DSQ_OK ||
        dsq_convert(in, out, d, true, DSQ_CONVERT_DEFAULT_SHARD_BYTES) != DSQ_OK) {
        fprintf(stderr, "bench_convert: %s\n", dsq_errmsg());
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- files */

static uint64_t read_all(const char *path)
{
    static char buf[1 << 20];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    uint64_t n = 0;
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0) n += (uint64_t)k;
    close(fd);
    return n;
}

/* Reads every file of a path (a file or one folder level) into the page
 * cache; returns the bytes of the weight files (.gguf/.safetensors). */
static uint64_t warm(const char *path)
{
    if (!dsq_is_dir(path)) return read_all(path);
    DIR *d = opendir(path);
    uint64_t total = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        uint64_t n = read_all(p);
        if (strstr(e->d_name, ".safetensors") && !strstr(e->d_name, ".json")) total += n;
    }
    if (d) closedir(d);
    return total;
}

static uint64_t largest_tensor(const char *path)
{
    dsq_checkpoint *c;
    if (dsq_checkpoint_open(path, &c) != DSQ_OK) die(path);
    uint64_t big = 0;
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        dsq_tensor t;
        if (dsq_checkpoint_tensor(c, i, &t) != DSQ_OK) die(path);
        if (t.nbytes > big) big = t.nbytes;
    }
    dsq_checkpoint_close(c);
    return big;
}

/* ---------------------------------------------------------------- synthetic model */

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        fprintf(stderr, "bench_convert: cannot write %s\n", p);
        exit(1);
    }
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    if (!dsq_exists(a)) return;
    char *argv[] = {"cp", a, b, NULL};
    if (run_child(argv).status) {
        fprintf(stderr, "bench_convert: cp %s failed\n", a);
        exit(1);
    }
}

/* Llama, hidden 2048, 5 layers, intermediate 8192, vocab 49152 (the real
 * tokenizer's), untied: embed and lm_head 403 MB each, MLP 67 MB each, about
 * 1.97 GB of F32 in all. Values from a cheap generator: content does not
 * change the conversion's speed. */
static void make_synthetic(const char *dir, const char *tokenizer_dir)
{
    enum { H = 2048, I = 8192, L = 5, NH = 16, NKV = 4, V = 49152 };
    if (mkdir(dir, 0755) && errno != EEXIST) {
        perror(dir);
        exit(1);
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n"
             "  \"max_position_embeddings\": 4096,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n"
             "  \"tie_word_embeddings\": false,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
             "  \"torch_dtype\": \"float32\"\n}\n",
             H, I, L, NH, NKV, V);
    write_file(dir, "config.json", cfg);
    copy_file(tokenizer_dir, dir, "tokenizer.json");
    copy_file(tokenizer_dir, dir, "tokenizer_config.json");
    copy_file(tokenizer_dir, dir, "special_tokens_map.json");

    struct {
        char name[96];
        int nd;
        int64_t shape[2];
    } ts[64];
    int n = 0;
#define T(nd_, a, b, ...)                                                                                              \
    do {                                                                                                               \
        snprintf(ts[n].name, sizeof ts[n].name, __VA_ARGS__);                                                          \
        ts[n].nd = nd_;                                                                                                \
        ts[n].shape[0] = a;                                                                                            \
        ts[n].shape[1] = b;                                                                                            \
        n++;                                                                                                           \
    } while (0)
    T(2, V, H, "model.embed_tokens.weight");
    for (int l = 0; l < L; l++) {
        T(1, H, 0, "model.layers.%d.input_layernorm.weight", l);
        T(2, H, H, "model.layers.%d.self_attn.q_proj.weight", l);
        T(2, NKV * (H / NH), H, "model.layers.%d.self_attn.k_proj.weight", l);
        T(2, NKV * (H / NH), H, "model.layers.%d.self_attn.v_proj.weight", l);
        T(2, H, H, "model.layers.%d.self_attn.o_proj.weight", l);
        T(1, H, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        T(2, I, H, "model.layers.%d.mlp.gate_proj.weight", l);
        T(2, I, H, "model.layers.%d.mlp.up_proj.weight", l);
        T(2, H, I, "model.layers.%d.mlp.down_proj.weight", l);
    }
    T(1, H, 0, "model.norm.weight");
    T(2, V, H, "lm_head.weight");
#undef T
    dsq_st_writer *w;
    if (dsq_st_writer_new(dir, "model", DSQ_CONVERT_DEFAULT_SHARD_BYTES, &w) != DSQ_OK) die(dir);
    if (dsq_st_writer_set_meta(w, "format", "pt") != DSQ_OK) die(dir);
    for (int i = 0; i < n; i++)
        if (dsq_st_writer_add(w, ts[i].name, DSQ_TYPE_F32, ts[i].nd, ts[i].shape) != DSQ_OK) die(ts[i].name);
    if (dsq_st_writer_begin(w) != DSQ_OK) die(dir);
    enum { CHUNK = 1 << 22 };
    float *buf = malloc(CHUNK * sizeof *buf);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        uint64_t ne = (uint64_t)ts[i].shape[0] * (ts[i].nd == 2 ? (uint64_t)ts[i].shape[1] : 1);
        for (uint64_t off = 0; off < ne; off += CHUNK) {
            uint64_t k = ne - off < CHUNK ? ne - off : CHUNK;
            for (uint64_t j = 0; j < k; j++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                buf[j] = (float)((int64_t)(s >> 40) - (1 << 23)) * (1.0f / (1 << 28));
            }
            if (dsq_st_writer_write(w, buf, k * sizeof *buf) != DSQ_OK) die(ts[i].name);
        }
    }
    free(buf);
    if (dsq_st_writer_finish(w) != DSQ_OK) die(dir);
    dsq_st_writer_free(w);
}

/* ---------------------------------------------------------------- cases */

typedef struct bench_case {
    const char *label;
    const char *in;
    const char *out;
    const char *dtype;
} bench_case;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int g_failures;

static void bench_one(const bench_case *c, int reps, const char *self)
{
    double conv[16], cp[16], rss = 0;
    uint64_t bytes = 0;
    char cp_out[4096];
    snprintf(cp_out, sizeof cp_out, "%s.cp", c->out);
    for (int r = 0; r < reps; r++) {
        (void)dsq_rmtree(c->out);
        (void)dsq_rmtree(cp_out);
        char *conv_argv[] = {(char *)self, "--run-convert", (char *)c->in, (char *)c->out, (char *)c->dtype, NULL};
        char *cp_argv[] = {"sh", "-c",
                           "cp -r -- \"$1\" \"$2\" && if [ -d \"$2\" ]; then sync -- \"$2\"/*; else sync -- \"$2\"; fi",
                           "sh", (char *)c->in, cp_out, NULL};
        /* Alternate which goes first, and flush every pending write (the
         * removals above, the previous command's output) before each, so
         * neither pays for the other's writeback. */
        run_result a = {0}, b = {0};
        for (int k = 0; k < 2; k++) {
            bool conv_turn = (k == 0) == (r % 2 == 0);
            bytes = warm(c->in);
            sync();
            run_result x = run_child(conv_turn ? conv_argv : cp_argv);
            if (x.status) {
                fprintf(stderr, "bench_convert: %s: %s failed\n", c->label, conv_turn ? "conversion" : "cp");
                exit(1);
            }
            if (conv_turn) a = x;
            else b = x;
        }
        conv[r] = a.secs;
        cp[r] = b.secs;
        if (a.rss_mb > rss) rss = a.rss_mb;
    }
    (void)dsq_rmtree(cp_out);
    double tc = median(conv, reps), tp = median(cp, reps);
    double big = (double)largest_tensor(c->in) / MB;
    double ratio = tp / tc;
    bool ok_speed = ratio >= 0.7, ok_rss = rss <= 64 + big;
    if (!ok_speed || !ok_rss) g_failures++;
    printf("| %-32s | %8.0f | %6.2f | %7.0f | %6.2f | %7.0f | %5.2fx%s | %7.1f | %7.1f%s |\n", c->label,
           (double)bytes / MB, tc, (double)bytes / MB / tc, tp, (double)bytes / MB / tp, ratio, ok_speed ? "" : " !",
           rss, 64 + big, ok_rss ? "" : " !");
    fflush(stdout);
}

static void header(void)
{
    printf("| %-32s | %8s | %6s | %7s | %6s | %7s | %6s | %7s | %7s |\n", "case", "input MB", "conv s", "MB/s",
           "cp s", "MB/s", "ratio", "RSS MB", "RSS max");
    printf("|%s|---------:|-------:|--------:|-------:|--------:|-------:|--------:|--------:|\n",
           "----------------------------------");
}

static char *default_model(void)
{
    const char *cache = getenv("DSQ_CACHE");
    char buf[4096];
    if (cache && cache[0])
        snprintf(buf, sizeof buf, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(buf, sizeof buf, "%s/.cache/dsquant/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return strdup(buf);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--run-convert")) return child_convert(argv[2], argv[3], argv[4]);
    char *model = default_model();
    const char *workdir = NULL;
    int reps = 3;
    bool synthetic = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            free(model);
            model = strdup(argv[++i]);
        } else if (!strcmp(argv[i], "--workdir") && i + 1 < argc) {
            workdir = argv[++i];
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 16) reps = 3;
        } else if (!strcmp(argv[i], "--no-synthetic")) {
            synthetic = false;
        } else {
            fprintf(stderr, "usage: bench_convert [--model GGUF] [--workdir DIR] [--reps N] [--no-synthetic]\n");
            return 2;
        }
    }
    if (!dsq_exists(model)) {
        fprintf(stderr, "bench_convert: %s not found; run scripts/fetch-default-model.sh\n", model);
        return 1;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        perror("/proc/self/exe");
        return 1;
    }
    self[sl] = '\0';
    char tmpl[2048];
    const char *base = workdir ? workdir : getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/var/tmp";
    snprintf(tmpl, sizeof tmpl, "%s/dsq-bench-XXXXXX", base);
    if (!mkdtemp(tmpl)) {
        perror(tmpl);
        return 1;
    }
    dsq_log_set_level(DSQ_LOG_WARN);
    char p[8][4096];
    snprintf(p[0], sizeof p[0], "%s/real-hf", tmpl);
    snprintf(p[1], sizeof p[1], "%s/real.gguf", tmpl);
    snprintf(p[2], sizeof p[2], "%s/real-hf16", tmpl);
    snprintf(p[3], sizeof p[3], "%s/syn-hf", tmpl);
    snprintf(p[4], sizeof p[4], "%s/syn.gguf", tmpl);
    snprintf(p[5], sizeof p[5], "%s/syn-hf16", tmpl);
    fprintf(stderr, "bench_convert: preparing %s (default model -> HF F32)\n", tmpl);
    if (dsq_convert_gguf_to_hf(model, p[0], DSQ_CONVERT_F32, true, 0) != DSQ_OK) die(model);

    printf("dsquant conversion benchmark: %d run(s) per case, median times; cp = cp -r + sync of the same input\n\n",
           reps);
    header();
    bench_case real_a = {"SmolLM2-135M HF F32 -> GGUF F32", p[0], p[1], "f32"};
    bench_one(&real_a, reps, self);
    bench_case real_b = {"SmolLM2-135M GGUF F32 -> HF F16", p[1], p[2], "f16"};
    bench_one(&real_b, reps, self);
    if (synthetic) {
        fprintf(stderr, "bench_convert: writing the synthetic ~2 GB checkpoint\n");
        make_synthetic(p[3], p[0]);
        bench_case syn_a = {"synthetic 2 GB HF F32 -> GGUF F32", p[3], p[4], "f32"};
        bench_one(&syn_a, reps, self);
        bench_case syn_b = {"synthetic 2 GB GGUF F32 -> HF F16", p[4], p[5], "f16"};
        bench_one(&syn_b, reps, self);
    }
    printf("\nratio = cp time / conversion time (target >= 0.70); RSS max = 64 MB + largest input tensor; "
           "'!' marks a missed target\n");
    (void)dsq_rmtree(tmpl);
    free(model);
    return g_failures ? 1 : 0;
}
