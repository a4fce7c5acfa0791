/* Shared pieces of the fuzz harnesses (tests/fuzz/fuzz.h). */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/tensor.h"
#include "core/log.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"

void dsq_fz_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("dsq-fuzz: FINDING: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

size_t dsq_fz_split(const uint8_t *data, size_t n, dsq_fz_part *parts, size_t max)
{
    const size_t sl = sizeof DSQ_FZ_SEP - 1;
    memset(parts, 0, max * sizeof *parts);
    size_t k = 0, at = 0;
    while (k + 1 < max) {
        const uint8_t *hit = n - at >= sl ? memmem(data + at, n - at, DSQ_FZ_SEP, sl) : NULL;
        if (!hit) break;
        parts[k].p = data + at;
        parts[k].n = (size_t)(hit - (data + at));
        k++;
        at = (size_t)(hit - data) + sl;
    }
    parts[k].p = data + at;
    parts[k].n = n - at;
    return k + 1;
}

static char g_dir[256];

static void remove_dir(void)
{
    if (g_dir[0]) dsq_rmtree(g_dir);
}

const char *dsq_fz_dir(void)
{
    if (g_dir[0]) return g_dir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(g_dir, sizeof g_dir, "%s/dsq-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        perror("dsq-fuzz: mkdtemp");
        exit(2);
    }
    atexit(remove_dir);
    return g_dir;
}

void dsq_fz_clear(void)
{
    const char *d = dsq_fz_dir();
    DIR *dir = opendir(d);
    if (!dir) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dir))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        dsq_rmtree(p);
    }
    closedir(dir);
}

const char *dsq_fz_put(int slot, const char *name, const void *data, size_t n)
{
    static char paths[8][512];
    char *p = paths[slot & 7];
    snprintf(p, sizeof paths[0], "%s/%s", dsq_fz_dir(), name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(p);
        exit(2);
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const uint8_t *)data + done, n - done);
        if (w <= 0) {
            perror(p);
            exit(2);
        }
        done += (size_t)w;
    }
    close(fd);
    return p;
}

void dsq_fz_failed(dsq_status s, const char *what)
{
    if (!dsq_is_error(s)) dsq_fz_die("%s: expected a failure, got status %d", what, (int)s);
    if (s >= DSQ_STATUS_COUNT) dsq_fz_die("%s: status %d is not a code", what, (int)s);
    const char *m = dsq_errmsg();
    if (!m[0]) dsq_fz_die("%s: failed (%s) without a message", what, dsq_status_name(s));
    for (const char *c = m; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            dsq_fz_die("%s: the message holds control byte 0x%02x: %s", what, (unsigned char)*c, m);
}

bool dsq_fz_ok(dsq_status s, const char *what)
{
    if (s == DSQ_OK) return true;
    dsq_fz_failed(s, what);
    return false;
}

static void no_log(dsq_log_level level, const char *msg, void *user) { (void)level, (void)msg, (void)user; }

/* The harnesses that need nothing more than quiet logging define no
 * LLVMFuzzerInitialize of their own; this one is theirs (libFuzzer and
 * tests/fuzz/replay.c both call it when it exists). */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    dsq_fz_quiet();
    return 0;
}

void dsq_fz_quiet(void)
{
    /* DSQ_FUZZ_VERBOSE=1 keeps the library's warnings, to see why an input is refused. */
    if (getenv("DSQ_FUZZ_VERBOSE")) return;
    dsq_log_set_sink(no_log, NULL);
}

/* ------------------------------------------------------------ tiny model */

#define TINY_HEADS 4
#define TINY_KV 2
#define MAX_LAYERS 16

typedef struct dims {
    int64_t dim, ffn, layers;
} dims;

