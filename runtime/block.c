/* The block-implementation table: one row per block description. */
#include "runtime/block.h"

#include <stddef.h>

static const dsq_block_impl *const g_impls[] = {&dsq_block_impl_llama, &dsq_block_impl_qwen2, &dsq_block_impl_deepseek2};

const dsq_block_impl *dsq_block_impl_of(const dsq_block_desc *d)
{
    for (size_t i = 0; i < sizeof g_impls / sizeof g_impls[0]; i++)
        if (g_impls[i]->desc == d) return g_impls[i];
    return NULL;
}
