/* Calibration samples: n_samples windows of seqlen tokens cut at random
 * places out of a tokenized text, deterministic for a seed.
 *
 * The text is a built-in calibration set, a registered dataset name
 * (datasets/registry.h) or any file: plain text, or JSON lines whose "text"
 * fields are joined with "\n\n" (.zst compressed files are read too).
 *
 * Built-in sets (looked for in the same folders as registered datasets:
 * $DSQ_DATA, $DSQ_SHARED_DIR/datasets, ../shared/datasets, $DSQ_CACHE/datasets):
 *   tinyshakespeare  tinyshakespeare.txt(.zst), the default
 *   gutenberg        gutenberg-nltk/austen-emma.txt(.zst)
 * WikiText-2 is the usual evaluation text, so it is refused as calibration
 * only in spirit: it works, with a warning that results are then optimistic.
 *
 * Sampling follows IST-DASLab/gptq datautils.py get_wikitext2: the whole text
 * is tokenized once and each sample is tokens[i, i + seqlen) with i uniform in
 * [0, n_tokens - seqlen] (our own xorshift generator, not torch's). */
#ifndef DSQ_CALIBRATION_DATASET_H
#define DSQ_CALIBRATION_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/tokenizer.h"

#define DSQ_CALIB_DEFAULT "tinyshakespeare"

typedef struct dsq_calib_opts {
    const char *source; /* name or file; NULL = DSQ_CALIB_DEFAULT */
    int n_samples;      /* > 0 */
    int seqlen;         /* > 1 */
    uint64_t seed;
} dsq_calib_opts;

typedef struct dsq_calib_set {
    int n_samples, seqlen;
    int32_t *tokens; /* [n_samples x seqlen] */
    int64_t *starts; /* [n_samples]: where each window starts in the tokenized text */
    int64_t n_text_tokens;
    char path[4096]; /* the file the text came from */
} dsq_calib_set;

/* Reads the text of source (see above) into a malloc'd NUL-terminated buffer. */
dsq_status dsq_calib_text(const char *source, char *path, size_t cap, char **text, size_t *len);

/* Windows out of an already tokenized stream (n_tokens ids). A stream shorter
 * than seqlen + 1 tokens is an error saying how many there are and how many
 * are needed. */
dsq_status dsq_calib_sample(const int32_t *ids, int64_t n_tokens, const dsq_calib_opts *o, dsq_calib_set *out);

/* Text -> tokens (the tokenizer's own BOS rule) -> windows. */
dsq_status dsq_calib_load(const dsq_calib_opts *o, const dsq_tokenizer *tok, dsq_calib_set *out);

void dsq_calib_free(dsq_calib_set *s);

#endif
