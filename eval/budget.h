/* Budgeted GGUF type mixes: every quantized tensor's type chosen from a
 * candidate set so that the file meets a size (or bits per weight) with the
 * least predicted KLD, or a KLD with the least size.
 *
 * Sensitivity, measured in two steps:
 *  1. Per tensor and candidate type: the error that type's own quantizer
 *     (with the tensor's importance weights, as the file will be made)
 *     leaves, weighted per input column by the importance matrix:
 *       e(t, T) = sum_rows sum_j imatrix_j (w_ij - q_ij)^2,
 *     the expected squared error of that linear's outputs per token under a
 *     diagonal input covariance (unweighted for tensors with no entry, and
 *     for all of them without an imatrix).
 *  2. Per group (the tensors of one kind, "attn_v.weight" over all layers,
 *     and token_embd / output on their own): the KLD from the base model on
 *     the calibration chunks with only that group quantized, each tensor at
 *     its reference candidate (the one nearest 4.5 bits per weight). The
 *     group's gain g = KLD / sum of its tensors' reference errors turns
 *     errors into predicted KLD: cost(t, T) = g(group of t) * e(t, T), and
 *     the model's predicted KLD is the sum over tensors, times one measured
 *     factor for how groups compound: the KLD with every group at its
 *     reference over the sum of the groups' KLDs (the check after writing
 *     measures how well that holds).
 * Then quantizers/alloc.h picks the types (exact multiple-choice knapsack).
 * Each group is measured on the base model loaded once, its tensors swapped
 * for in-memory copies made as the GGUF quantizer makes them
 * (eval/model_swap.h; no whole-model file per group); a group with a tensor
 * the swap does not know is measured through a scratch GGUF instead, which
 * also carries the tensors outside the budget in their planned types (memory
 * leaves them as in the base: "only that group quantized"). DSQ_BUDGET_FILES=1
 * takes the scratch files for every group (tests compare the two). The
 * scratch files (such GGUFs, the base log-probs) live next to the output and
 * are removed.
 *
 * A target no candidate set can meet (below the smallest file, a KLD below
 * what the largest types predict) fails with one line naming the least
 * possible value. */
#ifndef DSQ_EVAL_BUDGET_H
#define DSQ_EVAL_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/gguf_quantize.h"
#include "quantizers/alloc.h"

#define DSQ_BUDGET_MAX_CANDIDATES 16

typedef enum dsq_budget_kind {
    DSQ_BUDGET_BPW,  /* bits per weight over every tensor's elements */
    DSQ_BUDGET_SIZE, /* bytes of the whole file */
    DSQ_BUDGET_KLD,  /* predicted mean KLD on the calibration chunks */
} dsq_budget_kind;

typedef struct dsq_budget_opts {
    const dsq_type *candidates; /* NULL: dsq_budget_default_candidates */
    int n_candidates;
    const char *data;    /* calibration text: a dataset name or file (default tinyshakespeare) */
    int ctx;             /* tokens per KLD chunk (default 256) */
    int chunks;          /* chunks (default 8) */
    int threads;         /* <= 0: all */
    const char *scratch; /* path prefix for the scratch files (the output path) */
    /* When set, a size or bpw target no candidate set meets fails as soon as
     * the sizes are known, before any KLD is measured. */
    bool has_target;
    dsq_budget_kind kind;
    double target;
} dsq_budget_opts;

/* Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q8_0: each
 * tensor takes those whose block divides its rows. */
int dsq_budget_default_candidates(dsq_type *out, int cap);

/* "q2_K,q4_K,q8_0" -> types (unknown or unwritable names fail naming them). */
dsq_status dsq_budget_parse_candidates(const char *list, dsq_type *out, int cap, int *n);

typedef struct dsq_budget_option {
    dsq_type type;
    uint64_t bytes; /* unpadded */
    double err;     /* e(t, T) */
} dsq_budget_option;

typedef struct dsq_budget_tensor {
    char *name;
    int group;
    uint64_t n_elements;
    int n_options;
    dsq_budget_option options[DSQ_BUDGET_MAX_CANDIDATES];
    int ref;      /* option measured for the group's gain */
    dsq_type kept; /* its type in the input: what the other groups' scratch files keep */
} dsq_budget_tensor;

typedef struct dsq_budget_group {
    char name[64];
    int n_tensors;
    double err_ref; /* sum of the tensors' reference errors */
    double kld;     /* measured with only this group quantized */
    double gain;
} dsq_budget_group;

typedef struct dsq_budget dsq_budget;

/* Measures the sensitivities of in's quantized tensors under gopt's plan
 * (its ftype, imatrix and overrides decide which tensors are quantized and
 * with which importance). */
dsq_status dsq_budget_measure(const char *in, const dsq_gguf_quantize_options *gopt, const dsq_budget_opts *bo,
                              dsq_budget **out);
void dsq_budget_free(dsq_budget *b);

size_t dsq_budget_n_tensors(const dsq_budget *b);
const dsq_budget_tensor *dsq_budget_tensor_at(const dsq_budget *b, size_t i);
size_t dsq_budget_n_groups(const dsq_budget *b);
const dsq_budget_group *dsq_budget_group_at(const dsq_budget *b, size_t i);

/* The measured compounding factor (KLD with every group at its reference
 * over the sum of the groups' KLDs; 1 for a single group), and the
 * predicted KLD of tensor i at one of its options (both included). */
double dsq_budget_combine(const dsq_budget *b);
double dsq_budget_cost(const dsq_budget *b, size_t i, int option);

typedef struct dsq_budget_solution {
    dsq_gguf_tensor_type *types; /* one per budgeted tensor: pass to dsq_gguf_quantize_options */
    size_t n_types;
    int *choice;           /* option index per budgeted tensor */
    uint64_t file_bytes;   /* predicted exactly (header + padded tensors) */
    uint64_t tensor_bytes; /* every tensor, unpadded */
    uint64_t n_elements;
    double bpw; /* tensor_bytes * 8 / n_elements */
    double predicted_kld;
    dsq_alloc_result alloc;
} dsq_budget_solution;

/* The types meeting target (bits per weight, bytes or KLD by kind). */
dsq_status dsq_budget_solve(const dsq_budget *b, dsq_budget_kind kind, double target, dsq_budget_solution *sol);
void dsq_budget_solution_free(dsq_budget_solution *sol);

/* The file's predicted KLD and size for given per-tensor types (llama.cpp's
 * mix: the plan's own types), for comparisons at equal size. */
dsq_status dsq_budget_predict(const dsq_budget *b, const dsq_gguf_quantize_report *plan, double *kld);

/* Mean KLD of a written GGUF from the base on the calibration chunks. */
dsq_status dsq_budget_check(const dsq_budget *b, const char *gguf, double *kld);

/* Group gi's KLD (SIZE_MAX: every group at once) measured again, through a
 * scratch GGUF (file) or in memory; the two agree (tests/test_budget.c). */
dsq_status dsq_budget_group_kld(dsq_budget *b, size_t gi, bool file, double *kld);
/* Group measurements made in memory so far. */
size_t dsq_budget_n_in_memory(const dsq_budget *b);

#endif
