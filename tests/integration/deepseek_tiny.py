"""Tiny random DeepSeek models built with transformers' native classes
(DeepseekV3ForCausalLM, DeepseekV2ForCausalLM; no remote code) and saved with
save_pretrained, for tests that compare our runtime and converters with the
real implementations. Not a test itself.

Widths are small but every structural feature is there:
  v3    q_lora_rank, sigmoid scoring with noaux_tc group-limited routing over
        4 groups (the correction bias only selects), 8 routed experts top-2,
        a shared expert, a dense first layer, yarn rope with mscale and
        mscale_all_dim (a softmax scale != 1/sqrt(d)), norm_topk_prob.
  v2    q_lora_rank null (a plain q_proj, as V2-Lite), softmax greedy routing,
        two shared experts, norm_topk_prob false (transformers' V2 router
        never renormalizes), routed_scaling_factor 1.
  v2g   v2 with group_limited_greedy over 2 groups.
Every weight's rows and columns are multiples of 32, so the FP8 copy
(fp8_copy) can use 32 x 32 blocks without partial ones: transformers' CPU
dequantization derives the block from the scale grid (rows / scale rows), so
a partial edge block is either refused or, where the division happens to be
exact (48 rows in 2 blocks of 32 read as 2 of 24), silently mis-scaled.

Weights are re-drawn so the model says something: linears N(0, 1/in), the
embedding and head wider, the router sharper than its init, and the
correction bias large enough to change which experts are picked."""
import json
import os

import numpy as np

VOCAB = 320


def _config(kind, vocab, mscale_all_dim=0.8):
    import torch  # noqa: F401
    from transformers import DeepseekV2Config, DeepseekV3Config
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=64,
                  qk_rope_head_dim=32, v_head_dim=32, qk_nope_head_dim=16, n_routed_experts=8,
                  num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=512,
                  tie_word_embeddings=False, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1)
    if kind == "v3":
        return DeepseekV3Config(**common, q_lora_rank=64, n_shared_experts=1, routed_scaling_factor=2.5, n_group=4,
                                topk_group=2, norm_topk_prob=True,
                                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 128, "beta_fast": 32.0,
                                                 "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": mscale_all_dim})
    extra = dict(topk_method="greedy", n_group=1, topk_group=1)
    if kind == "v2g":
        extra = dict(topk_method="group_limited_greedy", n_group=2, topk_group=1)
    return DeepseekV2Config(**common, q_lora_rank=None, n_shared_experts=2, routed_scaling_factor=1.0,
                            norm_topk_prob=False, **extra)


def _redraw(model, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                if "e_score_correction_bias" in name:
                    continue
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                scale = 4.0 if name.endswith("mlp.gate.weight") else 2.0 if "lm_head" in name else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=g) / fan_in ** 0.5)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(0.3 * torch.randn(b.shape, generator=g))


def make(folder, kind="v3", seed=0, dtype="float32", tokenizer_from=None, mscale_all_dim=0.8):
    """Builds the model, writes it to folder (config.json, model.safetensors).
    tokenizer_from: a HF folder whose tokenizer files are copied (the
    vocabulary then has its size), for commands that tokenize text.
    mscale_all_dim: V3's yarn value (mscale is 1.0); llama.cpp assumes the
    two equal (its deepseek2 graph), so its comparisons take 1.0."""
    import shutil
    import torch
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM
    torch.manual_seed(seed)
    vocab = VOCAB
    if tokenizer_from:
        with open(os.path.join(tokenizer_from, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
    cfg = _config(kind, vocab, mscale_all_dim)
    cls = DeepseekV3ForCausalLM if kind == "v3" else DeepseekV2ForCausalLM
    model = cls(cfg).eval()
    _redraw(model, seed)
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(folder)
    with open(os.path.join(folder, "config.json")) as f:
        saved = json.load(f)
    # a real V3 config names its routing; transformers' class implies it
    if kind == "v3":
        saved.setdefault("topk_method", "noaux_tc")
        saved.setdefault("scoring_func", "sigmoid")
        saved["num_nextn_predict_layers"] = 0
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(saved, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if tokenizer_from and os.path.exists(os.path.join(tokenizer_from, name)):
            shutil.copy(os.path.join(tokenizer_from, name), os.path.join(folder, name))
    return folder


def _fp8_block(w, block):
    """DeepSeek-V3's weight layout: e4m3 codes and one F32 multiplier per block."""
    import torch
    rows, cols = w.shape
    br, bc = block
    nr, nc = -(-rows // br), -(-cols // bc)
    scale = torch.empty(nr, nc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    wf = w.float()
    for i in range(nr):
        for j in range(nc):
            t = wf[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = max(float(t.abs().max()), 1e-12) / 448.0
            scale[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (t / s).to(torch.float8_e4m3fn)
    return q, scale


def fp8_copy(src, dst, block=(32, 32)):
    """src's linears (every 2-D weight under model.layers but the router) as
    FP8 with weight_scale_inv, config.json with DeepSeek-V3's
    quantization_config; the rest copied."""
    import shutil
    import torch
    from safetensors.torch import load_file, save_file
    os.makedirs(dst, exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    out = {}
    for k, v in t.items():
        if k.startswith("model.layers.") and k.endswith(".weight") and v.dim() == 2 and ".mlp.gate.weight" not in k:
            q, s = _fp8_block(v, block)
            out[k] = q
            out[k[:-len(".weight")] + ".weight_scale_inv"] = s
        else:
            out[k] = v
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": list(block)}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in os.listdir(src):
        if name not in ("model.safetensors", "config.json"):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    return dst


def bf16_formula(codes_u8, scale, block):
    """The reference dequantization in numpy: f32(e4m3) * scale, rounded to
    BF16 (nearest even), as uint16 bits."""
    import torch
    w = torch.from_numpy(codes_u8.copy()).view(torch.float8_e4m3fn).float()
    rows, cols = w.shape
    s = torch.from_numpy(scale).float()
    s = s.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return (w * s).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
