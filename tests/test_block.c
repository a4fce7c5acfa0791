/* The tables the architecture rests on: block descriptions, block
 * implementations, methods; and the packers' shape functions against the
 * packers themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calibration/method.h"
#include "formats/block.h"
#include "formats/hf_names.h"
#include "formats/int_artifact.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "runtime/block.h"

static const dsq_arch_family g_families[] = {DSQ_ARCH_LLAMA, DSQ_ARCH_QWEN2, DSQ_ARCH_DEEPSEEK2};

static dsq_arch arch_of(dsq_arch_family f)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = f;
    a.hidden_size = 64;
    a.intermediate_size = 96;
    a.n_layers = 3;
    a.n_heads = 4;
    a.n_kv_heads = 2;
    a.head_dim = 16;
    if (f == DSQ_ARCH_DEEPSEEK2) {
        a.n_kv_heads = a.n_heads;
        a.mla = (dsq_arch_mla){32, 48, 8, 8, 16, true, 0, 0};
        a.head_dim = 16;
        a.moe = (dsq_arch_moe){8, 1, 2, 24, 4, 2, 1, 1, DSQ_TOPK_NOAUX_TC, DSQ_SCORING_SIGMOID, true, 2.5};
    }
    return a;
}

/* Every rule a walker of a description relies on. */
static void check_desc(const dsq_block_desc *d)
{
    assert_true(d->n_norms > 0 && d->n_norms <= DSQ_BLOCK_MAX_NORMS);
    assert_true(d->n_linears > 0 && d->n_linears <= DSQ_BLOCK_MAX_LINEARS);
    assert_true(d->n_groups > 0 && d->n_groups <= DSQ_BLOCK_MAX_GROUPS);
    assert_true(d->n_halves > 0);
    for (int i = 0; i < d->n_linears; i++) {
        const dsq_block_linear *l = &d->linears[i];
        assert_true(l->group >= 0 && l->group < d->n_groups);
        assert_int_equal(dsq_block_find_linear(d, l->role), i); /* roles are unique */
    }
    int last_half = 0;
    for (int g = 0; g < d->n_groups; g++) {
        const dsq_block_group *gr = &d->groups[g];
        int ids[DSQ_BLOCK_MAX_LINEARS];
        int n = dsq_block_group_members(d, g, ids, DSQ_BLOCK_MAX_LINEARS);
        assert_true(n >= 1);
        assert_int_equal(dsq_block_group_first(d, g), ids[0]);
        assert_true(gr->half >= last_half && gr->half < d->n_halves); /* groups run in half order */
        last_half = gr->half;
        if (!gr->loss_half) assert_int_equal(n, 1); /* the quadratic-form loss is per linear */
        if (gr->src == DSQ_SRC_NORM) assert_true(gr->src_index >= 0 && gr->src_index < d->n_norms);
        else assert_true(gr->src_index >= 0 && gr->src_index < d->n_linears);
        if (gr->tail) /* the half's last group */
            for (int h = g + 1; h < d->n_groups; h++) assert_true(d->groups[h].half != gr->half);
        /* members share the input width */
        for (int k = 1; k < n; k++) assert_int_equal(d->linears[ids[k]].in, d->linears[ids[0]].in);
    }
    for (int h = 0; h < d->n_halves; h++) {
        int tails = 0;
        for (int g = 0; g < d->n_groups; g++) tails += d->groups[g].half == h && d->groups[g].tail;
        assert_int_equal(tails, 1);
    }
}

static void test_every_family_has_a_block(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof g_families / sizeof g_families[0]; i++) {
        dsq_arch a = arch_of(g_families[i]);
        const dsq_block_desc *d = dsq_block_desc_of(&a);
        assert_non_null(d);
        check_desc(d);
        const dsq_block_impl *impl = dsq_block_impl_of(d);
        assert_non_null(impl);
        assert_ptr_equal(impl->desc, d);
    }
    dsq_arch q = arch_of(DSQ_ARCH_QWEN2), l = arch_of(DSQ_ARCH_LLAMA);
    assert_ptr_equal(dsq_block_desc_of(&q), &dsq_block_qwen2);
    assert_ptr_equal(dsq_block_desc_of(&l), &dsq_block_llama);
}

