#include "eval/kld_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/fileio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the base log-prob file stores tokens and rows in host order, which must be little-endian"
#endif

#define TOKEN_PIECE ((size_t)1 << 20) /* tokens decompressed per step: memory follows real data */

#define ROW_HEAD 12 /* scale, min_log_prob, nll */

size_t dsq_kld_row_bytes(int64_t n_vocab) { return ROW_HEAD + 2 * (size_t)n_vocab; }

void dsq_kld_pack_row(const float *logits, int64_t n_vocab, int32_t target, uint8_t *row)
{
    float mx = logits[0], mn = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
        mn = logits[i] < mn ? logits[i] : mn;
    }
    mn = mn > mx - 16 ? mn : mx - 16;
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    float lse = (float)log(sum);
    float head[3] = {(mx - mn) / 65535.f, mn - mx - lse, mx + lse - logits[target]};
    memcpy(row, head, sizeof head);
    uint16_t *q = (uint16_t *)(void *)(row + ROW_HEAD);
    if (head[0] == 0) {
        memset(q, 0, 2 * (size_t)n_vocab);
        return;
    }
    float inv = 1 / head[0];
    for (int64_t i = 0; i < n_vocab; i++) {
        long v = logits[i] > mn ? lrintf(inv * (logits[i] - mn)) : 0;
        q[i] = (uint16_t)(v > 65535 ? 65535 : v);
    }
}

float dsq_kld_row_logprob(const uint8_t *row, int64_t i)
{
    float head[2];
    uint16_t q;
    memcpy(head, row, sizeof head);
    memcpy(&q, row + ROW_HEAD + 2 * (size_t)i, sizeof q);
    return head[0] * q + head[1];
}

float dsq_kld_row_nll(const uint8_t *row)
{
    float nll;
    memcpy(&nll, row + 8, sizeof nll);
    return nll;
}

/* ---- header ---- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void encode_header(const dsq_kld_header *h, uint8_t b[DSQ_KLD_HEADER_BYTES])
{
    memset(b, 0, DSQ_KLD_HEADER_BYTES);
    memcpy(b, DSQ_KLD_FILE_MAGIC, 8); /* the literal's NUL is the 8th byte */
    put32(b + 8, DSQ_KLD_FILE_VERSION);
    put32(b + 12, DSQ_KLD_ROW_U16);
    put32(b + 16, h->n_vocab);
    put32(b + 20, h->n_ctx);
    put32(b + 24, h->n_chunks);
    put32(b + 28, h->first);
    put32(b + 32, (uint32_t)h->bos);
}

static dsq_status check_header(const char *path, const dsq_kld_header *h)
{
    if (h->n_vocab < 2 || h->n_vocab > DSQ_KLD_MAX_VOCAB)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: vocabulary size %u outside [2, %u]", path, h->n_vocab, DSQ_KLD_MAX_VOCAB);
    if (h->n_ctx < 4 || h->n_ctx > DSQ_KLD_MAX_CTX)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: context %u outside [4, %u]", path, h->n_ctx, DSQ_KLD_MAX_CTX);
    if (h->n_chunks < 1 || (uint64_t)h->n_chunks * h->n_ctx > DSQ_KLD_MAX_TOKENS)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %u chunks of %u tokens: outside [1, %llu] tokens", path, h->n_chunks,
                        h->n_ctx, (unsigned long long)DSQ_KLD_MAX_TOKENS);
    if (h->first != h->n_ctx / 2)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: first scored position %u is not context / 2 = %u", path, h->first,
                        h->n_ctx / 2);
    if (h->bos < -1 || h->bos >= (int64_t)h->n_vocab)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: BOS id %d outside the vocabulary of %u", path, (int)h->bos, h->n_vocab);
    return DSQ_OK;
}

static dsq_status decode_header(const char *path, const uint8_t *b, size_t n, dsq_kld_header *h)
{
    if (n < DSQ_KLD_HEADER_BYTES || memcmp(b, DSQ_KLD_FILE_MAGIC, 8) != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: not a dsquant base log-prob file (no \"%s\" header)", path,
                        DSQ_KLD_FILE_MAGIC);
    uint32_t version = get32(b + 8), fmt = get32(b + 12);
    if (version != DSQ_KLD_FILE_VERSION)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: file version %u (this build reads %u)", path, version,
                        DSQ_KLD_FILE_VERSION);
    if (fmt != DSQ_KLD_ROW_U16) return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: row format %u unknown", path, fmt);
    for (int i = 36; i < 48; i++)
        if (b[i]) return dsq_fail(DSQ_ERR_FORMAT, "%s: reserved header bytes are not zero", path);
    h->n_vocab = get32(b + 16);
    h->n_ctx = get32(b + 20);
    h->n_chunks = get32(b + 24);
    h->first = get32(b + 28);
    h->bos = (int32_t)get32(b + 32);
    return check_header(path, h);
}

