#!/usr/bin/env python3
"""Reference numbers for tests/test_forward.c, computed with transformers on CPU.

Writes tests/data/ref_smollm2_q4_1.json from the default model GGUF
(SmolLM2-135M-Instruct.Q4_1.gguf, see scripts/fetch-default-model.sh):

  * logits: the GGUF is dequantized with gguf-py, the Q/K rows that
    llama.cpp's converter permuted for interleaved RoPE are put back in
    Hugging Face order, and LlamaForCausalLM (float32, eager attention) runs
    three fixed 32-token sequences. Per position the fixture keeps the
    log-softmax at 64 fixed token ids, the 8 most likely ids with theirs, and
    the logsumexp of the raw logits (the full 49152-wide rows would be 19 MB).
  * perplexity: WikiText-2 test in the Hugging Face "\\n\\n".join layout,
    tokenized with SmolLM2's own tokenizer rules (byte-level BPE from the GGUF
    vocabulary and merges, digits split one by one: tokenizer.json of
    HuggingFaceTB/SmolLM2; no BOS is added, as that tokenizer adds none),
    non-overlapping windows of 512 tokens, every token but each window's first
    scored (the AWQ/GPTQ protocol). The first 16 windows' token ids are stored
    so the C test needs no tokenizer, with the mean NLL, the perplexity and
    each window's NLL sum (a sanitizer build checks only the first windows).

Run (takes about a minute on 2 cores):
  ~/.cache/dsquant/venv/bin/python tests/integration/make_reference_logits.py [MODEL.gguf] [OUT.json]
"""
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

import gguf
import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("DSQ_CACHE", os.path.expanduser("~/.cache/dsquant"))
DEFAULT_MODEL = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(SRC, "tests", "data", "ref_smollm2_q4_1.json")
WIKI = os.path.join(SRC, "..", "shared", "datasets", "wikitext-2-raw-v1.test.hfjoin.txt.zst")

# Three sequences of 32 ids: the first 32 SmolLM2 tokens of
#   "The capital of France is Paris. It is known for the Eiffel Tower, a wrought-iron lattice ..."
#   "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + ..."
#   "In 1905, Albert Einstein published four papers that changed physics: on the photoelectric ..."
# fixed here so the reference does not depend on any tokenizer.
PROMPTS = [
    [504, 3575, 282, 4649, 314, 7042, 30, 657, 314, 1343, 327, 260, 414, 46682, 18669, 28, 253, 34554, 29, 1009,
     27672, 11637, 335, 260, 21633, 367, 7621, 28, 284, 327, 624, 14739],
    [1604, 3987, 46477, 24, 94, 727, 472, 585, 304, 2067, 216, 34, 42, 448, 1003, 304, 472, 1003, 3987, 46477, 24, 94,
     731, 216, 33, 25, 1232, 3987, 46477, 24, 94, 731],
    [788, 216, 33, 41, 32, 37, 28, 14338, 16211, 2587, 1876, 5057, 338, 4247, 6944, 42, 335, 260, 2261, 30851, 977, 28,
     7949, 697, 5522, 28, 1767, 24581, 284, 260, 42175, 282],
]
FIXED_IDS = [(i * 769 + 11) % 49152 for i in range(64)]
TOP_K = 8
PPL_CTX = 512
PPL_CHUNKS = 16


def field(reader, key, default=None):
    f = reader.get_field(key)
    return default if f is None else f.contents()


