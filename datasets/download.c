#include "datasets/download.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "core/log.h"

/* ---- HTTP(S) download ---- */

/* curl_global_init is not thread-safe and must run once before any handle. */
static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init = CURLE_FAILED_INIT;

static void curl_init_once(void) { g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); }

#define CONNECT_TIMEOUT_S 20L
/* Aborts a transfer slower than 1 KiB/s for a whole minute: a dead link, not a slow one. */
#define LOW_SPEED_BYTES 1024L
#define LOW_SPEED_TIME_S 60L

typedef struct transfer {
    const char *url;
    dsq_outfile *out;
    uint64_t got, max;
    dsq_status write_status; /* a failure of ours inside the write callback */
    bool too_big;
    double t0, t_last;
} transfer;

static size_t on_data(char *p, size_t size, size_t nmemb, void *user)
{
    transfer *x = user;
    size_t n = size * nmemb; /* libcurl always passes size 1 */
    if (n > x->max - x->got) {
        x->too_big = true;
        return 0;
    }
    dsq_status s = dsq_outfile_write(x->out, p, n);
    if (s != DSQ_OK) {
        x->write_status = s;
        return 0;
    }
    x->got += n;
    return n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)ultotal, (void)ulnow;
    transfer *x = user;
    double t = dsq_now_s();
    if (t - x->t_last < 1.0) return 0;
    x->t_last = t;
    double mb = (double)dlnow / 1e6, rate = mb / (t - x->t0);
    if (dltotal > 0)
        DSQ_LOGI("downloading %s: %.1f / %.1f MB (%.1f MB/s)", x->url, mb, (double)dltotal / 1e6, rate);
    else
        DSQ_LOGI("downloading %s: %.1f MB (%.1f MB/s)", x->url, mb, rate);
    return 0;
}

static CURLcode configure(CURL *c, transfer *x, char *errbuf)
{
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                                                  \
    if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, val)
    SET(CURLOPT_URL, x->url);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for DNS timeouts: we may run in a threaded program */
    SET(CURLOPT_FOLLOWLOCATION, 1L);
    SET(CURLOPT_MAXREDIRS, 10L);
    SET(CURLOPT_FAILONERROR, 1L); /* HTTP >= 400 is an error, not a body to save */
    SET(CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    SET(CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_BYTES);
    SET(CURLOPT_LOW_SPEED_TIME, LOW_SPEED_TIME_S);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)(x->max > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x->max));
    SET(CURLOPT_USERAGENT, "dsquant/" DSQ_VERSION);
    /* file:// serves mirrors and tests; a redirect must never lead to a local file. */
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https,file");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS | CURLPROTO_FILE));
    SET(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    SET(CURLOPT_WRITEFUNCTION, on_data);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, x);
    SET(CURLOPT_NOPROGRESS, 0L);
#undef SET
    return rc;
}

