/* `dsquant report`: a sweep's sweep.json (cli/cmd_sweep.c) as one
 * self-contained page: no scripts, no network, plots as inline SVG.
 *
 *  - KLD and perplexity against bits per weight for every file, one colour
 *    per method, the +/- error of each point as a bar, the Pareto front of
 *    (bits, KLD) drawn as a line through its points;
 *  - per type, the per-layer relative weight error of every method as bars;
 *  - the table of files (size, bits per weight, PPL, KLD, same-top, seconds
 *    to make, evaluation tokens/s) and every command, as run.
 * The markup is well-formed XML as well as HTML (polyglot XHTML), so a
 * strict parser finds any break; every string from the JSON is escaped.
 * A sweep.json missing a field, or with a number out of range, fails naming
 * the field ("results[2].kld"). */
#ifndef DSQ_EVAL_REPORT_H
#define DSQ_EVAL_REPORT_H

#include <stddef.h>

#include "core/status.h"

/* json: sweep.json's text (len bytes); *html: the page (free with free()). */
dsq_status dsq_report_html(const char *json, size_t len, char **html, size_t *html_len);

#endif