/* ---- writer ---- */

struct dsq_kld_writer {
    dsq_outfile *f;
    ZSTD_CStream *z;
    uint8_t *obuf;
    size_t ocap;
    uint64_t rows_left;
    size_t row_bytes;
};

static dsq_status compress(dsq_kld_writer *w, const void *data, size_t n, ZSTD_EndDirective mode)
{
    ZSTD_inBuffer in = {data, n, 0};
    for (;;) {
        ZSTD_outBuffer out = {w->obuf, w->ocap, 0};
        size_t ret = ZSTD_compressStream2(w->z, &out, &in, mode);
        if (ZSTD_isError(ret))
            return dsq_fail(DSQ_ERR_INTERNAL, "%s: zstd: %s", dsq_outfile_path(w->f), ZSTD_getErrorName(ret));
        if (out.pos) DSQ_TRY(dsq_outfile_write(w->f, w->obuf, out.pos));
        bool done = mode == ZSTD_e_end ? ret == 0 : in.pos == in.size;
        if (done) return DSQ_OK;
    }
}

dsq_status dsq_kld_writer_open(const char *path, bool overwrite, const dsq_kld_header *h, const int32_t *tokens,
                               dsq_kld_writer **out)
{
    *out = NULL;
    DSQ_TRY(check_header(path, h));
    for (size_t i = 0; i < (size_t)h->n_ctx * h->n_chunks; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= h->n_vocab)
            return dsq_fail(DSQ_ERR_ARG, "%s: token %zu has id %d, outside the vocabulary of %u", path, i,
                            (int)tokens[i], h->n_vocab);
    dsq_kld_writer *w = calloc(1, sizeof *w);
    if (!w) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    w->ocap = ZSTD_CStreamOutSize();
    w->obuf = malloc(w->ocap);
    w->z = ZSTD_createCStream();
    w->rows_left = (uint64_t)h->n_chunks * (h->n_ctx - 1 - h->first);
    w->row_bytes = dsq_kld_row_bytes(h->n_vocab);
    dsq_status s = w->obuf && w->z ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for zstd", path);
    if (s == DSQ_OK && (ZSTD_isError(ZSTD_CCtx_setParameter(w->z, ZSTD_c_compressionLevel, 3)) ||
                        ZSTD_isError(ZSTD_CCtx_setParameter(w->z, ZSTD_c_checksumFlag, 1))))
        s = dsq_fail(DSQ_ERR_INTERNAL, "%s: zstd refused its parameters", path);
    if (s == DSQ_OK) s = dsq_outfile_open(path, overwrite, &w->f);
    uint8_t hb[DSQ_KLD_HEADER_BYTES];
    encode_header(h, hb);
    if (s == DSQ_OK) s = dsq_outfile_write(w->f, hb, sizeof hb);
    if (s == DSQ_OK)
        s = compress(w, tokens, (size_t)h->n_ctx * h->n_chunks * sizeof(int32_t), ZSTD_e_continue);
    if (s != DSQ_OK) {
        dsq_kld_writer_abort(w);
        return s;
    }
    *out = w;
    return DSQ_OK;
}

dsq_status dsq_kld_writer_rows(dsq_kld_writer *w, const uint8_t *rows, size_t n_rows)
{
    if (n_rows > w->rows_left)
        return dsq_fail(DSQ_ERR_INTERNAL, "%s: %zu rows written past the %llu the header announces",
                        dsq_outfile_path(w->f), n_rows, (unsigned long long)w->rows_left);
    w->rows_left -= n_rows;
    return compress(w, rows, n_rows * w->row_bytes, ZSTD_e_continue);
}

void dsq_kld_writer_abort(dsq_kld_writer *w)
{
    if (!w) return;
    dsq_outfile_abort(w->f);
    ZSTD_freeCStream(w->z);
    free(w->obuf);
    free(w);
}

dsq_status dsq_kld_writer_commit(dsq_kld_writer *w)
{
    dsq_status s = DSQ_OK;
    if (w->rows_left)
        s = dsq_fail(DSQ_ERR_INTERNAL, "%s: %llu rows missing", dsq_outfile_path(w->f),
                     (unsigned long long)w->rows_left);
    if (s == DSQ_OK) s = compress(w, NULL, 0, ZSTD_e_end);
    if (s == DSQ_OK) {
        s = dsq_outfile_commit(w->f);
        w->f = NULL; /* commit frees it, whatever it returns */
    }
    dsq_kld_writer_abort(w);
    return s;
}

/* ---- reader ---- */

struct dsq_kld_reader {
    dsq_mmap m;
    ZSTD_DStream *z;
    ZSTD_inBuffer in;
    dsq_kld_header h;
    int32_t *tokens;
    size_t row_bytes;
    size_t last_ret; /* of the last ZSTD_decompressStream: 0 between frames */
};

