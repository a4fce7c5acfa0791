/* Fault injection against the command line (tests/fault/fault_shim.c,
 * preloaded into dsquant), on a tiny two-layer Llama made here:
 *
 * - a disk that fills up during every writer (GGUF from convert and from
 *   the quantizer and from GPTQ into blocks, a safetensors Hugging Face folder, an INT artifact
 *   folder, KLD base logits, an importance matrix): at byte limits spread
 *   over each output's size the command exits 1 with one line naming the
 *   output and ENOSPC, and leaves neither the output nor a temporary; at
 *   the full size it succeeds (so the limits were really inside the write);
 * - short reads and EIO from inputs read with read() (config.json,
 *   tokenizer.json, text data; the GGUF sniff): short reads change
 *   nothing, EIO is a one-line error;
 * - an input that cannot be mapped: a one-line error;
 * - an input truncated while mapped (SIGBUS under the mapping): one line
 *   naming the input, exit 1, no output and no temporary left;
 * - SIGKILL at random points of a long convert and a long quantization:
 *   the destination is either absent or complete (byte-identical to an
 *   undisturbed run), never partial, and a rerun succeeds;
 * - a dataset download (dsq_download_file, file://) into a disk that
 *   fills (RLIMIT_FSIZE in a child): an error and no file.
 *
 * The shim is an LD_PRELOAD library; sanitizer builds accept it with
 * verify_asan_link_order=0. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/fileio.h"
#include "core/status.h"
#include "datasets/download.h"
#include "formats/gguf.h"
#include "tests/fuzz/fuzz.h"
#include "tests/helpers/testutil.h"

static char *g_root, *g_model, *g_hf, *g_text;
static char *g_big, *g_big_hf; /* about 50 MB: a write long enough to kill half-way */

static char *path_of(const char *name)
{
    char *p = malloc(strlen(g_root) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_root, name);
    return p;
}

/* Runs `dsquant ARGS` with the shim and env (space-separated VAR=value
 * words); returns the exit status (128 + signal when killed). */
static int run(const char *env, const char *args, char *err, size_t cap)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "env LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 OMP_NUM_THREADS=1 "
             "OMP_WAIT_POLICY=passive DSQ_OFFLINE=1 %s %s %s",
             DSQ_FAULT_SHIM, env ? env : "", DSQ_BINARY, args);
    return dsq_test_run(cmd, err, cap);
}

