"""Widens the peer base (SmolLM2-135M, hidden 576, 9 query heads of 64) to
widths that 128 divides, computing the same function, for the w4g128 rows of
the group-grid table (issue 17; not in CI). Runs in the peers venv.

    python widen.py BASE_DIR OUT_DIR

- hidden 576 -> 640: one zero channel after every 9 real ones (so every group
  of 128 holds 115-116 real channels, not a tail of zeros). The residual
  stream stays zero there: the embedding's and every o_proj/down_proj row
  there are zero.
- RMSNorm over 640 channels sees mean(x^2) * 576/640, so each norm's weight
  is scaled by sqrt(576/640) and the epsilon by 576/640: x / sqrt(0.9 (m +
  eps)) * sqrt(0.9) w = x / sqrt(m + eps) * w. The only change to the
  function is the BF16 rounding of those scaled weights (the base perplexity
  moves by a few hundredths; run_grid_table.py measures both).
- 9 query heads of 64 -> 10 (o_proj's input 576 -> 640; transformers wants
  the hidden size to be a multiple of the head count): the tenth is a zero
  head, and every query head gets its own copy of the KV head it shared
  (GQA 3 -> MHA 10: k_proj and v_proj rows repeated), so 10 divides the heads.
  A zero query head attends uniformly, but its o_proj columns are zero, so it
  adds nothing.
- The MLP (1536) needs nothing.
"""
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

OLD_H, NEW_H = 576, 640
REAL_PER_ZERO = 9  # real channels before each inserted zero one


def hidden_map():
    return torch.tensor([c + c // REAL_PER_ZERO for c in range(OLD_H)])


def kv_rows(n_heads, n_kv, head_dim):
    """For each new query head's KV head, the old k/v rows it copies (the last head: none)."""
    per = n_heads // n_kv
    return torch.tensor([(h // per) * head_dim + i for h in range(n_heads) for i in range(head_dim)])


def main():
    src, dst = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg["hidden_size"] != OLD_H:
        sys.exit(f"{src}: hidden_size {cfg['hidden_size']}, this widening is for {OLD_H}")
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or OLD_H // nh
    hm = hidden_map()
    new_nh = NEW_H // hd
    if new_nh * hd != NEW_H or new_nh <= nh:
        sys.exit(f"{src}: heads of {hd} do not widen to {NEW_H}")
    kvr = kv_rows(nh, nkv, hd)
    scale = math.sqrt(OLD_H / NEW_H)
    out = {}
    for name, t in load_file(os.path.join(src, "model.safetensors")).items():
        t = t.float()
        if name.endswith("norm.weight"):
            n = torch.zeros(NEW_H)
            n[hm] = t * scale
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            if not name.endswith("q_proj.weight"):
                t = t[kvr]
            n = torch.zeros(new_nh * hd, NEW_H)
            n[:nh * hd, hm] = t
        elif name.endswith(("embed_tokens.weight", "gate_proj.weight", "up_proj.weight", "lm_head.weight")):
            n = torch.zeros(t.shape[0], NEW_H)
            n[:, hm] = t
        elif name.endswith("o_proj.weight"):
            n = torch.zeros(NEW_H, new_nh * hd)
            n[hm, :nh * hd] = t
        elif name.endswith("down_proj.weight"):
            n = torch.zeros(NEW_H, t.shape[1])
            n[hm] = t
        else:
            sys.exit(f"{name}: no widening rule for this tensor")
        out[name] = n.to(torch.bfloat16).contiguous()
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg.update({"hidden_size": NEW_H, "num_attention_heads": new_nh, "num_key_value_heads": new_nh, "head_dim": hd,
                "rms_norm_eps": cfg["rms_norm_eps"] * OLD_H / NEW_H})
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    for f in os.listdir(src):
        if f not in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))


if __name__ == "__main__":
    main()
