/* The dataset ZIP reader: one member out of an archive, under a size
 * bound. Byte 0 picks the member name and the bound, the rest is the
 * archive. What comes out must fit the bound and be NUL-terminated. */
#include <stdlib.h>
#include <string.h>

#include "datasets/download.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const members[] = {"wikitext-2-raw/wiki.test.raw", "a.txt", "", "x"};
    static const uint64_t bounds[] = {1u << 20, 64, 0, 4096};
    if (size < 1) return 0;
    const char *member = members[data[0] & 3];
    uint64_t max_out = bounds[(data[0] >> 2) & 3];
    void *out = NULL;
    size_t len = 0;
    /* An exact-size copy of the archive, so that a read past its end is seen. */
    uint8_t *zip = malloc(size - 1 ? size - 1 : 1);
    memcpy(zip, data + 1, size - 1);
    if (dsq_fz_ok(dsq_zip_extract(zip, size - 1, member, &out, &len, max_out), "dsq_zip_extract")) {
        if (len > max_out) dsq_fz_die("%zu bytes out under a bound of %llu", len, (unsigned long long)max_out);
        if (((const char *)out)[len] != 0) dsq_fz_die("the member is not NUL-terminated");
        free(out);
    }
    free(zip);
    return 0;
}
