/* JSON parsing that tells a malformed text from an allocation failure.
 * cJSON returns NULL for both; a caller that reported every NULL as "not
 * valid JSON" would blame the user's file for the machine's memory. */
#ifndef DSQ_CORE_JSON_H
#define DSQ_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/status.h"

/* cJSON_ParseWithLengthOpts(text, len, end, false) (end may be NULL). When it
 * gives NULL, *why says why: DSQ_ERR_NOMEM when the text is well-formed JSON
 * as cJSON reads it (so only an allocation can have failed), else
 * DSQ_ERR_FORMAT. Records no message: the caller names the file. */
cJSON *dsq_json_parse(const char *text, size_t len, const char **end, dsq_status *why);

/* True when text[0..len) starts with one JSON value cJSON accepts (bytes after
 * it are ignored, as cJSON ignores them), allocating nothing. */
bool dsq_json_well_formed(const char *text, size_t len);

#endif
