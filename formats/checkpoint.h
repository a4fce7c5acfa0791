/* One way to open any model path: a GGUF file, a Hugging Face folder
 * (config.json + safetensors) or a lone .safetensors file. Gives the kind,
 * the architecture when it can be read, and a tensor view per index; the
 * format-specific objects stay reachable for metadata (dsquant info). */
#ifndef DSQ_FORMATS_CHECKPOINT_H
#define DSQ_FORMATS_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"

typedef enum dsq_ckpt_kind {
    DSQ_CKPT_GGUF = 0,
    DSQ_CKPT_HF_DIR,      /* a folder of safetensors shards, with or without config.json */
    DSQ_CKPT_SAFETENSORS, /* one .safetensors file, no config */
} dsq_ckpt_kind;

typedef struct dsq_checkpoint {
    dsq_ckpt_kind kind;
    char *path;
    /* The architecture is optional: info still lists the tensors of a file
     * whose architecture we do not handle. arch_note says why it is absent. */
    bool has_arch;
    dsq_arch arch;
    dsq_status arch_status; /* why has_arch is false: the code... */
    char arch_note[512];    /* ...and its message */
    uint64_t n_tensors;
    dsq_gguf *gguf;   /* kind GGUF, else NULL */
    dsq_st_model *st; /* kinds HF_DIR and SAFETENSORS, else NULL */
} dsq_checkpoint;

/* The kind is decided by what path is: a folder -> HF_DIR, a file starting
 * with the GGUF magic -> GGUF, any other file -> SAFETENSORS. A file whose
 * architecture is known but whose tensors contradict it is refused here
 * (dsq_checkpoint_check). */
dsq_status dsq_checkpoint_open(const char *path, dsq_checkpoint **out);
void dsq_checkpoint_close(dsq_checkpoint *c);
dsq_status dsq_checkpoint_tensor(const dsq_checkpoint *c, uint64_t i, dsq_tensor *out);
/* "gguf", "hf", "safetensors". */
const char *dsq_checkpoint_kind_name(dsq_ckpt_kind k);
/* The shapes of the tensors the architecture names, where present: the
 * embedding and head against vocab_size and hidden_size, every norm and
 * linear of every layer against the block description (formats/block.h).
 * dsq_checkpoint_open runs it, so every command gives a file the same
 * verdict (formats/checkpoint_check.c). A no-op without an architecture. */
dsq_status dsq_checkpoint_check(const dsq_checkpoint *c);
/* Fails (with the recorded reason) when the architecture is not known. */
dsq_status dsq_checkpoint_require_arch(const dsq_checkpoint *c);

#endif