def unpermute(w, n_head):
    """Inverse of LlamaModel.permute in llama.cpp's convert_hf_to_gguf.py."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_model(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    assert arch == "llama", f"{path}: this script handles llama GGUFs, not {arch}"
    n_head = int(field(r, "llama.attention.head_count"))
    n_kv = int(field(r, "llama.attention.head_count_kv"))
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32) for t in r.tensors}
    dim = int(field(r, "llama.embedding_length"))
    cfg = transformers.LlamaConfig(
        vocab_size=tensors["token_embd.weight"].shape[0],
        hidden_size=dim,
        intermediate_size=int(field(r, "llama.feed_forward_length")),
        num_hidden_layers=int(field(r, "llama.block_count")),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=dim // n_head,
        max_position_embeddings=int(field(r, "llama.context_length")),
        rms_norm_eps=float(field(r, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(field(r, "llama.rope.freq_base")),
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=int(field(r, "tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field(r, "tokenizer.ggml.eos_token_id")),
        attn_implementation="eager",
        torch_dtype=torch.float32,
    )
    names = {
        "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    sd = {"model.embed_tokens.weight": tensors["token_embd.weight"], "model.norm.weight": tensors["output_norm.weight"]}
    if "output.weight" in tensors:
        sd["lm_head.weight"] = tensors["output.weight"]
    for name, w in tensors.items():
        if not name.startswith("blk."):
            continue
        _, layer, stem, kind = name.split(".")
        if stem == "attn_q":
            w = unpermute(w, n_head)
        elif stem == "attn_k":
            w = unpermute(w, n_kv)
        sd[f"model.layers.{layer}.{names[stem]}.{kind}"] = w
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32).eval()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    assert not missing and not unexpected, (missing, unexpected)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return r, model


def smollm2_tokenizer(r):
    """SmolLM2's tokenizer.json rules over the GGUF vocabulary and merges."""
    toks = [str(t) for t in field(r, "tokenizer.ggml.tokens")]
    merges = [tuple(str(m).split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return tok


def logits_reference(model):
    out = []
    with torch.no_grad():
        for ids in PROMPTS:
            logits = model(torch.tensor([ids])).logits[0].double()
            lse = torch.logsumexp(logits, dim=-1)
            lsm = logits - lse[:, None]
            top = torch.topk(lsm, TOP_K, dim=-1)
            out.append({
                "tokens": ids,
                "logsumexp": [round(float(v), 6) for v in lse],
                "argmax": [int(v) for v in lsm.argmax(dim=-1)],
                "fixed_logprobs": [[round(float(v), 6) for v in row[FIXED_IDS]] for row in lsm],
                "top_ids": [[int(v) for v in row] for row in top.indices],
                "top_logprobs": [[round(float(v), 6) for v in row] for row in top.values],
            })
    return out


def ppl_reference(model, tok):
    text = subprocess.run(["zstd", "-dc", WIKI], check=True, capture_output=True).stdout.decode("utf-8")
    ids = tok.encode(text).ids
    need = PPL_CTX * PPL_CHUNKS
    assert len(ids) >= need, len(ids)
    ids = ids[:need]
    chunk_nll = []
    with torch.no_grad():
        for c in range(PPL_CHUNKS):
            win = torch.tensor([ids[c * PPL_CTX:(c + 1) * PPL_CTX]])
            logits = model(win).logits[0, :-1].double()
            lp = torch.log_softmax(logits, dim=-1)
            chunk_nll.append(-float(lp.gather(1, win[0, 1:, None]).sum()))
    count = PPL_CHUNKS * (PPL_CTX - 1)
    nll = sum(chunk_nll)
    return {"protocol": "hf", "ctx": PPL_CTX, "chunks": PPL_CHUNKS, "dataset": os.path.basename(WIKI),
            "n_scored": count, "nll_mean": nll / count, "ppl": float(np.exp(nll / count)),
            "chunk_nll": chunk_nll, "tokens": ids}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    out_path = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_OUT
    torch.manual_seed(0)
    t0 = time.time()
    r, model = load_model(path)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    ref = {
        "model": os.path.basename(path),
        "model_sha256": sha,
        "model_bytes": os.path.getsize(path),
        "made_by": "tests/integration/make_reference_logits.py " + " ".join(sys.argv[1:]),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "gguf": importlib.metadata.version("gguf"),
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__},
        "fixed_ids": FIXED_IDS,
        "prompts": logits_reference(model),
        "ppl": ppl_reference(model, smollm2_tokenizer(r)),
    }
    with open(out_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"{out_path}: ppl {ref['ppl']['ppl']:.4f} over {ref['ppl']['n_scored']} tokens ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
