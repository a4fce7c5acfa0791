"""Trains a tiny DeepSeek-V3-architecture model on local text, for quality
tables (random weights say nothing about quantization quality). Not a test.

DeepseekV3ForCausalLM from transformers (native class): 4 layers (the first
dense), MLA (q_lora_rank 64, kv_lora_rank 64, 4 heads of nope 32 + rope 16,
values 32), 8 routed experts of 128 with top-2 sigmoid noaux_tc routing over
4 groups (2 chosen), one shared expert, SmolLM2's tokenizer (49152 tokens,
tied embeddings: hidden 128 keeps the model at ~7M parameters). Trained with
AdamW on the Gutenberg books of ../shared/datasets (their first 90%; the
rest is held out and saved as heldout.txt, the last 400 KB of the training
part as calib.txt), sequences of 128 tokens, batch 16, for a fixed number of
steps (about 4 minutes on 2 CPU cores). The correction bias is updated as
DeepSeek-V3 does (aux-loss-free balancing: +/- gamma by sign of each expert's
load against the mean), so that routing is balanced and experts see tokens.

usage: train_tiny_deepseek.py OUT_DIR TOKENIZER_HF_DIR TEXT_FILE... [--steps N]
Prints one JSON line with the final training loss and the held-out loss.
"""
import json
import math
import os
import sys
import time

import torch

SEQ, BATCH, LR, GAMMA = 128, 16, 3e-3, 1e-3


def config(vocab):
    from transformers import DeepseekV3Config
    return DeepseekV3Config(
        vocab_size=vocab, hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        routed_scaling_factor=2.5, kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, v_head_dim=32,
        qk_nope_head_dim=32, n_group=4, topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1,
        norm_topk_prob=True, max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-6,
        bos_token_id=0, eos_token_id=0, initializer_range=0.02,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def read_text(paths):
    out = []
    for p in paths:
        if p.endswith(".zst"):
            import subprocess
            out.append(subprocess.run(["zstd", "-dc", p], capture_output=True, check=True).stdout.decode())
        else:
            with open(p, encoding="utf-8") as f:
                out.append(f.read())
    return "\n\n".join(out)


def balance(model, counts):
    """DeepSeek-V3's bias update: experts above the mean load get -gamma, below +gamma."""
    with torch.no_grad():
        for layer, c in counts.items():
            gate = model.model.layers[layer].mlp.gate
            gate.e_score_correction_bias += GAMMA * torch.sign(c.mean() - c)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = 600
    if "--steps" in sys.argv:
        steps = int(sys.argv[sys.argv.index("--steps") + 1])
        args = [a for a in args if a != str(steps)]
    out, tok_dir, texts = args[0], args[1], args[2:]
    from tokenizers import Tokenizer
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 2)
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    text = read_text(texts)
    ids = torch.tensor(tok.encode(text).ids, dtype=torch.long)
    split = int(len(ids) * 0.9)
    train, held = ids[:split], ids[split:]
    with open(os.path.join(tok_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    model = DeepseekV3ForCausalLM(config(vocab))
    counts = {}

    def hook(layer):
        def f(mod, inp, outp):
            idx = outp[2]  # router_logits, topk_weights, topk_indices
            counts[layer] = counts.get(layer, torch.zeros(8)) + torch.bincount(idx.flatten(), minlength=8).float()
        return f

    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.register_forward_hook(hook(i))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    t0, loss = time.time(), float("nan")
    model.train()
    for step in range(steps):
        lr = LR * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train) - SEQ - 1, (BATCH,), generator=g)
        x = torch.stack([train[s:s + SEQ] for s in starts])
        counts.clear()
        loss_t = model(x, labels=x).loss
        opt.zero_grad()
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        balance(model, counts)
        loss = loss_t.item()
        if step % 50 == 0:
            print(f"step {step}/{steps} loss {loss:.3f} {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    model.eval()
    with torch.no_grad():
        n = (len(held) - 1) // SEQ
        xs = torch.stack([held[i * SEQ:(i + 1) * SEQ] for i in range(min(n, 32))])
        held_loss = model(xs, labels=xs).loss.item()
    model.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(topk_method="noaux_tc", scoring_func="sigmoid", num_nextn_predict_layers=0)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # the text split as the tokens were: calibration from the training part, evaluation from the held-out one
    cut = len(tok.decode(ids[:split].tolist()))
    with open(os.path.join(out, "calib.txt"), "w", encoding="utf-8") as f:
        f.write(text[max(0, cut - 400000):cut])
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(text[cut:])
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tok_dir, name)):
            shutil.copy(os.path.join(tok_dir, name), os.path.join(out, name))
    print(json.dumps({"steps": steps, "train_loss": loss, "held_out_loss": held_loss,
                      "seconds": round(time.time() - t0, 1), "tokens": int(len(train))}))


if __name__ == "__main__":
    main()
