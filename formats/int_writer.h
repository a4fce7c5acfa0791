/* The INTn artifact writer (formats/int_artifact.h): a Hugging Face folder
 * with model.safetensors (sharded at 5 GB), config.json with its
 * quantization_config (and quantize_config.json for GPTQ), the tokenizer and
 * generation_config.json. Tensors stream in the order they are planned:
 * embedding, then per layer its norms and linears in the block
 * description's order (those the layer has; an MoE router in F32 with its
 * selection bias), then an MoE layer's routed experts one by one (gate, up,
 * down each), final norm, lm_head unless tied; the plan comes from
 * the packers' shape functions, so nothing is packed twice.
 *
 * Use: dsq_int_writer_new (plans and starts the file), dsq_int_writer_rows
 * for the embedding, dsq_int_writer_layer for each layer in order,
 * dsq_int_writer_vector for the final norm, dsq_int_writer_rows for lm_head
 * (when not tied), dsq_int_writer_finish (side files), dsq_int_writer_free.
 * Write into a dsq_outdir's temporary folder so nothing half-written is
 * ever left under the final name.
 *
 * 8-bit schemes (spec w8): each planned linear comes as q8 (formats/
 * pack_w8.h lays it out for compressed-tensors, fp8 or modelopt), with FP8
 * KV-cache scales per layer when spec kv_fp8; config.json gets the
 * producer's quantization_config (formats/pack_w8_config.h) and a modelopt
 * folder also hf_quant_config.json. A scheme the format cannot express, or a
 * block vLLM cannot tile, fails in dsq_int_writer_new, before any tensor.
 * GPTQ: desc_act is true only when act order stores a g_idx (no static
 * groups); vLLM refuses desc_act true. */
#ifndef DSQ_FORMATS_INT_WRITER_H
#define DSQ_FORMATS_INT_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/fileio.h"
#include "core/status.h"
#include "formats/block.h"
#include "formats/checkpoint.h"
#include "formats/int_artifact.h"
#include "quantizers/intq.h"
#include "quantizers/w8.h"

/* How the linears are stored. */
typedef struct dsq_int_spec {
    dsq_int_format format;
    int bits, group; /* group -1: one per row */
    bool sym;
    bool act_order, static_groups; /* GPTQ's desc_act / static_groups (act order stores g_idx unless static) */
    double damp;                   /* GPTQ's damp_percent, recorded in the config */
    dsq_intq_grid grid;            /* the groups' grid, recorded where the format has a key for it */
    /* 8-bit schemes (SmoothQuant W8A8, FP8): w8 set, the layers carry q8 */
    bool w8;
    dsq_w8_scheme w8s;
    bool kv_fp8; /* the layers carry k_scale / v_scale */
    /* 8-bit: write activation groups and fused linears' weight blocks that do
     * not tile their tensor (the last group or block partial, as
     * llm-compressor does); compressed-tensors, transformers and our runtime
     * read them, vLLM refuses to load them. Off: such a linear is an error. */
    bool partial_blocks;
} dsq_int_spec;

/* The source model as the writer needs to know it. */
typedef struct dsq_int_source {
    const dsq_checkpoint *ckpt; /* tokenizer and side files come from it */
    const dsq_arch *arch;
    const dsq_block_desc *block;
    int64_t vocab;
    bool tied;       /* lm_head is the embedding */
    bool permute_qk; /* the rows of permuted linears are in llama.cpp's GGUF order (undone on write) */
    /* [n_layers x block->n_linears]: the linear is quantized / has a bias */
    const bool *quantized, *has_bias;
} dsq_int_source;

/* One finished layer, indexed as the block description. */
typedef struct dsq_int_layer {
    int layer;
    const float *norm[DSQ_BLOCK_MAX_NORMS];   /* [dim] */
    const dsq_intq *q[DSQ_BLOCK_MAX_LINEARS]; /* NULL: written dense (F16) and listed as not converted */
    const float *w[DSQ_BLOCK_MAX_LINEARS];    /* F32 [out x in], used when q is NULL */
    const float *bias[DSQ_BLOCK_MAX_LINEARS]; /* F32 [out] or NULL */
    const dsq_w8q *q8[DSQ_BLOCK_MAX_LINEARS]; /* 8-bit schemes: used instead of q (NULL: dense) */
    float k_scale, v_scale;                   /* FP8 KV-cache scales (spec kv_fp8), else 0 */
    const float *router_bias;                 /* MoE noaux_tc: the router's e_score_correction_bias [n_routed] */
} dsq_int_layer;

/* One finished routed expert of an MoE layer: its expert linears in the
 * block description's order (gate, up, down), as in dsq_int_layer. */
#define DSQ_INT_EXPERT_LINEARS 3
typedef struct dsq_int_expert {
    int layer, expert;
    const dsq_intq *q[DSQ_INT_EXPERT_LINEARS];
    const float *w[DSQ_INT_EXPERT_LINEARS];
    const dsq_w8q *q8[DSQ_INT_EXPERT_LINEARS];
} dsq_int_expert;

/* Rows [r0, r0 + nr) of a matrix as F32, nr x cols (the embedding, lm_head). */
typedef dsq_status (*dsq_int_rows_fn)(void *user, int64_t r0, int64_t nr, float *dst);

typedef struct dsq_int_writer dsq_int_writer;

/* Plans every tensor and starts model*.safetensors in dir. src and spec must
 * outlive the writer. */
dsq_status dsq_int_writer_new(const char *dir, const dsq_int_source *src, const dsq_int_spec *spec,
                              dsq_int_writer **out);
/* A [rows x cols] matrix streamed as F16 in chunks of rows. */
dsq_status dsq_int_writer_rows(dsq_int_writer *w, int64_t rows, int64_t cols, dsq_int_rows_fn fn, void *user);
/* A vector as F16. */
dsq_status dsq_int_writer_vector(dsq_int_writer *w, const float *x, size_t n);
dsq_status dsq_int_writer_layer(dsq_int_writer *w, const dsq_int_layer *l);
/* An MoE layer's routed experts, after its dsq_int_writer_layer, in expert order. */
dsq_status dsq_int_writer_expert(dsq_int_writer *w, const dsq_int_expert *x);
/* Closes the tensor files and writes config.json (with quantization_config),
 * quantize_config.json (GPTQ), generation_config.json and the tokenizer
 * files into d's folder. */
dsq_status dsq_int_writer_finish(dsq_int_writer *w, const dsq_outdir *d);
/* GPTQ v1 zero points of 0 that were stored wrapped (formats/pack_gptq.h). */
int64_t dsq_int_writer_wrapped(const dsq_int_writer *w);
void dsq_int_writer_free(dsq_int_writer *w);

#endif