/* The one-line reason a finished transfer failed (rc != CURLE_OK). */
static dsq_status transfer_error(CURL *c, const transfer *x, CURLcode rc, const char *errbuf)
{
    if (x->write_status != DSQ_OK) return dsq_fail_context(x->write_status, "download %s", x->url);
    if (x->too_big || rc == CURLE_FILESIZE_EXCEEDED)
        return dsq_fail(DSQ_ERR_FORMAT, "download %s: larger than the limit of %llu bytes", x->url,
                        (unsigned long long)x->max);
    long http = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    if (rc == CURLE_HTTP_RETURNED_ERROR) return dsq_fail(DSQ_ERR_IO, "download %s: HTTP status %ld", x->url, http);
    return dsq_fail(DSQ_ERR_IO, "download %s: %s", x->url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

dsq_status dsq_download_file(const char *url, const char *dest_path, uint64_t max_bytes)
{
    if (!url || !*url || !dest_path || !*dest_path)
        return dsq_fail(DSQ_ERR_ARG, "download: empty URL or destination path");
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init != CURLE_OK)
        return dsq_fail(DSQ_ERR_INTERNAL, "download %s: libcurl initialisation failed: %s", url,
                        curl_easy_strerror(g_curl_init));
    transfer x = {.url = url, .max = max_bytes, .write_status = DSQ_OK};
    DSQ_TRY(dsq_outfile_open(dest_path, true, &x.out));
    CURL *c = curl_easy_init();
    if (!c) {
        dsq_outfile_abort(x.out);
        return dsq_fail(DSQ_ERR_NOMEM, "download %s: curl_easy_init failed", url);
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    x.t0 = x.t_last = dsq_now_s();
    CURLcode rc = configure(c, &x, errbuf);
    if (rc != CURLE_OK) {
        dsq_outfile_abort(x.out);
        curl_easy_cleanup(c);
        return dsq_fail(DSQ_ERR_INTERNAL, "download %s: setting up libcurl: %s", url, curl_easy_strerror(rc));
    }
    rc = curl_easy_perform(c);
    dsq_status s = rc == CURLE_OK ? DSQ_OK : transfer_error(c, &x, rc, errbuf);
    curl_easy_cleanup(c);
    if (s != DSQ_OK) {
        dsq_outfile_abort(x.out);
        return s;
    }
    DSQ_TRY(dsq_outfile_commit(x.out));
    DSQ_LOGD("downloaded %s: %llu bytes in %.1f s", url, (unsigned long long)x.got, dsq_now_s() - x.t0);
    return DSQ_OK;
}

/* ---- ZIP: one member out of an archive ----
 * Layout from PKWARE's APPNOTE.TXT, section 4.3: local file header (4.3.7),
 * central directory file header (4.3.12), end of central directory record
 * (4.3.16), ZIP64 end of central directory locator (4.3.15). All little-endian. */

#define EOCD_SIG 0x06054b50u
#define EOCD_LEN 22u
#define EOCD_MAX_COMMENT 0xFFFFu
#define ZIP64_LOCATOR_SIG 0x07064b50u
#define ZIP64_LOCATOR_LEN 20u
#define CDH_SIG 0x02014b50u
#define CDH_LEN 46u
#define LFH_SIG 0x04034b50u
#define LFH_LEN 30u
#define FLAG_ENCRYPTED 0x0001u
#define FLAG_STRONG_ENCRYPTION 0x0040u
#define METHOD_STORED 0
#define METHOD_DEFLATE 8

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct zip_dir {
    uint64_t off, size; /* of the central directory */
    uint32_t entries;
} zip_dir;

typedef struct zip_entry {
    uint16_t flags, method;
    uint32_t crc, csize, usize, local;
} zip_entry;

/* The EOCD is the last 22 bytes unless a comment (up to 64 KiB) follows it,
 * so it is searched for backwards; its comment must fit in what follows. */
static dsq_status find_eocd(const uint8_t *z, size_t n, size_t *pos)
{
    if (n < EOCD_LEN)
        return dsq_fail(DSQ_ERR_FORMAT, "zip archive: %zu bytes, shorter than an end of central directory record", n);
    size_t last = n - EOCD_LEN, first = last > EOCD_MAX_COMMENT ? last - EOCD_MAX_COMMENT : 0;
    for (size_t p = last + 1; p-- > first;)
        if (rd32(z + p) == EOCD_SIG && rd16(z + p + 20) <= last - p) {
            *pos = p;
            return DSQ_OK;
        }
    return dsq_fail(DSQ_ERR_FORMAT, "zip archive: no end of central directory record in its last %zu bytes", n - first);
}

static dsq_status read_eocd(const uint8_t *z, size_t n, zip_dir *d)
{
    size_t p = 0;
    DSQ_TRY(find_eocd(z, n, &p));
    const uint8_t *e = z + p;
    uint16_t disk = rd16(e + 4), cd_disk = rd16(e + 6), here = rd16(e + 8), total = rd16(e + 10);
    uint32_t size = rd32(e + 12), off = rd32(e + 16);
    if (p >= ZIP64_LOCATOR_LEN && rd32(e - ZIP64_LOCATOR_LEN) == ZIP64_LOCATOR_SIG)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "zip archive: ZIP64 (it has a ZIP64 end of central directory locator)");
    if (total == 0xFFFF || size == 0xFFFFFFFFu || off == 0xFFFFFFFFu)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "zip archive: ZIP64 (end of central directory field %s is 0xffff...)",
                        total == 0xFFFF       ? "total entries"
                        : size == 0xFFFFFFFFu ? "central directory size"
                                              : "central directory offset");
    if (disk || cd_disk || here != total)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "zip archive: split over several disks (disk %u, central directory "
                        "on disk %u, %u of %u entries here)",
                        disk, cd_disk, here, total);
    /* The central directory lies before its end record. */
    if ((uint64_t)off + size > p)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip archive: central directory (offset %u, size %u) extends past its end record at "
                        "offset %zu",
                        off, size, p);
    *d = (zip_dir){off, size, total};
    return DSQ_OK;
}