/* Pieces merged pairwise in this order; each merge adds one token. */
static const char *const g_merges[][2] = {
    {"t", "h"}, {"th", "e"}, {"i", "n"}, {"a", "n"}, {"e", "r"}, {"o", "n"}, {"r", "e"}, {"a", "t"},
    {"e", "n"}, {"o", "r"}, {"i", "s"}, {"in", "g"}, {"e", "d"}, {"o", "u"}, {"a", "r"}, {"h", "e"},
    {"1", "2"}, {"12", "3"}, {"s", "t"}, {"l", "l"},
};
static const char *const g_special[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
#define N_MERGES (sizeof g_merges / sizeof g_merges[0])
#define N_SPECIAL (sizeof g_special / sizeof g_special[0])

static const char g_chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* GPT-2's byte-to-unicode table: printable Latin-1 bytes are themselves,
 * the rest are U+0100 onwards in byte order. */
static void byte_char(int b, char out[4])
{
    int cp = b;
    if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

typedef struct vocab {
    char *tok[512];
    float score[512];
    int32_t type[512];
    char *merge[64];
    int n, n_merge;
} vocab;

static void vocab_add(vocab *v, const char *s, float score, int32_t type)
{
    v->tok[v->n] = strdup(s);
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static void vocab_free(vocab *v)
{
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merge; i++) free(v->merge[i]);
}

static void build_vocab(vocab *v, bool spm)
{
    memset(v, 0, sizeof *v);
    if (spm) {
        vocab_add(v, "<unk>", 0, 2);
        vocab_add(v, "<s>", 0, 3);
        vocab_add(v, "</s>", 0, 3);
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            vocab_add(v, s, 0, 6);
        }
        vocab_add(v, "\xe2\x96\x81", -1, 1); /* U+2581, SentencePiece's space */
        for (int c = 'a'; c <= 'z'; c++) vocab_add(v, (char[]){(char)c, 0}, -2, 1);
    } else {
        for (int b = 0; b < 256; b++) {
            char s[4];
            byte_char(b, s);
            vocab_add(v, s, 0, 1);
        }
    }
    for (size_t m = 0; m < N_MERGES; m++) {
        char s[16];
        snprintf(s, sizeof s, "%s%s", g_merges[m][0], g_merges[m][1]);
        vocab_add(v, s, -3 - (float)m, 1);
        if (!spm) {
            snprintf(s, sizeof s, "%s %s", g_merges[m][0], g_merges[m][1]);
            v->merge[v->n_merge++] = strdup(s);
        }
    }
    if (!spm)
        for (size_t i = 0; i < N_SPECIAL; i++) vocab_add(v, g_special[i], 0, 3);
    else
        for (size_t i = 1; i < N_SPECIAL; i++) vocab_add(v, g_special[i], 0, 3);
}

static int32_t vocab_find(const vocab *v, const char *s)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], s)) return i;
    return -1;
}

static dsq_status set_tokenizer(dsq_gguf_writer *w, const vocab *v, const char *tok_model, const char *pre)
{
    bool spm = !strcmp(tok_model, "llama");
    DSQ_TRY(dsq_gguf_set_str(w, "tokenizer.ggml.model", tok_model));
    if (pre) DSQ_TRY(dsq_gguf_set_str(w, "tokenizer.ggml.pre", pre));
    DSQ_TRY(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, NULL, (uint64_t)v->n));
    DSQ_TRY(dsq_gguf_set_arr(w, "tokenizer.ggml.token_type", DSQ_GGUF_I32, v->type, (uint64_t)v->n));
    if (spm) {
        DSQ_TRY(dsq_gguf_set_arr(w, "tokenizer.ggml.scores", DSQ_GGUF_F32, v->score, (uint64_t)v->n));
        DSQ_TRY(dsq_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
        DSQ_TRY(dsq_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    } else {
        DSQ_TRY(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", (const char *const *)v->merge, NULL,
                                     (uint64_t)v->n_merge));
        DSQ_TRY(dsq_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)vocab_find(v, "<|endoftext|>")));
    }
    DSQ_TRY(dsq_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)vocab_find(v, "<|im_end|>")));
    DSQ_TRY(dsq_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", spm));
    return dsq_gguf_set_str(w, "tokenizer.chat_template", g_chatml);
}

static void tiny_arch(dsq_arch *a, int64_t vocab_n, const dims *d)
{
    memset(a, 0, sizeof *a);
    a->family = DSQ_ARCH_LLAMA;
    snprintf(a->hf_architecture, sizeof a->hf_architecture, "LlamaForCausalLM");
    snprintf(a->model_type, sizeof a->model_type, "llama");
    a->hidden_size = d->dim;
    a->intermediate_size = d->ffn;
    a->n_layers = d->layers;
    a->n_heads = TINY_HEADS;
    a->n_kv_heads = TINY_KV;
    a->head_dim = d->dim / TINY_HEADS;
    a->vocab_size = vocab_n;
    a->max_position_embeddings = 256;
    a->rms_norm_eps = 1e-5;
    a->rope_theta = 10000;
    a->bos_token_id = -1;
    a->eos_token_id = -1;
}

typedef struct tdesc {
    char name[64];
    int64_t rows, cols; /* cols 0: a vector of rows */
} tdesc;

