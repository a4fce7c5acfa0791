/* Getting a dataset file from where it is published: an HTTP(S) (or file://)
 * download through libcurl, and one member taken out of a ZIP archive.
 *
 * The registry (datasets/registry.c) uses both when a named dataset is found
 * nowhere locally; they know nothing of datasets themselves. */
#ifndef DSQ_DATASETS_DOWNLOAD_H
#define DSQ_DATASETS_DOWNLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Downloads url to dest_path (replacing it), following redirects; an HTTP
 * status >= 400, a connection that does not open within 20 s, a transfer that
 * stalls, or more than max_bytes of data is a failure. Written through
 * dsq_outfile_*, so on any failure nothing is left at dest_path (nor a
 * temporary). Progress goes to the log at info level, at most once a second.
 * Redirects may lead only to http or https. */
dsq_status dsq_download_file(const char *url, const char *dest_path, uint64_t max_bytes);

/* Extracts the member named exactly `member` from the ZIP archive zip[0..n):
 * *out is malloc'd (with a NUL after the *out_len bytes, for text), checked
 * against the sizes and CRC-32 the archive records. Stored (0) and deflated
 * (8) members only; ZIP64, encrypted and multi-disk archives are refused, as
 * is a member whose declared size exceeds max_out. The archive is treated as
 * hostile: every offset and length is checked against n. */
dsq_status dsq_zip_extract(const void *zip, size_t n, const char *member, void **out, size_t *out_len,
                           uint64_t max_out);

#endif