/* Decompresses exactly n bytes into buf. */
static dsq_status read_exact(dsq_kld_reader *r, void *buf, size_t n, const char *what)
{
    ZSTD_outBuffer out = {buf, n, 0};
    while (out.pos < out.size) {
        size_t in0 = r->in.pos, out0 = out.pos;
        size_t ret = ZSTD_decompressStream(r->z, &out, &r->in);
        if (ZSTD_isError(ret))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: corrupt data while reading %s: zstd: %s", r->m.path, what,
                            ZSTD_getErrorName(ret));
        r->last_ret = ret;
        if (r->in.pos == in0 && out.pos == out0)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: truncated: the data ends while reading %s", r->m.path, what);
    }
    return DSQ_OK;
}

static dsq_status read_tokens(dsq_kld_reader *r)
{
    size_t total = (size_t)r->h.n_ctx * r->h.n_chunks, done = 0;
    while (done < total) {
        size_t step = total - done < TOKEN_PIECE ? total - done : TOKEN_PIECE;
        int32_t *t = realloc(r->tokens, (done + step) * sizeof *t);
        if (!t) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for %zu tokens", r->m.path, total);
        r->tokens = t;
        DSQ_TRY(read_exact(r, t + done, step * sizeof *t, "the token ids"));
        for (size_t i = done; i < done + step; i++)
            if (t[i] < 0 || (uint32_t)t[i] >= r->h.n_vocab)
                return dsq_fail(DSQ_ERR_FORMAT, "%s: token %zu has id %d, outside the vocabulary of %u", r->m.path, i,
                                (int)t[i], r->h.n_vocab);
        done += step;
    }
    return DSQ_OK;
}

dsq_status dsq_kld_reader_open(const char *path, dsq_kld_reader **out)
{
    *out = NULL;
    dsq_kld_reader *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    dsq_status s = dsq_mmap_open(path, &r->m);
    if (s == DSQ_OK) s = decode_header(path, r->m.data, r->m.size, &r->h);
    if (s == DSQ_OK && !(r->z = ZSTD_createDStream())) s = dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for zstd", path);
    if (s == DSQ_OK) {
        r->in = (ZSTD_inBuffer){r->m.data + DSQ_KLD_HEADER_BYTES, r->m.size - DSQ_KLD_HEADER_BYTES, 0};
        r->row_bytes = dsq_kld_row_bytes(r->h.n_vocab);
        r->last_ret = 1;
        s = read_tokens(r);
    }
    if (s != DSQ_OK) {
        dsq_kld_reader_close(r);
        return s;
    }
    *out = r;
    return DSQ_OK;
}

const dsq_kld_header *dsq_kld_reader_header(const dsq_kld_reader *r) { return &r->h; }

const int32_t *dsq_kld_reader_tokens(const dsq_kld_reader *r) { return r->tokens; }

dsq_status dsq_kld_reader_rows(dsq_kld_reader *r, uint8_t *rows, size_t n_rows)
{
    DSQ_TRY(read_exact(r, rows, n_rows * r->row_bytes, "log-prob rows"));
    for (size_t i = 0; i < n_rows; i++) {
        float head[3];
        memcpy(head, rows + i * r->row_bytes, sizeof head);
        if (!isfinite(head[0]) || !isfinite(head[1]) || !isfinite(head[2]) || head[0] < 0 || head[1] > 0 ||
            head[2] < 0)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: a row has scale %g, minimum log-prob %g and NLL %g", r->m.path,
                            head[0], head[1], head[2]);
    }
    return DSQ_OK;
}

dsq_status dsq_kld_reader_finish(dsq_kld_reader *r)
{
    uint8_t extra;
    /* Done when the decoder sits between frames (the last one's checksum
     * verified) with no input left. */
    while (!(r->last_ret == 0 && r->in.pos == r->in.size)) {
        ZSTD_outBuffer out = {&extra, 1, 0};
        size_t in0 = r->in.pos;
        size_t ret = ZSTD_decompressStream(r->z, &out, &r->in);
        if (ZSTD_isError(ret))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: corrupt data at the end: zstd: %s", r->m.path, ZSTD_getErrorName(ret));
        if (out.pos) return dsq_fail(DSQ_ERR_FORMAT, "%s: data continues after the last row", r->m.path);
        if (r->in.pos == in0 && ret != 0)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: truncated: the last zstd frame is cut", r->m.path);
        r->last_ret = ret;
    }
    return DSQ_OK;
}

void dsq_kld_reader_close(dsq_kld_reader *r)
{
    if (!r) return;
    ZSTD_freeDStream(r->z);
    dsq_mmap_close(&r->m);
    free(r->tokens);
    free(r);
}
