/* Scale, measured: one full-width DeepSeek-V3 MoE layer (hidden 7168, MLA
 * with q_lora 1536 / kv_lora 512, 128 heads, 256 routed experts of 2048 and
 * a shared expert, FP8 E4M3 with 128 x 128 block scales as the release
 * stores it: about 11 GB for 256 experts), written here, then
 *   convert  FP8 -> BF16 folder (formats/hf_cast.c) against `cp -r` of the
 *            same folder (both fsync), input bytes per second, ratio;
 *   gptq     GPTQ 4-bit groups of 128, expert by expert, straight from the FP8
 *            weights into a compressed-tensors folder, on random calibration
 *            tokens (content does not change time or memory);
 *   awq      AWQ the same way (zero point, groups of 128): the MLP input
 *            group's search runs the MoE expert by expert for each of its 20
 *            candidates;
 * each in a child process (this program re-executed) whose peak RSS comes
 * from wait4. Targets (issue 12): peak RSS under 8 GiB while quantizing the
 * layer; conversion >= 0.7x cp. The folder has one decoder layer, a 1024-token
 * vocabulary and no tokenizer (the library is called directly); the 61-layer
 * figure is layer time x 61.
 *
 * usage: bench_deepseek_layer --workdir DIR [--experts N] [--tokens T]
 *        [--stage all|write|convert|gptq|awq] [--keep]
 * N (default 256) experts; with less disk, a smaller N measures the same
 * per-expert costs (memory stays one expert). T calibration tokens (2048). */
#include <errno.h>
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

enum { HID = 7168, QL = 1536, KVL = 512, NOPE = 128, ROPE = 64, VH = 128, HEADS = 128, MOE = 2048, VOCAB = 1024 };

