/* The base model's log-probabilities for `dsquant kld`, computed once and
 * reused against any number of quantized models (llama-perplexity's
 * --kl-divergence-base file plays the same part; ours is our own format).
 *
 * Row format: llama.cpp's (tools/perplexity/perplexity.cpp, log_softmax with
 * a uint16 output) plus the exact NLL of the correct token: per scored
 * position the log-softmax of the logits over the vocabulary, quantized to
 * 16 bits over the range [max-16, max] of the logits:
 *   float32 scale          (max_logit - min_logit) / 65535, min_logit = max(min of logits, max_logit - 16)
 *   float32 min_log_prob   min_logit - max_logit - log(sum exp(logit - max_logit))
 *   float32 nll            -log p(correct next token), not quantized
 *   uint16  q[n_vocab]     round((logit - min_logit) / scale) for logit > min_logit, else 0
 * so log p[i] = scale * q[i] + min_log_prob (every log-prob below
 * min_log_prob reads as min_log_prob). The error per log-prob is at most
 * scale / 2 <= 1.3e-4; F32 rows would be 2x larger, F16 ones coarser.
 * llama.cpp takes the base NLL from q[target], which clamps a correct token
 * less likely than max-16 and biases PPL(base) low; ours is exact (the
 * third float). Row size: 12 + 2 * n_vocab bytes.
 *
 * File, all little-endian:
 *   header, 48 bytes, not compressed:
 *     char magic[8] = "DSQLOGP\0"; u32 version = 1; u32 row_format = 1 (the rows above);
 *     u32 n_vocab; u32 n_ctx; u32 n_chunks; u32 first (= n_ctx / 2, the first scored position);
 *     i32 bos (the token put first in each chunk, -1 for none); u32 reserved[3] = 0
 *   then one zstd stream (frames carry checksums) holding
 *     i32 tokens[n_ctx * n_chunks]        the evaluated text, before BOS replacement
 *     for each chunk, for positions first .. n_ctx-2: one row (predicting the next token)
 *   and nothing after it.
 * A reader checks every header field against fixed bounds and the token ids
 * against n_vocab, decompresses only as much as asked for, and fails on a
 * stream that ends early, bytes after its end, or a zstd/checksum error. */
#ifndef DSQ_EVAL_KLD_FILE_H
#define DSQ_EVAL_KLD_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define DSQ_KLD_FILE_MAGIC "DSQLOGP"
#define DSQ_KLD_FILE_VERSION 1u
#define DSQ_KLD_ROW_U16 1u
#define DSQ_KLD_HEADER_BYTES 48u
/* Bounds a reader accepts. */
#define DSQ_KLD_MAX_VOCAB (1u << 22)
#define DSQ_KLD_MAX_CTX (1u << 20)
#define DSQ_KLD_MAX_TOKENS (1ull << 30)

typedef struct dsq_kld_header {
    uint32_t n_vocab, n_ctx, n_chunks, first;
    int32_t bos; /* -1: none */
} dsq_kld_header;

/* Bytes of one row for a vocabulary of n_vocab. */
size_t dsq_kld_row_bytes(int64_t n_vocab);

/* Packs the log-softmax of one row of logits (see above) into row; target
 * is the correct next token. */
void dsq_kld_pack_row(const float *logits, int64_t n_vocab, int32_t target, uint8_t *row);
/* The exact NLL of the correct token stored in a packed row. */
float dsq_kld_row_nll(const uint8_t *row);
/* log p[i] of a packed row. */
float dsq_kld_row_logprob(const uint8_t *row, int64_t i);

/* ---- writer ---- */
typedef struct dsq_kld_writer dsq_kld_writer;
/* Writes the header and tokens[0 .. n_ctx * n_chunks) (through core/fileio:
 * the file appears only on commit). */
dsq_status dsq_kld_writer_open(const char *path, bool overwrite, const dsq_kld_header *h, const int32_t *tokens,
                               dsq_kld_writer **out);
dsq_status dsq_kld_writer_rows(dsq_kld_writer *w, const uint8_t *rows, size_t n_rows);
/* Fails unless exactly n_chunks * (n_ctx - 1 - first) rows were written. Frees w. */
dsq_status dsq_kld_writer_commit(dsq_kld_writer *w);
void dsq_kld_writer_abort(dsq_kld_writer *w);

/* ---- reader ---- */
typedef struct dsq_kld_reader dsq_kld_reader;
dsq_status dsq_kld_reader_open(const char *path, dsq_kld_reader **out);
const dsq_kld_header *dsq_kld_reader_header(const dsq_kld_reader *r);
/* n_ctx * n_chunks token ids, each in [0, n_vocab). */
const int32_t *dsq_kld_reader_tokens(const dsq_kld_reader *r);
/* The next n_rows rows, in file order. */
dsq_status dsq_kld_reader_rows(dsq_kld_reader *r, uint8_t *rows, size_t n_rows);
/* After the last row: fails unless the stream ends exactly there (checksums verified). */
dsq_status dsq_kld_reader_finish(dsq_kld_reader *r);
void dsq_kld_reader_close(dsq_kld_reader *r);

#endif
