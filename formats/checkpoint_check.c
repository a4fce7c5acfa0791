/* One verdict per file: the shapes of the tensors an architecture names,
 * checked once when a checkpoint opens (dsq_checkpoint_open), so that every
 * command (info, convert, gguf, ppl, the quantizers, serve) accepts or
 * refuses a file alike and with the same message, before any of them uses a
 * claimed size as a divisor, a loop bound or an allocation.
 *
 * A tensor the description names must have its shape where it is present;
 * absent ones are left to the command that needs them (a quantized folder
 * stores its linears under other names: qweight, weight_packed). */
#include <stdio.h>
#include <string.h>

#include "formats/block.h"
#include "formats/checkpoint.h"

typedef struct ck {
    const dsq_checkpoint *c;
    const dsq_arch *a;
    bool gguf;
} ck;

/* The tensor by name, when present. */
static bool find(const ck *k, const char *name, dsq_tensor *t, dsq_status *err)
{
    int64_t i = k->gguf ? dsq_gguf_find_tensor(k->c->gguf, name) : dsq_st_model_find(k->c->st, name);
    if (i < 0) return false;
    *err = dsq_checkpoint_tensor(k->c, (uint64_t)i, t);
    return true;
}

static void shape_text(char *buf, size_t cap, int n, const int64_t *s)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* name, when present, must be n-dimensional with shape want. */
static dsq_status expect(const ck *k, const char *name, int n, const int64_t *want)
{
    dsq_tensor t;
    dsq_status s = DSQ_OK;
    if (!find(k, name, &t, &s)) return DSQ_OK;
    DSQ_TRY(s);
    bool ok = t.n_dims == n;
    for (int i = 0; ok && i < n; i++) ok = t.shape[i] == want[i];
    if (ok) return DSQ_OK;
    char w[96], got[96];
    shape_text(w, sizeof w, n, want);
    shape_text(got, sizeof got, t.n_dims, t.shape);
    return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s has shape %s where the architecture needs %s", k->c->path, name, got,
                    w);
}

/* The embedding and the output head: [vocab_size, hidden]. */
static dsq_status check_globals(const ck *k)
{
    static const char *const names[2][3] = {
        {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"},
        {"token_embd.weight", "output.weight", "output_norm.weight"},
    };
    const int64_t H = k->a->hidden_size;
    for (int i = 0; i < 2; i++) {
        dsq_tensor t;
        dsq_status s = DSQ_OK;
        const char *name = names[k->gguf][i];
        if (!find(k, name, &t, &s)) continue;
        DSQ_TRY(s);
        if (t.n_dims != 2 || t.shape[1] != H)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s is not [vocab, %lld]", k->c->path, name, (long long)H);
        if (k->a->vocab_size > 0 && t.shape[0] != k->a->vocab_size)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s has %lld rows but the model's vocab_size is %lld",
                            k->c->path, name, (long long)t.shape[0], (long long)k->a->vocab_size);
    }
    return expect(k, names[k->gguf][2], 1, &H);
}

static dsq_status check_linear(const ck *k, const dsq_block_desc *d, int64_t l, int i)
{
    const dsq_block_linear *L = &d->linears[i];
    int64_t shape[3];
    dsq_block_linear_shape(d, k->a, i, &shape[1], &shape[2]);
    char name[256];
    if (!L->expert) {
        if (k->gguf) snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, L->gguf);
        else snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, L->hf);
        return expect(k, name, 2, shape + 1);
    }
    shape[0] = k->a->moe.n_routed;
    if (k->gguf) {
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, L->gguf);
        return expect(k, name, 3, shape);
    }
    for (int64_t e = 0; e < k->a->moe.n_routed; e++) {
        char leaf[160];
        snprintf(leaf, sizeof leaf, L->hf, (int)e);
        snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, leaf);
        DSQ_TRY(expect(k, name, 2, shape + 1));
    }
    return DSQ_OK;
}

static dsq_status check_layer(const ck *k, const dsq_block_desc *d, int64_t l)
{
    char name[256];
    for (int i = 0; i < d->n_norms; i++) {
        if (!dsq_block_norm_present(d, k->a, l, i)) continue;
        int64_t n = dsq_block_norm_dim(d, k->a, i);
        if (k->gguf) snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, d->norms[i].gguf);
        else snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, d->norms[i].hf);
        DSQ_TRY(expect(k, name, 1, &n));
    }
    for (int i = 0; i < d->n_linears; i++)
        if (dsq_block_linear_present(d, k->a, l, i)) DSQ_TRY(check_linear(k, d, l, i));
    return DSQ_OK;
}

dsq_status dsq_checkpoint_check(const dsq_checkpoint *c)
{
    if (!c->has_arch) return DSQ_OK;
    ck k = {c, &c->arch, c->kind == DSQ_CKPT_GGUF};
    const dsq_block_desc *d = dsq_block_desc_of(&c->arch);
    DSQ_TRY(check_globals(&k));
    if (!d) return DSQ_OK;
    for (int64_t l = 0; l < c->arch.n_layers; l++) DSQ_TRY(check_layer(&k, d, l));
    return DSQ_OK;
}