/* Walks the central directory for the entry named exactly `member`. */
static dsq_status find_member(const uint8_t *z, const zip_dir *d, const char *member, zip_entry *out)
{
    size_t mlen = strlen(member);
    uint64_t p = d->off, end = d->off + d->size;
    for (uint32_t i = 0; i < d->entries; i++) {
        if (end - p < CDH_LEN)
            return dsq_fail(DSQ_ERR_FORMAT,
                            "zip archive: central directory entry %u of %u runs past the directory's "
                            "%llu bytes",
                            i + 1, d->entries, (unsigned long long)d->size);
        const uint8_t *h = z + p;
        if (rd32(h) != CDH_SIG)
            return dsq_fail(DSQ_ERR_FORMAT,
                            "zip archive: central directory entry %u of %u has a bad signature "
                            "0x%08x",
                            i + 1, d->entries, rd32(h));
        uint64_t nl = rd16(h + 28), vl = nl + rd16(h + 30) + rd16(h + 32);
        if (end - p - CDH_LEN < vl)
            return dsq_fail(DSQ_ERR_FORMAT,
                            "zip archive: central directory entry %u of %u: name, extra field and "
                            "comment lengths (%llu bytes together) run past the directory",
                            i + 1, d->entries, (unsigned long long)vl);
        if (nl == mlen && !memcmp(h + CDH_LEN, member, mlen)) {
            *out = (zip_entry){rd16(h + 8), rd16(h + 10), rd32(h + 16), rd32(h + 20), rd32(h + 24), rd32(h + 42)};
            return DSQ_OK;
        }
        p += CDH_LEN + vl;
    }
    return dsq_fail(DSQ_ERR_NOT_FOUND, "zip archive: no member \"%s\" among its %u entries", member, d->entries);
}

/* What the central directory says about the member, before any data is touched. */
static dsq_status check_entry(const zip_entry *e, const char *member, uint64_t max_out)
{
    if (e->flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "zip member \"%s\": encrypted (general purpose flags 0x%04x)", member,
                        e->flags);
    if (e->csize == 0xFFFFFFFFu || e->usize == 0xFFFFFFFFu || e->local == 0xFFFFFFFFu)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "zip member \"%s\": ZIP64 (field %s is 0xffffffff)", member,
                        e->csize == 0xFFFFFFFFu   ? "compressed size"
                        : e->usize == 0xFFFFFFFFu ? "uncompressed size"
                                                  : "local header offset");
    if (e->method != METHOD_STORED && e->method != METHOD_DEFLATE)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "zip member \"%s\": compression method %u (only 0 stored and 8 "
                        "deflate are supported)",
                        member, e->method);
    if (e->usize > max_out)
        return dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": uncompressed size %u is above the limit of %llu bytes",
                        member, e->usize, (unsigned long long)max_out);
    if (e->method == METHOD_STORED && e->csize != e->usize)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip member \"%s\": stored, but its compressed size %u differs from its "
                        "uncompressed size %u",
                        member, e->csize, e->usize);
    return DSQ_OK;
}

