/* The quantization_config readers of every artifact format (AWQ, GPTQ,
 * compressed-tensors pack-/int-/float-/naive-quantized, vLLM fp8, ModelOpt):
 * a folder from one input split on DSQ_FZ_SEP: config.json,
 * hf_quant_config.json, model.safetensors. The config is read, the skip
 * list asked, and each linear of a Llama layer loaded from the tensors as
 * the model loader does (INT or 8-bit, by the config). */
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"
#include "runtime/model_quant.h"
#include "tests/fuzz/fuzz.h"

static const struct {
    const char *module;
    int64_t out, in;
} g_lin[] = {
    {"model.layers.0.self_attn.q_proj", 64, 64}, {"model.layers.0.self_attn.k_proj", 32, 64},
    {"model.layers.0.mlp.down_proj", 64, 128},   {"model.layers.0.mlp.gate_proj", 128, 64},
    {"lm_head", 256, 64},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[3] = {"config.json", "hf_quant_config.json", "model.safetensors"};
    dsq_fz_part part[3];
    dsq_fz_split(data, size, part, 3);
    dsq_fz_clear();
    for (int i = 0; i < 3; i++)
        if (part[i].p) dsq_fz_put(i, names[i], part[i].p, part[i].n);
    dsq_hfq q;
    memset(&q, 0, sizeof q);
    if (!dsq_fz_ok(dsq_hfq_from_dir(dsq_fz_dir(), &q), "dsq_hfq_from_dir")) return 0;
    dsq_st_model *st = NULL;
    if (part[2].p && dsq_fz_ok(dsq_st_model_open(dsq_fz_dir(), &st), "dsq_st_model_open")) {
        for (size_t i = 0; i < sizeof g_lin / sizeof g_lin[0]; i++) {
            dsq_hfq_skips(&q, g_lin[i].module);
            if (q.method == DSQ_HFQ_W8) {
                dsq_w8q w;
                bool found = false;
                memset(&w, 0, sizeof w);
                if (dsq_fz_ok(dsq_hfq_read_w8(&q, st, g_lin[i].module, &w, &found), "dsq_hfq_read_w8") && found)
                    dsq_w8q_free(&w);
            } else {
                dsq_linear W;
                bool loaded = false;
                memset(&W, 0, sizeof W);
                if (dsq_fz_ok(dsq_hfq_load_linear(&q, st, g_lin[i].module, g_lin[i].out, g_lin[i].in, &W, &loaded),
                              "dsq_hfq_load_linear") &&
                    loaded)
                    dsq_linear_release(&W);
            }
        }
        float ks, vs;
        dsq_fz_ok(dsq_hfq_load_kv(&q, st, 0, &ks, &vs), "dsq_hfq_load_kv");
        dsq_st_model_close(st);
    }
    dsq_hfq_free(&q);
    return 0;
}