/* The name maps come from the description: every norm and linear of every
 * layer maps HF -> GGUF -> HF, biases exactly where the rule allows them. */
static void test_names_follow_the_description(void **state)
{
    (void)state;
    for (size_t f = 0; f < sizeof g_families / sizeof g_families[0]; f++) {
        dsq_arch a = arch_of(g_families[f]);
        const dsq_block_desc *d = dsq_block_desc_of(&a);
        if (!(d->caps & DSQ_BLOCK_CAN_GGUF)) continue; /* no GGUF names yet: the converters refuse it */
        for (int l = 0; l < a.n_layers; l++)
            for (int i = 0; i < d->n_linears; i++) {
                /* routed experts are stacked and kv_b split by the converter, not name-mapped */
                if (d->linears[i].expert || !strcmp(d->linears[i].role, "kv_b")) continue;
                char hf[128], gg[128], back[128];
                snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", l, d->linears[i].hf);
                dsq_permute_kind perm;
                assert_int_equal(dsq_name_hf_to_gguf(&a, hf, gg, sizeof gg, &perm), DSQ_OK);
                char want[128];
                snprintf(want, sizeof want, "blk.%d.%s.weight", l, d->linears[i].gguf);
                assert_string_equal(gg, want);
                assert_int_equal(perm, d->linears[i].perm);
                assert_int_equal(dsq_name_gguf_to_hf(&a, gg, back, sizeof back, NULL), DSQ_OK);
                assert_string_equal(back, hf);
                snprintf(hf, sizeof hf, "model.layers.%d.%s.bias", l, d->linears[i].hf);
                dsq_status s = dsq_name_hf_to_gguf(&a, hf, gg, sizeof gg, NULL);
                assert_int_equal(s == DSQ_OK, dsq_block_linear_has_bias(&d->linears[i], &a));
            }
    }
    /* Qwen2: q/k/v biased, no permutation; Llama: q/k permuted */
    assert_true(dsq_block_linear_has_bias(&dsq_block_qwen2.linears[0], &(dsq_arch){.family = DSQ_ARCH_QWEN2}));
    assert_int_equal(dsq_block_llama.linears[dsq_block_find_linear(&dsq_block_llama, "k")].perm, DSQ_PERMUTE_K);
    assert_int_equal(dsq_block_qwen2.linears[dsq_block_find_linear(&dsq_block_qwen2, "k")].perm, DSQ_PERMUTE_NONE);
}

/* DeepSeek's layers differ: presence follows q_lora_rank and the MoE layout,
 * widths follow the MLA and MoE fields, and the drivers without support
 * refuse it by name. */
