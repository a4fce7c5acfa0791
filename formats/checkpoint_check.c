/* One verdict per file: the shapes of the tensors an architecture names,
 * checked once when a checkpoint opens (dsq_checkpoint_open), so that every
 * command (info, convert, gguf, ppl, the quantizers, serve) accepts or
 * refuses a file alike and with the same message, before any of them uses a
 * claimed size as a divisor, a loop bound or an allocation.
 *
 * The walk goes over the file's tensors, not over the layers the metadata
 * claims: its cost is bounded by the file, whatever block_count says. A
 * tensor whose name the block description knows must have the shape the
 * description gives; absent ones are left to the command that needs them (a
 * quantized folder stores its linears under other names: qweight,
 * weight_packed), and names it does not know are not its business. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/block.h"
#include "formats/checkpoint.h"

typedef struct ck {
    const dsq_checkpoint *c;
    const dsq_arch *a;
    const dsq_block_desc *d;
    bool gguf;
} ck;

static void shape_text(char *buf, size_t cap, int n, const int64_t *s)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static dsq_status expect(const ck *k, const dsq_tensor *t, int n, const int64_t *want)
{
    bool ok = t->n_dims == n;
    for (int i = 0; ok && i < n; i++) ok = t->shape[i] == want[i];
    if (ok) return DSQ_OK;
    char w[96], got[96];
    shape_text(w, sizeof w, n, want);
    shape_text(got, sizeof got, t->n_dims, t->shape);
    return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s has shape %s where the architecture needs %s", k->c->path, t->name,
                    got, w);
}

/* The embedding and the output head: [vocab_size, hidden]; the final norm: [hidden]. */
static dsq_status check_global(const ck *k, const dsq_tensor *t, bool *known)
{
    static const char *const names[2][3] = {
        {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"},
        {"token_embd.weight", "output.weight", "output_norm.weight"},
    };
    const int64_t H = k->a->hidden_size;
    *known = true;
    if (!strcmp(t->name, names[k->gguf][2])) return expect(k, t, 1, &H);
    if (strcmp(t->name, names[k->gguf][0]) && strcmp(t->name, names[k->gguf][1])) {
        *known = false;
        return DSQ_OK;
    }
    if (t->n_dims != 2 || t->shape[1] != H)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s is not [vocab, %lld]", k->c->path, t->name, (long long)H);
    if (k->a->vocab_size > 0 && t->shape[0] != k->a->vocab_size)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor %s has %lld rows but the model's vocab_size is %lld", k->c->path,
                        t->name, (long long)t->shape[0], (long long)k->a->vocab_size);
    return DSQ_OK;
}

/* "blk.<l>.<stem>.weight" or "model.layers.<l>.<stem>.weight": l and the
 * stem (pointing into name, *stem_len bytes); false for other names. */
static bool split_name(const ck *k, const char *name, int64_t *l, const char **stem, size_t *stem_len)
{
    const char *prefix = k->gguf ? "blk." : "model.layers.";
    size_t pl = strlen(prefix), n = strlen(name);
    if (strncmp(name, prefix, pl) || n < pl + 9 || strcmp(name + n - 7, ".weight")) return false;
    const char *p = name + pl;
    if (*p < '0' || *p > '9') return false;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (*end != '.' || v < 0) return false;
    *l = v;
    *stem = end + 1;
    *stem_len = (size_t)(name + n - 7 - *stem);
    return *stem_len > 0;
}

static bool stem_is(const char *stem, size_t n, const char *want)
{
    return strlen(want) == n && !memcmp(stem, want, n);
}

/* An HF expert's stem "mlp.experts.<e>.gate_proj" against the pattern
 * "mlp.experts.%d.gate_proj": e, or -1 when it does not match. */
static int64_t expert_of(const char *stem, size_t n, const char *pattern)
{
    const char *pct = strstr(pattern, "%d");
    if (!pct) return -1;
    size_t pre = (size_t)(pct - pattern), post = strlen(pct + 2);
    if (n <= pre + post || memcmp(stem, pattern, pre) || memcmp(stem + n - post, pct + 2, post)) return -1;
    int64_t e = 0;
    for (const char *p = stem + pre; p < stem + n - post; p++) {
        if (*p < '0' || *p > '9' || e > 1 << 24) return -1;
        e = e * 10 + (*p - '0');
    }
    return e;
}

static dsq_status check_layer_tensor(const ck *k, const dsq_tensor *t)
{
    int64_t l;
    const char *stem;
    size_t sn;
    if (!split_name(k, t->name, &l, &stem, &sn) || l >= k->a->n_layers) return DSQ_OK; /* MTP layers: not run */
    const dsq_block_desc *d = k->d;
    for (int i = 0; i < d->n_norms; i++) {
        if (!stem_is(stem, sn, k->gguf ? d->norms[i].gguf : d->norms[i].hf)) continue;
        if (!dsq_block_norm_present(d, k->a, l, i)) return DSQ_OK;
        int64_t n = dsq_block_norm_dim(d, k->a, i);
        return expect(k, t, 1, &n);
    }
    for (int i = 0; i < d->n_linears; i++) {
        const dsq_block_linear *L = &d->linears[i];
        int64_t shape[3];
        dsq_block_linear_shape(d, k->a, i, &shape[1], &shape[2]);
        shape[0] = k->a->moe.n_routed;
        if (L->expert && !k->gguf) {
            int64_t e = expert_of(stem, sn, L->hf);
            if (e < 0) continue;
            if (!dsq_block_linear_present(d, k->a, l, i) || e >= k->a->moe.n_routed) return DSQ_OK;
            return expect(k, t, 2, shape + 1);
        }
        if (!stem_is(stem, sn, k->gguf ? L->gguf : L->hf)) continue;
        if (!dsq_block_linear_present(d, k->a, l, i)) return DSQ_OK;
        return L->expert ? expect(k, t, 3, shape) : expect(k, t, 2, shape + 1);
    }
    return DSQ_OK;
}

dsq_status dsq_checkpoint_check(const dsq_checkpoint *c)
{
    if (!c->has_arch) return DSQ_OK;
    ck k = {c, &c->arch, dsq_block_desc_of(&c->arch), c->kind == DSQ_CKPT_GGUF};
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        dsq_tensor t;
        DSQ_TRY(dsq_checkpoint_tensor(c, i, &t));
        bool known;
        DSQ_TRY(check_global(&k, &t, &known));
        if (!known && k.d) DSQ_TRY(check_layer_tensor(&k, &t));
    }
    return DSQ_OK;
}