/* The number of entries in g_root that start with prefix (temporaries start with "."). */
static int count_like(const char *prefix)
{
    DIR *d = opendir(g_root);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

static void one_line(const char *err, const char *want1, const char *want2)
{
    const char *nl = strchr(err, '\n');
    /* warnings may come first; the error is the last line */
    const char *last = err, *p = err;
    while ((p = strstr(p, "dsquant: error: "))) last = p++;
    if (strncmp(last, "dsquant: error: ", 16)) fail_msg("no error line in: %s", err);
    nl = strchr(last, '\n');
    if (nl && nl[1]) fail_msg("more after the error line: %s", err);
    if (want1 && !strstr(last, want1)) fail_msg("error line lacks \"%s\": %s", want1, last);
    if (want2 && !strstr(last, want2)) fail_msg("error line lacks \"%s\": %s", want2, last);
}

/* ------------------------------------------------------------ fixture */

static int setup(void **state)
{
    (void)state;
    g_root = dsq_test_mkdtemp();
    g_model = path_of("tiny.gguf");
    if (dsq_fz_tiny_gguf(g_model, "gpt2", "smollm", true) != DSQ_OK) return -1;
    g_hf = path_of("tiny-hf");
    char err[4096];
    char args[2048];
    snprintf(args, sizeof args, "convert %s -o %s", g_model, g_hf);
    if (run(NULL, args, err, sizeof err) != 0) {
        fprintf(stderr, "setup convert failed: %s\n", err);
        return -1;
    }
    g_big = path_of("big.gguf");
    g_big_hf = path_of("big-hf");
    if (dsq_fz_llama_gguf(g_big, "gpt2", "smollm", 512, 1536, 4) != DSQ_OK) return -1;
    snprintf(args, sizeof args, "convert %s -o %s", g_big, g_big_hf);
    if (run(NULL, args, err, sizeof err) != 0) {
        fprintf(stderr, "setup convert failed: %s\n", err);
        return -1;
    }
    g_text = path_of("text.txt");
    FILE *f = fopen(g_text, "w");
    for (int i = 0; i < 60; i++) fprintf(f, "the theory of everything is in the tokens %d and the rest.\n", i);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dsq_test_rmtmp(g_root);
    free(g_model), free(g_hf), free(g_text), free(g_big), free(g_big_hf);
    return 0;
}

/* ------------------------------------------------------------ disk full */

typedef struct writer_case {
    const char *name;   /* the output's name under g_root */
    const char *fmt;    /* arguments; %1$s the GGUF, %2$s the HF folder, %3$s the text, %4$s the output */
} writer_case;

static const writer_case g_writers[] = {
    {"w-hf", "convert %1$s -o %4$s"},
    {"w.gguf", "convert %2$s -o %4$s"},
    {"w-q8.gguf", "gguf %1$s -o %4$s --type Q8_0"},
    /* GPTQ into blocks: the spill file's writes and the file's, on the same disk */
    {"w-gptq.gguf", "gguf %1$s -o %4$s --type Q8_0 --method gptq --calib %3$s --n-samples 4 --seqlen 32"},
    {"w-awq", "rtn %2$s -o %4$s --format awq --zero-point --group 32 --grid minmax"},
    {"w.logits", "kld %1$s --data %3$s --save-logits %4$s --ctx 32"},
    {"w.imatrix", "imatrix %1$s --data %3$s -o %4$s --ctx 32"},
};

static void args_for(const writer_case *w, char *buf, size_t cap, const char *out)
{
    snprintf(buf, cap, w->fmt, g_model, g_hf, g_text, out);
}

static void test_disk_full(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof g_writers / sizeof g_writers[0]; c++) {
        const writer_case *w = &g_writers[c];
        char *out = path_of(w->name), *count = path_of("count.txt");
        char args[4096], env[1024], err[8192];
        args_for(w, args, sizeof args, out);
        /* an undisturbed run, counting the bytes the job writes */
        snprintf(env, sizeof env, "DSQ_FAULT_COUNT=%s", count);
        if (run(env, args, err, sizeof err) != 0) fail_msg("%s: %s", w->name, err);
        FILE *f = fopen(count, "r");
        unsigned long long total = 0;
        assert_true(f && fscanf(f, "%llu", &total) == 1);
        fclose(f);
        assert_true(total > 0);
        dsq_rmtree(out);
        const unsigned long long limits[] = {0, 1, 100, total / 3, total / 2, total - 1};
        for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
            snprintf(env, sizeof env, "DSQ_FAULT_WRITE_LIMIT=%llu", limits[k]);
            int rc = run(env, args, err, sizeof err);
            if (rc != 1) fail_msg("%s at %llu of %llu bytes: exit %d: %s", w->name, limits[k], total, rc, err);
            one_line(err, "No space left on device", NULL);
            assert_false(dsq_exists(out));
            if (count_like(".")) fail_msg("%s at %llu bytes: a temporary was left", w->name, limits[k]);
        }
        snprintf(env, sizeof env, "DSQ_FAULT_WRITE_LIMIT=%llu", total);
        if (run(env, args, err, sizeof err) != 0) fail_msg("%s at its full %llu bytes: %s", w->name, total, err);
        assert_true(dsq_exists(out));
        dsq_rmtree(out);
        unlink(count);
        free(out), free(count);
    }
}

/* ------------------------------------------------------------ reads */

static void test_short_reads_and_eio(void **state)
{
    (void)state;
    char *out = path_of("r.gguf");
    char args[4096], err[8192];
    /* the HF folder's config.json and tokenizer.json come through read() */
    snprintf(args, sizeof args, "convert %s -o %s", g_hf, out);
    if (run("DSQ_FAULT_READ=short", args, err, sizeof err) != 0) fail_msg("short reads: %s", err);
    assert_true(dsq_exists(out));
    dsq_rmtree(out);
    int rc = run("DSQ_FAULT_READ=eio:10", args, err, sizeof err);
    assert_int_equal(rc, 1);
    one_line(err, "Input/output error", NULL);
    assert_false(dsq_exists(out));
    /* the GGUF magic itself read in pieces: still a GGUF */
    snprintf(args, sizeof args, "info %s", g_model);
    if (run("DSQ_FAULT_READ=short", args, err, sizeof err) != 0) fail_msg("info with short reads: %s", err);
    /* an input that cannot be mapped */
    rc = run("DSQ_FAULT_MMAP=eio", args, err, sizeof err);
    assert_int_equal(rc, 1);
    one_line(err, g_model, "cannot map");
    if (count_like(".")) fail_msg("a temporary was left");
    free(out);
}

/* A copy of the tiny model, truncated to half by the shim as soon as it is
 * mapped: the header (first half) parses, and the first touch of a tensor
 * in the lost half is a SIGBUS. */
