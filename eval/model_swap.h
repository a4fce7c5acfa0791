/* A loaded model's tensors, named as in a GGUF file, swapped for copies
 * quantized in memory, and put back: what a GGUF written with those tensors in
 * those types would run, without writing or reading a whole-model file
 * (eval/budget.c measures each group of tensors this way).
 *
 * The copy is made as the GGUF quantizer makes the tensor (formats/
 * gguf_quantize.c): its values in F32, then the type's quantizer row by row
 * with the tensor's imatrix entry (dsq_imatrix_for_tensor; a stacked expert
 * tensor's entry split per expert). Names: token_embd.weight (and the output
 * head when it is tied to it), output.weight, and blk.N.<stem>.weight for
 * every linear of the block description (stacked experts included) and
 * llama.cpp's attn_k_b / attn_v_b. A context made before a swap may hold
 * derived copies of the weights (MLA's absorbed heads): measure on a new one. */
#ifndef DSQ_EVAL_MODEL_SWAP_H
#define DSQ_EVAL_MODEL_SWAP_H

#include <stdbool.h>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/imatrix.h"
#include "runtime/model.h"

typedef struct dsq_swap dsq_swap;

/* Whether `name` names a tensor of m this module can swap. */
bool dsq_swap_supported(const dsq_model *m, const char *name);

/* Tensor `name` of m replaced by its copy in type (importance from im, may be
 * NULL); *sw collects what to put back (NULL before the first swap). On
 * failure nothing of this call stays swapped. */
dsq_status dsq_swap_tensor(dsq_model *m, dsq_swap **sw, const char *name, dsq_type type, const dsq_imatrix *im);

/* Every swapped tensor back as it was, in reverse order; frees sw (NULL: nothing). */
void dsq_swap_restore(dsq_model *m, dsq_swap *sw);

#endif