/* Checks the member's local header against the central entry; *data is where its bytes start. */
static dsq_status local_data(const uint8_t *z, size_t n, const zip_entry *e, const char *member, size_t *data)
{
    uint64_t p = e->local;
    if (p > n || n - p < LFH_LEN)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip member \"%s\": local header offset %u is past the end of the %zu-byte "
                        "archive",
                        member, e->local, n);
    const uint8_t *h = z + p;
    if (rd32(h) != LFH_SIG)
        return dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": bad local header signature 0x%08x at offset %u", member,
                        rd32(h), e->local);
    uint64_t nl = rd16(h + 26), xl = rd16(h + 28);
    if (n - p - LFH_LEN < nl + xl)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip member \"%s\": local header name and extra field lengths (%llu + %llu) "
                        "run past the end of the archive",
                        member, (unsigned long long)nl, (unsigned long long)xl);
    if (nl != strlen(member) || memcmp(h + LFH_LEN, member, nl))
        return dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": its local header names another file", member);
    if (rd16(h + 8) != e->method)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip member \"%s\": local header method %u differs from the central "
                        "directory's %u",
                        member, rd16(h + 8), e->method);
    uint64_t start = p + LFH_LEN + nl + xl;
    if (n - start < e->csize)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "zip member \"%s\": compressed size %u at offset %llu runs past the end of "
                        "the %zu-byte archive",
                        member, e->csize, (unsigned long long)start, n);
    *data = (size_t)start;
    return DSQ_OK;
}

/* Raw deflate (no zlib header: windowBits -15) into exactly usize bytes; buf
 * has one byte more, so output beyond the declared size is caught. */
static dsq_status inflate_member(const uint8_t *src, const zip_entry *e, const char *member, uint8_t *buf)
{
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, -15) != Z_OK)
        return dsq_fail(DSQ_ERR_NOMEM, "zip member \"%s\": zlib inflateInit2 failed", member);
    s.next_in = (Bytef *)src; /* zlib does not write through next_in */
    s.avail_in = e->csize;
    s.next_out = buf;
    s.avail_out = e->usize + 1u; /* usize < 0xffffffff, checked */
    int r = inflate(&s, Z_FINISH);
    uLong got = s.total_out;
    char why[128];
    snprintf(why, sizeof why, "%s", s.msg ? s.msg : zError(r));
    inflateEnd(&s);
    if (r == Z_STREAM_END && got == e->usize) return DSQ_OK;
    if (r == Z_STREAM_END || got > e->usize)
        return dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": inflates to %s%lu bytes, not its uncompressed size %u",
                        member, got > e->usize ? "more than " : "", got > e->usize ? (unsigned long)e->usize : got,
                        e->usize);
    return dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": corrupt or truncated deflate data (%s)", member, why);
}

dsq_status dsq_zip_extract(const void *zip, size_t n, const char *member, void **out, size_t *out_len, uint64_t max_out)
{
    *out = NULL;
    *out_len = 0;
    if (!zip && n) return dsq_fail(DSQ_ERR_ARG, "zip archive: NULL data");
    const uint8_t *z = zip;
    zip_dir d = {0, 0, 0};
    zip_entry e = {0, 0, 0, 0, 0, 0};
    size_t data = 0;
    DSQ_TRY(read_eocd(z, n, &d));
    DSQ_TRY(find_member(z, &d, member, &e));
    DSQ_TRY(check_entry(&e, member, max_out));
    DSQ_TRY(local_data(z, n, &e, member, &data));
    uint8_t *buf = malloc((size_t)e.usize + 1);
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "zip member \"%s\": out of memory for %u bytes", member, e.usize);
    dsq_status s = DSQ_OK;
    if (e.method == METHOD_STORED) {
        if (e.usize) memcpy(buf, z + data, e.usize);
    } else {
        s = inflate_member(z + data, &e, member, buf);
    }
    if (s == DSQ_OK) {
        uint32_t crc = (uint32_t)crc32(0L, buf, e.usize);
        if (crc != e.crc)
            s = dsq_fail(DSQ_ERR_FORMAT, "zip member \"%s\": CRC-32 of the content is 0x%08x, the archive says 0x%08x",
                         member, crc, e.crc);
    }
    if (s != DSQ_OK) {
        free(buf);
        return s;
    }
    buf[e.usize] = 0;
    *out = buf;
    *out_len = e.usize;
    return DSQ_OK;
}