static void test_deepseek_layers(void **state)
{
    (void)state;
    dsq_arch a = arch_of(DSQ_ARCH_DEEPSEEK2);
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "DeepseekV3ForCausalLM");
    const dsq_block_desc *d = dsq_block_desc_of(&a);
    assert_ptr_equal(d, &dsq_block_deepseek2);
    int q = dsq_block_find_linear(d, "q"), qa = dsq_block_find_linear(d, "q_a"), gate = dsq_block_find_linear(d, "gate");
    int ex = dsq_block_find_linear(d, "up_exps"), sh = dsq_block_find_linear(d, "down_shexp");
    int router = dsq_block_find_linear(d, "router");
    assert_true(q >= 0 && qa >= 0 && gate >= 0 && ex >= 0 && sh >= 0 && router >= 0);
    /* layer 0 dense, 1 and 2 MoE (first_dense 1) */
    assert_true(dsq_block_linear_present(d, &a, 0, gate) && !dsq_block_linear_present(d, &a, 0, ex));
    assert_true(!dsq_block_linear_present(d, &a, 1, gate) && dsq_block_linear_present(d, &a, 1, ex));
    assert_true(dsq_block_linear_present(d, &a, 2, sh) && dsq_block_linear_present(d, &a, 2, router));
    assert_true(d->linears[ex].expert && d->linears[router].router && !d->linears[sh].expert);
    /* q_lora_rank 32: q_a and its norm, no plain q; 0: the other way */
    assert_true(dsq_block_linear_present(d, &a, 0, qa) && !dsq_block_linear_present(d, &a, 0, q));
    int qa_norm = -1;
    for (int i = 0; i < d->n_norms; i++)
        if (!strcmp(d->norms[i].role, "q_a_norm")) qa_norm = i;
    assert_true(qa_norm >= 0 && dsq_block_norm_present(d, &a, 0, qa_norm));
    assert_int_equal(dsq_block_norm_dim(d, &a, qa_norm), 32);
    a.mla.q_lora_rank = 0;
    assert_true(!dsq_block_linear_present(d, &a, 0, qa) && dsq_block_linear_present(d, &a, 0, q));
    assert_false(dsq_block_norm_present(d, &a, 0, qa_norm));
    /* shapes: kv_a is latent + rope, kv_b per head nope + v, o reads heads x v */
    int64_t out, in;
    dsq_block_linear_shape(d, &a, dsq_block_find_linear(d, "kv_a"), &out, &in);
    assert_int_equal(out, 48 + 8);
    dsq_block_linear_shape(d, &a, dsq_block_find_linear(d, "kv_b"), &out, &in);
    assert_true(out == 4 * (8 + 16) && in == 48);
    dsq_block_linear_shape(d, &a, dsq_block_find_linear(d, "o"), &out, &in);
    assert_true(out == 64 && in == 4 * 16);
    dsq_block_linear_shape(d, &a, sh, &out, &in);
    assert_true(out == 64 && in == 24);
    dsq_block_linear_shape(d, &a, router, &out, &in);
    assert_true(out == 8 && in == 64);
    /* no shared experts: none present */
    a.moe.n_shared = 0;
    assert_false(dsq_block_linear_present(d, &a, 1, sh));
    assert_int_equal(dsq_block_require(d, &a, DSQ_BLOCK_CAN_CALIBRATE | DSQ_BLOCK_CAN_GGUF, "m"), DSQ_OK);
    dsq_block_desc none = *d; /* a description without the drivers' support is refused by name */
    none.caps = 0;
    assert_int_equal(dsq_block_require(&none, &a, DSQ_BLOCK_CAN_GGUF, "m"), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "DeepseekV3ForCausalLM"));
    dsq_arch l = arch_of(DSQ_ARCH_LLAMA);
    assert_int_equal(dsq_block_require(dsq_block_desc_of(&l), &l, DSQ_BLOCK_CAN_CALIBRATE | DSQ_BLOCK_CAN_GGUF, "m"),
                     DSQ_OK);
}

static void test_method_table(void **state)
{
    (void)state;
    const char *names[] = {"rtn", "awq", "gptq", "smoothquant", "fp8"};
    for (size_t i = 0; i < 5; i++) {
        const dsq_method *m = dsq_method_find(names[i]);
        assert_non_null(m);
        assert_string_equal(m->name, names[i]);
        assert_non_null(m->layer);
    }
    assert_null(dsq_method_find("smoothquant-typo"));
    assert_null(dsq_method_find(NULL));
    int n = 0;
    while (dsq_method_at(n)) n++;
    assert_int_equal(n, 5);
    assert_false(dsq_method_needs_data(&dsq_method_rtn));
    assert_true(dsq_method_needs_data(&dsq_method_awq) && dsq_method_needs_data(&dsq_method_gptq));
    assert_true(dsq_method_gptq.stats & DSQ_STAT_XTX);
    assert_int_equal(dsq_method_awq.default_format, DSQ_INT_FORMAT_AWQ);
    for (int f = 0; f < 3; f++) assert_int_equal(dsq_int_format_parse(dsq_int_format_name((dsq_int_format)f)), f);
    assert_int_equal(dsq_int_format_parse("exl2"), -1);
}

