/* Tokenizer description between Hugging Face files (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json) and GGUF tokenizer.* metadata. */
#ifndef DSQ_FORMATS_HF_TOKENIZER_H
#define DSQ_FORMATS_HF_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/gguf.h"

/* Reads <dir>/tokenizer.json (+ tokenizer_config.json, generation_config.json
 * when present) and sets every tokenizer.* key llama.cpp's converter writes:
 * tokenizer.ggml.model ("gpt2" for byte-level BPE, "llama" for SentencePiece-
 * style BPE with byte fallback), .pre (recognised from the pre-tokenizer; see
 * docs/formats.md), .tokens, .token_type, .merges, .scores (llama), special
 * token ids, add_bos_token/add_eos_token, tokenizer.chat_template. */
dsq_status dsq_tokenizer_hf_to_gguf(const char *dir, dsq_gguf_writer *w);

/* Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json
 * into dir (a temporary output folder) from GGUF metadata, so that
 * transformers' AutoTokenizer loads them and dsq_tokenizer_hf_to_gguf gives
 * back the same tokenizer.* keys. */
dsq_status dsq_tokenizer_gguf_to_hf(const dsq_gguf *g, const char *dir);

#endif
