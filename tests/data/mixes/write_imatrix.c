/* Writes a legacy imatrix .dat with dsquant's formats/imatrix.c for every
 * weight of a fixture's tensor list, so that the real llama-quantize can be
 * run with --imatrix on the same model (see README.md). Values are arbitrary
 * positive numbers; only their presence and sizes matter for the type choice.
 * Usage: write_imatrix FIXTURE.txt OUT.dat */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/imatrix.h"

int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    FILE *f = fopen(argv[1], "r");
    if (!f) return 1;
    dsq_imatrix *im;
    if (dsq_imatrix_new(&im) != DSQ_OK) return 1;
    char line[512];
    static float v[1 << 16];
    while (fgets(line, sizeof line, f)) {
        char name[128], shape[64];
        if (line[0] == '#' || sscanf(line, "%127s %63s", name, shape) != 2) continue;
        long ne[3] = {1, 1, 1};
        int nd = sscanf(shape, "%ldx%ldx%ld", &ne[0], &ne[1], &ne[2]);
        if (nd < 2 || strstr(name, "_norm") || strstr(name, "gate_inp")) continue;
        long n = ne[0] * ne[2];
        for (long i = 0; i < n; i++) v[i] = 0.5f + (float)((i * 7919) % 1000) / 1000.0f;
        if (dsq_imatrix_add(im, name, 10, v, (uint32_t)n) != DSQ_OK) {
            fprintf(stderr, "%s\n", dsq_errmsg());
            return 1;
        }
    }
    fclose(f);
    if (dsq_imatrix_set_trailer(im, 10, "synthetic-calibration") != DSQ_OK ||
        dsq_imatrix_save(im, argv[2], true) != DSQ_OK) {
        fprintf(stderr, "%s\n", dsq_errmsg());
        return 1;
    }
    printf("%zu entries\n", im->n_entries);
    dsq_imatrix_free(im);
    return 0;
}