static void die(const char *what)
{
    fprintf(stderr, "bench_deepseek_layer: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

/* ---------------------------------------------------------------- the layer */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint8_t fp8_code(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    uint8_t c = (uint8_t)(g_rng >> 32);
    return (c & 0x7f) == 0x7f ? (uint8_t)(c - 1) : c; /* no NaN */
}

typedef struct wt {
    char name[128];
    int64_t rows, cols;
    bool fp8;
} wt;

static int add(wt *t, int n, int64_t rows, int64_t cols, bool fp8, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int add(wt *t, int n, int64_t rows, int64_t cols, bool fp8, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t[n].name, sizeof t[n].name, fmt, ap);
    va_end(ap);
    t[n].rows = rows, t[n].cols = cols, t[n].fp8 = fp8;
    return n + 1;
}

static int plan(wt *t, int experts)
{
    int n = 0;
    const char *p = "model.layers.0.";
    n = add(t, n, VOCAB, HID, false, "model.embed_tokens.weight");
    n = add(t, n, HID, 0, false, "%sinput_layernorm.weight", p);
    n = add(t, n, HID, 0, false, "%spost_attention_layernorm.weight", p);
    n = add(t, n, QL, 0, false, "%sself_attn.q_a_layernorm.weight", p);
    n = add(t, n, KVL, 0, false, "%sself_attn.kv_a_layernorm.weight", p);
    n = add(t, n, QL, HID, true, "%sself_attn.q_a_proj", p);
    n = add(t, n, HEADS * (NOPE + ROPE), QL, true, "%sself_attn.q_b_proj", p);
    n = add(t, n, KVL + ROPE, HID, true, "%sself_attn.kv_a_proj_with_mqa", p);
    n = add(t, n, HEADS * (NOPE + VH), KVL, true, "%sself_attn.kv_b_proj", p);
    n = add(t, n, HID, HEADS * VH, true, "%sself_attn.o_proj", p);
    n = add(t, n, experts, HID, false, "%smlp.gate.weight", p);
    n = add(t, n, experts, 0, false, "%smlp.gate.e_score_correction_bias", p);
    n = add(t, n, MOE, HID, true, "%smlp.shared_experts.gate_proj", p);
    n = add(t, n, MOE, HID, true, "%smlp.shared_experts.up_proj", p);
    n = add(t, n, HID, MOE, true, "%smlp.shared_experts.down_proj", p);
    for (int e = 0; e < experts; e++) {
        n = add(t, n, MOE, HID, true, "%smlp.experts.%d.gate_proj", p, e);
        n = add(t, n, MOE, HID, true, "%smlp.experts.%d.up_proj", p, e);
        n = add(t, n, HID, MOE, true, "%smlp.experts.%d.down_proj", p, e);
    }
    n = add(t, n, HID, 0, false, "model.norm.weight");
    n = add(t, n, VOCAB, HID, false, "lm_head.weight");
    return n;
}

static void write_config(const char *dir, int experts)
{
    char path[4096], cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"hidden_size\": %d,"
             " \"intermediate_size\": 18432, \"moe_intermediate_size\": %d, \"num_hidden_layers\": 1,"
             " \"num_nextn_predict_layers\": 0, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
             " \"n_shared_experts\": 1, \"n_routed_experts\": %d, \"routed_scaling_factor\": 2.5, \"kv_lora_rank\": %d,"
             " \"q_lora_rank\": %d, \"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"qk_nope_head_dim\": %d,"
             " \"topk_method\": \"noaux_tc\", \"n_group\": %d, \"topk_group\": %d, \"num_experts_per_tok\": 8,"
             " \"moe_layer_freq\": 1, \"first_k_dense_replace\": 0, \"norm_topk_prob\": true, \"scoring_func\":"
             " \"sigmoid\", \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,"
             " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
             " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
             " \"tie_word_embeddings\": false, \"bos_token_id\": 0, \"eos_token_id\": 1, \"vocab_size\": %d,"
             " \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\":"
             " \"fp8\", \"weight_block_size\": [128, 128]}, \"torch_dtype\": \"bfloat16\"}\n",
             HID, MOE, HEADS, HEADS, experts, KVL, QL, ROPE, VH, NOPE, experts >= 64 ? 8 : 1, experts >= 64 ? 4 : 1,
             VOCAB);
    if (dsq_path_join(path, sizeof path, dir, "config.json") != DSQ_OK) die(dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(cfg, f) < 0 || fclose(f)) die(path);
}

static dsq_status write_fp8(dsq_st_writer *w, const wt *t, uint8_t *buf)
{
    int64_t sr = (t->rows + 127) / 128, sc = (t->cols + 127) / 128;
    for (int64_t r0 = 0; r0 < t->rows; r0 += 128) {
        int64_t nr = t->rows - r0 < 128 ? t->rows - r0 : 128;
        for (int64_t i = 0; i < nr * t->cols; i++) buf[i] = fp8_code();
        DSQ_TRY(dsq_st_writer_write(w, buf, (uint64_t)(nr * t->cols)));
    }
    float *s = (float *)buf; /* random codes reach +-448: weights within +-0.25 */
    for (int64_t i = 0; i < sr * sc; i++) s[i] = 1.0f / (448.0f * 4.0f);
    return dsq_st_writer_write(w, s, (uint64_t)(sr * sc) * sizeof(float));
}

static dsq_status write_bf16(dsq_st_writer *w, const wt *t, uint8_t *buf)
{
    int64_t n = t->cols ? t->rows * t->cols : t->rows;
    uint16_t *v = (uint16_t *)buf;
    bool norm = !t->cols && !strstr(t->name, "bias");
    for (int64_t i = 0; i < n; i++)
        v[i] = dsq_f32_to_bf16(norm ? 1.0f : ((float)(fp8_code() & 0x7f) - 63.0f) / 64.0f / 30.0f);
    return dsq_st_writer_write(w, v, (uint64_t)n * 2);
}

static void stage_write(const char *dir, int experts)
{
    if (mkdir(dir, 0755) && errno != EEXIST) die(dir);
    write_config(dir, experts);
    wt *t = malloc((size_t)(20 + 3 * experts) * sizeof *t);
    uint8_t *buf = malloc((size_t)128 * HEADS * VH * 2 + (size_t)VOCAB * HID * 2);
    if (!t || !buf) die("out of memory");
    int n = plan(t, experts);
    dsq_st_writer *w;
    if (dsq_st_writer_new(dir, "model", DSQ_CONVERT_DEFAULT_SHARD_BYTES, &w) != DSQ_OK) die(dir);
    for (int i = 0; i < n; i++) {
        int64_t shape[2] = {t[i].rows, t[i].cols};
        int nd = t[i].cols ? 2 : 1;
        char name[160];
        if (t[i].fp8) {
            snprintf(name, sizeof name, "%s.weight", t[i].name);
            if (dsq_st_writer_add(w, name, DSQ_TYPE_F8_E4M3, 2, shape) != DSQ_OK) die(name);
            int64_t ss[2] = {(t[i].rows + 127) / 128, (t[i].cols + 127) / 128};
            snprintf(name, sizeof name, "%s.weight_scale_inv", t[i].name);
            if (dsq_st_writer_add(w, name, DSQ_TYPE_F32, 2, ss) != DSQ_OK) die(name);
        } else {
            if (dsq_st_writer_add(w, t[i].name, DSQ_TYPE_BF16, nd, shape) != DSQ_OK) die(t[i].name);
        }
    }
    if (dsq_st_writer_begin(w) != DSQ_OK) die(dir);
    for (int i = 0; i < n; i++)
        if ((t[i].fp8 ? write_fp8(w, &t[i], buf) : write_bf16(w, &t[i], buf)) != DSQ_OK) die(t[i].name);
    if (dsq_st_writer_finish(w) != DSQ_OK) die(dir);
    dsq_st_writer_free(w);
    free(t);
    free(buf);
}

/* ---------------------------------------------------------------- stages */

static void stage_convert(const char *in, const char *out)
{
    dsq_log_set_level(DSQ_LOG_WARN);
    if (dsq_convert(in, out, DSQ_CONVERT_BF16, true, 0) != DSQ_OK) die(in);
}

/* GPTQ or AWQ (AutoAWQ's zero-point 4-bit groups of 128) into compressed-tensors. */
static void stage_quant(const char *in, const char *out, int tokens, const dsq_method *method)
{
    if (getenv("DSQ_BENCH_DEBUG")) dsq_log_set_level(DSQ_LOG_DEBUG);
    dsq_model *m;
    if (dsq_model_open(in, &m) != DSQ_OK) die(in);
    dsq_calib_set c = {0};
    c.seqlen = 512;
    c.n_samples = tokens / c.seqlen > 0 ? tokens / c.seqlen : 1;
    c.tokens = malloc((size_t)c.n_samples * (size_t)c.seqlen * sizeof *c.tokens);
    if (!c.tokens) die("out of memory");
    for (int i = 0; i < c.n_samples * c.seqlen; i++) c.tokens[i] = (int32_t)(fp8_code() * 4 % VOCAB);
    dsq_seq_opts o = dsq_seq_default_opts();
    bool awq = method == &dsq_method_awq;
    o.method = method;
    o.q.bits = 4, o.q.group_size = 128, o.q.sym = !awq;
    if (awq) o.awq.q = o.q;
    o.bf16 = dsq_gemm_bf16_preferred();
    dsq_int_spec spec = {.format = DSQ_INT_FORMAT_CT, .bits = 4, .group = 128, .sym = !awq, .damp = 0.01};
    dsq_outdir *d;
    dsq_seq_report rep;
    if (dsq_outdir_open(out, true, &d) != DSQ_OK) die(out);
    if (dsq_int_export(m, &c, &o, &spec, d, &rep, NULL) != DSQ_OK) die(in);
    if (dsq_outdir_commit(d) != DSQ_OK) die(out);
    printf("%s: %lld linears, %.1f s, experts' tokens min %lld median %lld max %lld\n", method->name,
           (long long)rep.n_quantized, rep.seconds, (long long)rep.moe_tok_min, (long long)rep.moe_tok_median,
           (long long)rep.moe_tok_max);
    free(c.tokens);
    dsq_model_close(m);
}

/* ---------------------------------------------------------------- the parent */

typedef struct run_result {
    double secs, rss_mb;
    int status;
} run_result;

static run_result run_child(char *const argv[])
{
    run_result r = {0};
    double t0 = dsq_now_s();
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) die("wait4");
    r.secs = dsq_now_s() - t0;
    r.rss_mb = (double)ru.ru_maxrss * 1024.0 / 1048576.0;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return r;
}