static void test_truncated_while_mapped(void **state)
{
    (void)state;
    char *victim = path_of("victim.gguf"), *out = path_of("t-q8.gguf");
    char args[4096], env[4096], err[8192], *data = NULL;
    size_t n = 0;
    assert_int_equal(dsq_read_file(g_model, 1u << 30, &data, &n), DSQ_OK);
    FILE *f = fopen(victim, "wb");
    assert_true(f && fwrite(data, 1, n, f) == n);
    fclose(f);
    free(data);
    snprintf(args, sizeof args, "gguf %s -o %s --type Q8_0", victim, out);
    snprintf(env, sizeof env, "DSQ_FAULT_TRUNCATE=%s", victim);
    int rc = run(env, args, err, sizeof err);
    if (rc != 1) fail_msg("exit %d: %s", rc, err);
    one_line(err, victim, "SIGBUS");
    assert_false(dsq_exists(out));
    if (count_like(".")) fail_msg("a temporary was left");
    unlink(victim);
    free(victim), free(out);
}

/* ------------------------------------------------------------ SIGKILL */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pid_t spawn(const char *args)
{
    pid_t pid = fork();
    if (pid == 0) {
        char cmd[16384];
        snprintf(cmd, sizeof cmd,
                 "exec env LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 OMP_NUM_THREADS=1 "
                 "DSQ_FAULT_WRITE_DELAY_US=20000 %s %s >/dev/null 2>&1",
                 DSQ_FAULT_SHIM, DSQ_BINARY, args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static bool same_tree(const char *a, const char *b)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null 2>&1", a, b);
    return system(cmd) == 0;
}

static void kill_case(const char *fmt, const char *name)
{
    char *ref = path_of("k-ref"), *out = path_of(name), args[4096], err[8192];
    snprintf(args, sizeof args, fmt, g_big, g_big_hf, ref);
    double t0 = now_s();
    pid_t pid = spawn(args);
    int st;
    waitpid(pid, &st, 0);
    double t = now_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st)) fail_msg("%s: the undisturbed run failed", name);
    uint64_t seed = 12345;
    int complete = 0, absent = 0;
    for (int it = 0; it < 8; it++) {
        snprintf(args, sizeof args, fmt, g_big, g_big_hf, out);
        double at = t * (double)(dsq_test_rand(&seed) % 1000) / 1000.0;
        pid = spawn(args);
        nanosleep(&(struct timespec){(time_t)at, (long)((at - (double)(time_t)at) * 1e9)}, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        if (dsq_exists(out)) {
            if (!same_tree(ref, out)) fail_msg("%s: killed at %.3f s, a different output is in place", name, at);
            complete++;
            dsq_rmtree(out);
        } else {
            absent++;
        }
        /* a rerun after the kill succeeds, whatever the kill left behind */
        if (run(NULL, args, err, sizeof err) != 0) fail_msg("%s: rerun after a kill at %.3f s: %s", name, at, err);
        if (!same_tree(ref, out)) fail_msg("%s: the rerun differs from the reference", name);
        dsq_rmtree(out);
    }
    fprintf(stderr, "%s: 8 kills over %.2f s: %d complete, %d absent, never partial\n", name, t, complete, absent);
    dsq_rmtree(ref);
    /* temporaries a SIGKILL leaves are hidden names; remove them for the next case */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s/.k-* %s/.%s.tmp-*", g_root, g_root, name);
    (void)!system(cmd);
    free(ref), free(out);
}

static void test_sigkill(void **state)
{
    (void)state;
    kill_case("convert %1$s -o %3$s", "k.gguf-hf");
    /* min/max: the kills are about the writer, and their 8 runs scale with the run's length */
    kill_case("rtn %2$s -o %3$s --format gptq --group 32 --grid minmax", "k-gptq");
}

/* ------------------------------------------------------------ download */

static void test_download_disk_full(void **state)
{
    (void)state;
    char *src = path_of("dl-src.txt"), *dest = path_of("dl-dest.txt"), url[4200];
    FILE *f = fopen(src, "w");
    for (int i = 0; i < 4000; i++) fprintf(f, "line %d of a dataset\n", i);
    fclose(f);
    snprintf(url, sizeof url, "file://%s", src);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
        struct rlimit rl = {20000, 20000};
        setrlimit(RLIMIT_FSIZE, &rl);
        dsq_status s = dsq_download_file(url, dest, 1u << 30);
        _exit(s == DSQ_ERR_IO && !strchr(dsq_errmsg(), '\n') && strstr(dsq_errmsg(), dest) ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_false(dsq_exists(dest));
    if (count_like(".")) fail_msg("the download left a temporary");
    assert_int_equal(dsq_download_file(url, dest, 1u << 30), DSQ_OK);
    assert_true(dsq_exists(dest));
    unlink(src), unlink(dest);
    free(src), free(dest);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_short_reads_and_eio),
        cmocka_unit_test(test_truncated_while_mapped),
        cmocka_unit_test(test_sigkill),
        cmocka_unit_test(test_download_disk_full),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
