/* Tokenizer description between Hugging Face files (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json) and GGUF tokenizer.* metadata. */
#ifndef DSQ_FORMATS_HF_TOKENIZER_H
#define DSQ_FORMATS_HF_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/gguf.h"

/* Reads <dir>/tokenizer.json (+ tokenizer_config.json, config.json,
 * chat_template.jinja / chat_template.json when present, as gguf-py's
 * SpecialVocab does) and sets every tokenizer.* key llama.cpp's converter
 * writes: tokenizer.ggml.model ("gpt2" for byte-level BPE, "llama" for
 * SentencePiece-style BPE with byte fallback), .pre, .tokens, .token_type,
 * .merges (gpt2), .scores (llama), special token ids, add_bos/add_eos/add_sep,
 * add_space_prefix, tokenizer.chat_template (and named templates).
 *
 * Decisions where the converter needs transformers or cannot be followed:
 * - .pre: the pre_tokenizer (and normalizer) JSON is compared with a table of
 *   the HF pre-tokenizers llama.cpp names (hf_tokenizer.c); where two names
 *   share one pre-tokenizer a token only that family has decides (smollm vs
 *   starcoder: <|im_start|>; deepseek-r1-qwen vs qwen2: its BOS). No match:
 *   a warning through the logger and no .pre key (llama.cpp then uses
 *   'default'); llama.cpp's converter would stop instead.
 * - ids missing from the vocabulary up to config.json's vocab_size become
 *   "[PAD<id>]" UNUSED tokens, as get_vocab_base pads.
 * - added tokens: special or looking special -> CONTROL, else USER_DEFINED
 *   with U+2581 turned into spaces; added tokens with normalized false are
 *   not re-normalised through transformers as the converter does.
 * - "llama": the UNKNOWN piece is model.unk_token; scores are -(rank of the
 *   first merge that makes the token), 0 for byte/control pieces, -1000 for
 *   user-defined ones, so llama.cpp's highest-score-first merging follows
 *   the merge order (the converter's LlamaHfVocab gives every token -1000).
 * - CodeLlama's FIM ids (vocab_size 32016) are not added. */
dsq_status dsq_tokenizer_hf_to_gguf(const char *dir, dsq_gguf_writer *w);

/* Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json
 * into dir (a temporary output folder) from GGUF metadata, so that
 * transformers' AutoTokenizer loads them and dsq_tokenizer_hf_to_gguf gives
 * back the same tokenizer.* keys (with the config.json the converter writes
 * beside them: its vocab_size restores trailing "[PAD<id>]" fillers, its
 * bos/eos ids back up the special tokens).
 *
 * gpt2: the pre-tokenizer table row named by .pre (unknown names are
 * refused; a missing .pre exports llama.cpp's 'default' regexes). llama:
 * legacy Llama normalizer (Prepend + Replace U+2581), byte fallback, merges
 * derived from the scores as transformers' SentencePieceExtractor does.
 * Added tokens (CONTROL/UNKNOWN/USER_DEFINED) are matched on raw text as
 * llama.cpp matches them. BOS/EOS are added by a TemplateProcessing that
 * follows add_bos/add_eos (llama.cpp's defaults when absent: SentencePiece
 * and llama-bpe add BOS); tokenizer_config.json repeats only the flags the
 * GGUF has. tokenizer_class is PreTrainedTokenizerFast.
 * Not carried back: SentencePiece scores (rebuilt from merge ranks, same
 * order), special ids of ordinary (NORMAL) tokens other than bos/eos
 * (warned), and model.vocab keeps the first of tokens with equal text. */
dsq_status dsq_tokenizer_gguf_to_hf(const dsq_gguf *g, const char *dir);

#endif
