/* Indices into the Llama block description (formats/block_llama.c), for the
 * block's own forward (runtime/block_llama.c) and nothing else: every other
 * walker iterates the description. */
#ifndef DSQ_FORMATS_BLOCK_LLAMA_H
#define DSQ_FORMATS_BLOCK_LLAMA_H

enum { DSQ_LLAMA_NORM_ATTN = 0, DSQ_LLAMA_NORM_FFN };
enum { DSQ_LLAMA_Q = 0, DSQ_LLAMA_K, DSQ_LLAMA_V, DSQ_LLAMA_O, DSQ_LLAMA_GATE, DSQ_LLAMA_UP, DSQ_LLAMA_DOWN, DSQ_LLAMA_N_LINEARS };
enum { DSQ_LLAMA_G_ATTN_IN = 0, DSQ_LLAMA_G_ATTN_OUT, DSQ_LLAMA_G_MLP_IN, DSQ_LLAMA_G_MLP_OUT };

#endif
