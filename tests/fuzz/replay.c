/* main() for a harness built without libFuzzer: runs every file named on
 * the command line, and every file inside every folder named, once each,
 * through LLVMFuzzerTestOneInput, in name order. Prints how many ran; exit
 * status 0 when all returned (a finding aborts the process, naming the
 * input on stderr first). An empty folder or a missing path is an error:
 * a regression run that ran nothing must not pass. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    fprintf(stderr, "dsq-fuzz: running %s (%zu bytes)\n", path, n);
    /* An exact-size copy, so that ASan sees a read one past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            int r = run_file(p);
            if (r < 0) ran = -1;
            if (ran >= 0) ran += r;
        }
        free(names[i]);
    }
    free(names);
    if (ran == 0) fprintf(stderr, "%s: no inputs in this folder\n", dir);
    return ran == 0 ? -1 : ran;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|FOLDER...\n", argv[0]);
        return 2;
    }
    int total = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int r = stat(argv[i], &st) != 0 ? (perror(argv[i]), -1) : S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]);
        if (r < 0) bad = 1;
        else total += r;
    }
    fprintf(stderr, "dsq-fuzz: %d inputs ran\n", total);
    return bad;
}