static int tiny_tensors(tdesc *t, int64_t vocab_n, const dims *d)
{
    int n = 0;
    const int64_t D = d->dim, F = d->ffn, kv = TINY_KV * (D / TINY_HEADS);
    t[n++] = (tdesc){"token_embd.weight", vocab_n, D};
    t[n++] = (tdesc){"output_norm.weight", D, 0};
    t[n++] = (tdesc){"output.weight", vocab_n, D};
    for (int l = 0; l < d->layers; l++) {
        /* -1: D, -2: F, -3: kv */
        static const struct {
            const char *stem;
            int rows, cols;
        } blk[] = {
            {"attn_norm", -1, 0},   {"attn_q", -1, -1},   {"attn_k", -3, -1}, {"attn_v", -3, -1}, {"attn_output", -1, -1},
            {"ffn_norm", -1, 0},    {"ffn_gate", -2, -1}, {"ffn_up", -2, -1}, {"ffn_down", -1, -2},
        };
        for (size_t b = 0; b < sizeof blk / sizeof blk[0]; b++) {
            const int64_t size_of[4] = {0, D, F, kv};
            snprintf(t[n].name, sizeof t[n].name, "blk.%d.%s.weight", l, blk[b].stem);
            t[n].rows = size_of[-blk[b].rows];
            t[n].cols = blk[b].cols ? size_of[-blk[b].cols] : 0;
            n++;
        }
    }
    return n;
}

static dsq_status write_weights(dsq_gguf_writer *w, const tdesc *t, int n)
{
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        int64_t count = t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (int64_t j = 0; j < count; j++) {
            float x = 1.0f;
            if (t[i].cols) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                x = ((float)(state >> 40) / (float)(1u << 24) - 0.5f) * 0.2f;
            }
            DSQ_TRY(dsq_gguf_writer_write(w, &x, sizeof x));
        }
    }
    return DSQ_OK;
}

dsq_status dsq_fz_tiny_gguf(const char *path, const char *tok_model, const char *pre, bool with_weights)
{
    return dsq_fz_llama_gguf(path, tok_model, pre, with_weights ? 32 : 0, 64, 2);
}

dsq_status dsq_fz_llama_gguf(const char *path, const char *tok_model, const char *pre, int64_t dim, int64_t ffn,
                             int64_t layers)
{
    if (layers > MAX_LAYERS) return dsq_fail(DSQ_ERR_ARG, "at most %d layers", MAX_LAYERS);
    bool with_weights = dim > 0;
    dims d = {with_weights ? dim : 32, ffn, layers};
    vocab v;
    build_vocab(&v, !strcmp(tok_model, "llama"));
    dsq_gguf_writer *w = NULL;
    dsq_status s = dsq_gguf_writer_new(&w);
    dsq_arch a;
    tiny_arch(&a, v.n, &d);
    if (s == DSQ_OK) s = dsq_arch_to_gguf(&a, w);
    if (s == DSQ_OK) s = dsq_gguf_set_str(w, "general.name", "dsq-fuzz-tiny");
    if (s == DSQ_OK) s = set_tokenizer(w, &v, tok_model, pre);
    tdesc t[3 + 9 * MAX_LAYERS];
    int n = with_weights ? tiny_tensors(t, v.n, &d) : 0;
    for (int i = 0; s == DSQ_OK && i < n; i++) {
        int64_t shape[2] = {t[i].rows, t[i].cols};
        s = dsq_gguf_add_tensor(w, t[i].name, DSQ_TYPE_F32, t[i].cols ? 2 : 1, shape);
    }
    if (s == DSQ_OK) s = dsq_gguf_writer_begin(w, path, true);
    if (s == DSQ_OK) s = write_weights(w, t, n);
    if (s == DSQ_OK) s = dsq_gguf_writer_finish(w);
    dsq_gguf_writer_free(w);
    vocab_free(&v);
    return s;
}

void dsq_fz_check_view(const dsq_tensor *t, const void *base, size_t size, const char *what)
{
    uint64_t n, bytes;
    if (t->n_dims < 0 || t->n_dims > DSQ_MAX_DIMS) dsq_fz_die("%s: %d dimensions", what, t->n_dims);
    if (!dsq_mul_dims(t->shape, t->n_dims, &n)) dsq_fz_die("%s: the shape's product overflows", what);
    if (dsq_type_nbytes(t->type, n, &bytes) != DSQ_OK) dsq_fz_die("%s: no byte size: %s", what, dsq_errmsg());
    if (bytes != t->nbytes)
        dsq_fz_die("%s: %llu bytes for a shape of %llu bytes", what, (unsigned long long)t->nbytes,
                   (unsigned long long)bytes);
    if (!t->nbytes) return;
    const uint8_t *p = t->data, *b = base;
    if (!p || p < b || (uint64_t)(p - b) > size || t->nbytes > size - (uint64_t)(p - b))
        dsq_fz_die("%s: its bytes lie outside the file", what);
    volatile uint8_t sink = p[0];
    sink = p[t->nbytes - 1];
    (void)sink;
}
