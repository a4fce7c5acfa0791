/* Importance matrices: the legacy .dat (parsed from memory and loaded from
 * a file, which must agree) and the GGUF imatrix (through the file loader,
 * which tells them apart by the magic). A loaded matrix must serialise, and
 * the .dat bytes must parse back to the same entries. */
#include <stdlib.h>
#include <string.h>

#include "formats/imatrix.h"
#include "tests/fuzz/fuzz.h"

static void round_trip(const dsq_imatrix *im)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!dsq_fz_ok(dsq_imatrix_serialize(im, &buf, &len), "serialize")) return;
    dsq_imatrix *back = NULL;
    if (!dsq_fz_ok(dsq_imatrix_parse(buf, len, "serialized", &back), "reparse"))
        dsq_fz_die("our own .dat does not parse: %s", dsq_errmsg());
    if (back->n_entries != im->n_entries) dsq_fz_die("entries changed in a round trip");
    for (size_t i = 0; i < im->n_entries; i++) {
        const dsq_imatrix_entry *a = &im->entries[i], *b = &back->entries[i];
        if (strcmp(a->name, b->name) || a->nval != b->nval || a->ncall != b->ncall ||
            memcmp(a->stored, b->stored, a->nval * sizeof(float)))
            dsq_fz_die("entry %s changed in a round trip", a->name);
        if (dsq_imatrix_find(back, a->name) != b) dsq_fz_die("entry %s not found by name", a->name);
    }
    dsq_imatrix_free(back);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool gguf = size >= 4 && !memcmp(data, "GGUF", 4);
    dsq_imatrix *a = NULL, *b = NULL;
    bool pa = !gguf && dsq_fz_ok(dsq_imatrix_parse(data, size, "fuzz", &a), "dsq_imatrix_parse");
    const char *path = dsq_fz_put(0, "imatrix.dat", data, size);
    bool pb = dsq_fz_ok(dsq_imatrix_load(path, &b), "dsq_imatrix_load");
    if (!gguf && pa != pb) dsq_fz_die("parse says %d but load says %d", pa, pb);
    if (pb) round_trip(b);
    dsq_imatrix_free(a);
    dsq_imatrix_free(b);
    return 0;
}