static uint64_t dir_bytes(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "du -sb -- '%s' | cut -f1", dir);
    FILE *p = popen(cmd, "r");
    unsigned long long n = 0;
    if (!p || fscanf(p, "%llu", &n) != 1) n = 0;
    if (p) pclose(p);
    return n;
}

static void warm(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cat -- '%s'/*.safetensors > /dev/null", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_deepseek_layer: warming %s failed\n", dir);
    sync();
}

int main(int argc, char **argv)
{
    const char *work = NULL, *stage = "all";
    int experts = 256, tokens = 2048;
    bool keep = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            work = argv[++i];
        else if (!strcmp(argv[i], "--experts") && i + 1 < argc)
            experts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stage") && i + 1 < argc)
            stage = argv[++i];
        else if (!strcmp(argv[i], "--keep"))
            keep = true;
        else {
            fprintf(stderr,
                    "usage: %s --workdir DIR [--experts N] [--tokens T] [--stage all|write|convert|gptq|awq] "
                    "[--keep]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!work || experts < 8 || experts % 8) {
        fprintf(stderr, "bench_deepseek_layer: --workdir is required; --experts a multiple of 8\n");
        return 2;
    }
    char fp8[4096], bf16[4096], cpd[4096], gq[4096];
    snprintf(fp8, sizeof fp8, "%s/fp8", work);
    snprintf(bf16, sizeof bf16, "%s/bf16", work);
    snprintf(cpd, sizeof cpd, "%s/cp", work);
    snprintf(gq, sizeof gq, "%s/gptq", work);
    if (!strcmp(stage, "write")) return stage_write(fp8, experts), 0;
    if (!strcmp(stage, "convert")) return stage_convert(fp8, bf16), 0;
    if (!strcmp(stage, "gptq")) return stage_quant(fp8, gq, tokens, &dsq_method_gptq), 0;
    if (!strcmp(stage, "awq")) return stage_quant(fp8, gq, tokens, &dsq_method_awq), 0;
    if (mkdir(work, 0755) && errno != EEXIST) die(work);
    char ne[16], nt[16];
    snprintf(ne, sizeof ne, "%d", experts);
    snprintf(nt, sizeof nt, "%d", tokens);
    char cpu[128];
    dsq_cpu_model(cpu, sizeof cpu);
    printf("CPU: %s, %d threads; %d experts\n", cpu, dsq_cpu_threads(), experts);
    char *w[] = {argv[0], "--workdir", (char *)work, "--experts", ne, "--stage", "write", NULL};
    run_result rw = run_child(w);
    if (rw.status) return 1;
    uint64_t in = dir_bytes(fp8);
    printf("write: %.2f GB in %.1f s\n", (double)in / 1e9, rw.secs);
    warm(fp8);
    char *c[] = {argv[0], "--workdir", (char *)work, "--stage", "convert", NULL};
    run_result rc = run_child(c);
    if (rc.status) return 1;
    char cpcmd[16800];
    snprintf(cpcmd, sizeof cpcmd, "rm -rf -- '%s' && cp -r -- '%s' '%s' && sync -- '%s'/*", cpd, fp8, cpd, cpd);
    warm(fp8);
    char *cp[] = {"sh", "-c", cpcmd, NULL};
    run_result rp = run_child(cp);
    uint64_t out = dir_bytes(bf16);
    printf("convert fp8 -> bf16: %.1f s, %.0f MB/s in (%.2f GB out), peak RSS %.0f MiB; cp -r: %.1f s, %.0f MB/s; "
           "ratio %.2f\n",
           rc.secs, (double)in / rc.secs / 1e6, (double)out / 1e9, rc.rss_mb, rp.secs, (double)in / rp.secs / 1e6,
           rp.secs / rc.secs);
    snprintf(cpcmd, sizeof cpcmd, "rm -rf -- '%s' '%s'", cpd, bf16);
    if (system(cpcmd) != 0) fprintf(stderr, "bench_deepseek_layer: cleaning up failed\n");
    char *g[] = {argv[0], "--workdir", (char *)work, "--tokens", nt, "--stage", "gptq", NULL};
    run_result rg = run_child(g);
    if (rg.status) return 1;
    printf("gptq 4-bit g128, %d tokens: %.1f s for the layer (x61: %.1f h), peak RSS %.0f MiB (target 8192)\n", tokens,
           rg.secs, rg.secs * 61 / 3600, rg.rss_mb);
    char *aw[] = {argv[0], "--workdir", (char *)work, "--tokens", nt, "--stage", "awq", NULL};
    run_result ra = run_child(aw);
    if (ra.status) return 1;
    printf(
        "awq 4-bit g128 zero point, %d tokens: %.1f s for the layer (x61: %.1f h), peak RSS %.0f MiB (target 8192)\n",
        tokens, ra.secs, ra.secs * 61 / 3600, ra.rss_mb);
    if (!keep) {
        snprintf(cpcmd, sizeof cpcmd, "rm -rf -- '%s' '%s'", fp8, gq);
        if (system(cpcmd) != 0) fprintf(stderr, "bench_deepseek_layer: cleaning up failed\n");
    }
    return 0;
}
