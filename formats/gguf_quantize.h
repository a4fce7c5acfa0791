/* `dsquant gguf`: quantizes a model into a GGUF file the way llama-quantize
 * does (llama.cpp src/llama-quant.cpp llama_model_quantize_impl and
 * examples/quantize/quantize.cpp at c392e509).
 *
 * The input is a GGUF file (any architecture; every KV copied) or a Hugging
 * Face folder, read through the HF -> GGUF source of formats/convert.h: the
 * same names, Q/K permutation and KVs as `dsquant convert`, but no
 * intermediate file. A HF tensor counts as stored in its safetensors type
 * (F32, F16 or BF16; other floats as F32), norms and 1-D tensors as F32, so a
 * folder gives the same bytes as the F32 GGUF of the same weights.
 *
 * Per tensor type: quantizers/mixes.h. Tensors are visited and written in
 * llama.cpp's order (dsq_mix_order). A tensor that keeps its type is copied
 * byte for byte; the others are taken to F32 (dequantized when quantized,
 * which needs allow_requantize) and quantized row by row on n_threads
 * threads; the bytes never depend on the thread count. Memory: one tensor's
 * F32 values and its quantized bytes at a time.
 *
 * Output KVs as llama-quantize writes them: the input's KVs, then
 * general.quantization_version = 2 and general.file_type = the ftype (in place
 * when present), split.* keys removed, and with an importance matrix
 * quantize.imatrix.file, quantize.imatrix.dataset (when the file names one),
 * quantize.imatrix.entries_count (i32) and quantize.imatrix.chunks_count (i32,
 * when > 0).
 *
 * Every weight (copied tensors included, as llama.cpp validates every tensor
 * it loads) must be finite: a NaN/Inf stops the run naming the tensor, row and
 * column. On any failure the output is not created. */
#ifndef DSQ_FORMATS_GGUF_QUANTIZE_H
#define DSQ_FORMATS_GGUF_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/imatrix.h"
#include "quantizers/mixes.h"

/* Bytes made elsewhere for tensors of the plan (GPTQ or AWQ into blocks,
 * and AWQ's folded norms; calibration/gguf_calib.h), asked for every tensor:
 * get sets *bytes to the finished tensor (the planned type, nbytes long,
 * valid until the next call) or NULL to have the tensor quantized (or
 * copied) here as usual. */
typedef struct dsq_gguf_provider {
    dsq_status (*get)(void *user, const char *name, dsq_type type, uint64_t nbytes, const void **bytes);
    void *user;
    const char *method; /* what made them, for the log and the report ("gptq") */
} dsq_gguf_provider;

/* A type forced on one tensor (by its GGUF name) over the mix's choice, as
 * llama-quantize's --tensor-type does; budgets (eval/budget.h) set them. */
typedef struct dsq_gguf_tensor_type {
    const char *name;
    dsq_type type;
} dsq_gguf_tensor_type;

typedef struct dsq_gguf_quantize_options {
    dsq_ftype ftype;
    bool pure;             /* --pure: every quantized tensor gets the ftype's default type */
    bool leave_output;     /* --leave-output: output.weight keeps its type */
    bool allow_requantize; /* quantized input tensors may be dequantized and quantized again */
    bool overwrite;        /* replace an existing output */
    dsq_type output_type;     /* --output-type, or DSQ_MIX_NO_TYPE */
    dsq_type token_embd_type; /* --token-embedding-type, or DSQ_MIX_NO_TYPE */
    /* Importance matrix: imatrix when the caller loaded (and maybe filtered)
     * one, else loaded from imatrix_file; imatrix_file is what the output's
     * quantize.imatrix.file records. Both NULL: none. */
    const dsq_imatrix *imatrix;
    const char *imatrix_file;
    int n_threads; /* 0: one per core */
    const dsq_gguf_provider *provider; /* NULL: every tensor quantized here */
    /* Per-tensor types applied after the mix: every name must be a tensor of
     * the input, the type writable and its block must divide the row; a
     * tensor given its stored type is copied. */
    const dsq_gguf_tensor_type *tensor_types;
    size_t n_tensor_types;
} dsq_gguf_quantize_options;

/* ftype with every option off, no overrides, no imatrix, all cores. */
dsq_gguf_quantize_options dsq_gguf_quantize_defaults(dsq_ftype ftype);

/* What happened to one tensor, in output order. */
typedef struct dsq_gguf_quantize_tensor {
    char *name;
    dsq_type type_in;  /* as stored in the input (safetensors type for a HF folder) */
    dsq_type type_out;
    int n_dims;
    int64_t ne[4];     /* ggml order: ne[0] is the row length */
    uint64_t bytes_in, bytes_out;
    bool quantized;    /* false: copied with its type */
    bool fallback;     /* the block-size fallback chose the type */
    bool imatrix;      /* quantized with importance weights */
    bool provided;     /* the bytes came from opt->provider */
    char reason[128];  /* the mix's reason, from dsq_mix_choice */
} dsq_gguf_quantize_tensor;

typedef struct dsq_gguf_quantize_report {
    dsq_ftype ftype;
    size_t n_tensors;
    dsq_gguf_quantize_tensor *tensors;
    uint64_t n_elements; /* all tensors */
    uint64_t bytes_in, bytes_out;
    int n_quantized, n_copied, n_fallback, n_imatrix, n_provided;
    /* The file on disk: header (KVs, tensor infos, padding) + data, each
     * tensor padded to the alignment. */
    uint64_t header_bytes, file_bytes;
    uint32_t alignment;
    double seconds;
} dsq_gguf_quantize_report;

void dsq_gguf_quantize_report_free(dsq_gguf_quantize_report *r);

/* in: a GGUF file or a HF folder; out: the GGUF file to write atomically
 * (refused when it exists without opt->overwrite, and when it is the input).
 * report (may be NULL) receives a summary to free with
 * dsq_gguf_quantize_report_free; it is set only on success. */
dsq_status dsq_gguf_quantize(const char *in, const char *out, const dsq_gguf_quantize_options *opt,
                             dsq_gguf_quantize_report **report);

/* The plan alone: every tensor's record (name, types, shape, bytes) in
 * output order, as dsq_gguf_quantize would write it, with nothing read
 * beyond the headers and nothing written. */
dsq_status dsq_gguf_quantize_plan(const char *in, const dsq_gguf_quantize_options *opt,
                                  dsq_gguf_quantize_report **report);

/* Every tensor the plan quantizes, in output order, as F32 values (x, the
 * record's ne[0] x rows) with its importance weights (imatrix: ne[0] x ne[2]
 * values, or NULL without an entry). Nothing is written. fn's failure ends
 * the walk and is returned. */
typedef dsq_status (*dsq_gguf_visit_fn)(void *user, const dsq_gguf_quantize_tensor *t, const float *x,
                                        const float *imatrix);
dsq_status dsq_gguf_quantize_visit(const char *in, const dsq_gguf_quantize_options *opt, dsq_gguf_visit_fn fn,
                                   void *user);

#endif
