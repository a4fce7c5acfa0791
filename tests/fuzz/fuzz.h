/* Private to tests/fuzz/: what every libFuzzer harness shares.
 *
 * Each tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput (and may
 * define LLVMFuzzerInitialize) for one entry point that reads untrusted
 * bytes. Built with clang -fsanitize=fuzzer (-DDSQ_FUZZ=ON) it is a libFuzzer
 * binary; built by any compiler without that, tests/fuzz/replay.c gives it a
 * main() that runs files and folders of inputs once each, which is how the
 * seeds and the kept crash inputs (tests/fuzz/regress/<name>/) run in the
 * normal test suite, sanitizers included.
 *
 * A harness aborts (a finding) when the library breaks one of its own
 * promises, not only on memory errors: a failure must carry a one-line,
 * non-empty message and an error code; a success must hand back views that
 * lie inside the input. */
#ifndef DSQ_TESTS_FUZZ_H
#define DSQ_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* A harness may define its own (building a model, starting a server);
 * otherwise util_common.c's weak one makes logging quiet. */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The separator of multi-file inputs (a folder's files, a template and its
 * messages): "\n--8<--\n", in every dictionary. */
#define DSQ_FZ_SEP "\n--8<--\n"

typedef struct dsq_fz_part {
    const uint8_t *p;
    size_t n;
} dsq_fz_part;

/* Splits data on DSQ_FZ_SEP into at most max parts (the last takes the
 * rest); returns how many. Parts not present are left {NULL, 0}. */
size_t dsq_fz_split(const uint8_t *data, size_t n, dsq_fz_part *parts, size_t max);

/* This process's scratch folder (under /dev/shm when it exists), made on
 * first use and removed at exit. */
const char *dsq_fz_dir(void);
/* Empties the scratch folder (files and sub-folders). */
void dsq_fz_clear(void);
/* Writes bytes to <scratch>/<name> and returns the path (a static buffer
 * per call slot: slot 0..7). Aborts when the scratch disk fails: that is
 * the harness's fault, not a finding. */
const char *dsq_fz_put(int slot, const char *name, const void *data, size_t n);

/* The checks of a failing call: s is an error code and the message is one
 * non-empty line. Aborts otherwise. */
void dsq_fz_failed(dsq_status s, const char *what);
/* For a call that may fail either way: checks a failure, returns s == DSQ_OK. */
bool dsq_fz_ok(dsq_status s, const char *what);

/* A tensor view a reader handed out: its bytes are the type's size for
 * its shape and lie inside [base, base + size); the first and last byte are
 * read. Aborts otherwise. */
struct dsq_tensor;
void dsq_fz_check_view(const struct dsq_tensor *t, const void *base, size_t size, const char *what);

/* Aborts with a message (a broken invariant: a finding). */
void dsq_fz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Quiet logging, once per process (harnesses' Initialize calls it). */
void dsq_fz_quiet(void);

/* A small model file for the harnesses that need one: a GGUF of a two-
 * layer Llama (hidden 32) with a synthetic tokenizer of the given kind:
 * tok_model "gpt2" (byte-level BPE, tokenizer.ggml.pre = pre, or none when
 * NULL) or "llama" (SentencePiece-style), about 300 tokens with merges,
 * <|im_start|>/<|im_end|>/<|endoftext|> specials and a ChatML template.
 * with_weights false writes a vocab-only file. */
dsq_status dsq_fz_tiny_gguf(const char *path, const char *tok_model, const char *pre, bool with_weights);
/* The same model at other sizes (dim divisible by 8; at most 16 layers). */
dsq_status dsq_fz_llama_gguf(const char *path, const char *tok_model, const char *pre, int64_t dim, int64_t ffn,
                             int64_t layers);

#endif