/* ---- pack shapes: what the writer plans is what the packers make ---- */

static void fill_intq(dsq_intq *q, bool act_order)
{
    for (int64_t i = 0; i < q->rows * q->cols; i++) q->codes[i] = (uint8_t)(i % (1 << q->bits));
    for (int64_t i = 0; i < q->rows * q->n_groups; i++) {
        q->scales[i] = 0.01f * (float)(i % 7 + 1);
        q->zeros[i] = q->sym ? (uint8_t)(1 << (q->bits - 1)) : (uint8_t)(i % (1 << q->bits));
    }
    if (act_order) {
        q->g_idx = malloc((size_t)q->cols * sizeof *q->g_idx);
        for (int64_t c = 0; c < q->cols; c++) q->g_idx[c] = (int32_t)((q->cols - 1 - c) / q->group_size);
    }
}

static void same_tensors(const dsq_packed *plan, const dsq_packed *real)
{
    assert_int_equal(plan->n, real->n);
    for (int i = 0; i < plan->n; i++) {
        assert_string_equal(plan->t[i].suffix, real->t[i].suffix);
        assert_int_equal(plan->t[i].type, real->t[i].type);
        assert_int_equal(plan->t[i].n_dims, real->t[i].n_dims);
        for (int k = 0; k < plan->t[i].n_dims; k++) assert_int_equal(plan->t[i].shape[k], real->t[i].shape[k]);
        assert_int_equal(plan->t[i].nbytes, real->t[i].nbytes);
        assert_null(plan->t[i].data);
    }
}

static void test_pack_shapes_match_packers(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{64, 128}, {96, 64}, {32, 576}, {128, 192}};
    const int bits[] = {2, 3, 4, 8}, groups[] = {32, 64, -1};
    int checked = 0;
    for (size_t si = 0; si < 4; si++)
        for (size_t bi = 0; bi < 4; bi++)
            for (size_t gi = 0; gi < 3; gi++)
                for (int sym = 0; sym < 2; sym++)
                    for (int ao = 0; ao < 2; ao++) {
                        dsq_intq_params p = {bits[bi], groups[gi], sym != 0, DSQ_INTQ_RULE_GPTQ, 0, DSQ_INTQ_GRID_MINMAX};
                        dsq_intq q;
                        if (dsq_intq_alloc(&p, shapes[si][0], shapes[si][1], &q) != DSQ_OK) continue;
                        fill_intq(&q, ao);
                        dsq_intq_shape sh = dsq_intq_shape_of(&q);
                        dsq_packed a, b;
                        dsq_status s1 = dsq_gptq_pack_shape(&sh, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &a);
                        dsq_status s2 = dsq_gptq_pack(&q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, &b, NULL);
                        assert_int_equal(s1, s2);
                        if (s1 == DSQ_OK) same_tensors(&a, &b), checked++;
                        dsq_packed_free(&a), dsq_packed_free(&b);
                        s1 = dsq_ct_pack_shape(&sh, DSQ_TYPE_F16, &a);
                        s2 = dsq_ct_pack(&q, DSQ_TYPE_F16, &b);
                        assert_int_equal(s1, s2);
                        if (s1 == DSQ_OK) same_tensors(&a, &b), checked++;
                        dsq_packed_free(&a), dsq_packed_free(&b);
                        sh.g_idx = ao && q.group_size != q.cols; /* one group per row: indices are trivial */
                        s1 = dsq_awq_pack_shape(&sh, &a);
                        s2 = dsq_awq_pack(&q, &b);
                        assert_int_equal(s1, s2);
                        if (s1 == DSQ_OK) same_tensors(&a, &b), checked++;
                        dsq_packed_free(&a), dsq_packed_free(&b);
                        dsq_intq_free(&q);
                    }
    assert_true(checked > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_family_has_a_block),
        cmocka_unit_test(test_names_follow_the_description),
        cmocka_unit_test(test_deepseek_layers),
        cmocka_unit_test(test_method_table),
        cmocka_unit_test(test_pack_shapes_match_packers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
