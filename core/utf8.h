/* The one UTF-8 validator: well-formed means what Unicode (Table 3-7) and
 * RFC 3629 say, the rules Rust's str, Python's strict codec and serde_json
 * apply, so text we pass as valid is text those tools read back. */
#ifndef DSQ_CORE_UTF8_H
#define DSQ_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1 to 4) of the well-formed sequence that starts s[0..n), or 0 when
 * none does: a stray continuation byte, C0/C1 or F5..FF leads, an overlong
 * form, a surrogate (U+D800..U+DFFF), a code point above U+10FFFF, or a
 * sequence cut off by the end (n = 0 included). */
size_t dsq_utf8_seq_len(const char *s, size_t n);

/* Offset of the first byte of s[0..n) where no well-formed sequence starts;
 * n when the whole text is well-formed. NUL bytes count as text (U+0000):
 * callers that cannot hold them check for them themselves. */
size_t dsq_utf8_invalid_at(const char *s, size_t n);

static inline bool dsq_utf8_valid(const char *s, size_t n) { return dsq_utf8_invalid_at(s, n) == n; }

/* For text shown to people or other tools (info --json, decoded tokens), not
 * for data that must round-trip: a malloc'd, NUL-terminated copy of s[0..n)
 * with each maximal ill-formed subpart replaced by U+FFFD, the substitution
 * Unicode recommends (Python's errors="replace" and WHATWG's decoder agree).
 * NULL when out of memory. */
char *dsq_utf8_repair(const char *s, size_t n);

#endif
