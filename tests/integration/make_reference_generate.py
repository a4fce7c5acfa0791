#!/usr/bin/env python3
"""Reference greedy continuations and chat renderings for tests/test_generate.c.

Writes tests/data/ref_generate_smollm2.json from the default model GGUF
(SmolLM2-135M-Instruct.Q4_1.gguf, see scripts/fetch-default-model.sh):

  * greedy: the GGUF is dequantized and loaded into LlamaForCausalLM exactly as
    tests/integration/make_reference_logits.py does (its load_model is
    reused), prompts are tokenized with SmolLM2's own tokenizer rules (its
    control tokens such as <|im_start|> parsed as special), and each prompt is
    continued greedily (argmax of the last position, the full sequence re-run
    every step, float32) until <|im_end|> (EOS) or N_NEW tokens. Per step the
    gap between the two largest logits is kept: a step with a tiny gap is
    where an implementation with slightly different arithmetic could
    legitimately pick the other token.
  * chat: conversations rendered by transformers' apply_chat_template with the
    chat template stored in the GGUF (tokenizer.chat_template), Jinja run by
    transformers, with and without add_generation_prompt.

Run (about a minute on 2 cores):
  ~/.cache/dsquant/venv/bin/python tests/integration/make_reference_generate.py [MODEL.gguf] [OUT.json]
"""
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time

import numpy as np
import torch

import gguf
import tokenizers
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_reference_logits import DEFAULT_MODEL, SRC, field, load_model, smollm2_tokenizer  # noqa: E402

DEFAULT_OUT = os.path.join(SRC, "tests", "data", "ref_generate_smollm2.json")
N_NEW = 32
USER_Q = "What is the capital of France?"
GREEDY = [
    {"name": "plain", "text": "The capital of France is", "chat": None},
    {"name": "code", "text": "def fibonacci(n):\n", "chat": None},
    {"name": "chat", "chat": [{"role": "user", "content": USER_Q}]},
]
CHATS = [
    {"messages": [{"role": "user", "content": USER_Q}, {"role": "assistant", "content": "Paris."}],
     "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": USER_Q}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": USER_Q}], "add_generation_prompt": True},
]


def hf_tokenizer(r):
    """SmolLM2's tokenizer with its control tokens special, and the GGUF's chat template."""
    tok = smollm2_tokenizer(r)
    toks = [str(t) for t in field(r, "tokenizer.ggml.tokens")]
    types = list(field(r, "tokenizer.ggml.token_type"))
    tok.add_special_tokens([t for t, ty in zip(toks, types) if int(ty) == 3])
    bos = toks[int(field(r, "tokenizer.ggml.bos_token_id"))]
    eos = toks[int(field(r, "tokenizer.ggml.eos_token_id"))]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos)
    fast.chat_template = str(field(r, "tokenizer.chat_template"))
    return fast


def greedy(model, ids, eos):
    out, gaps = [], []
    with torch.no_grad():
        for _ in range(N_NEW):
            logits = model(torch.tensor([ids + out])).logits[0, -1].double()
            top = torch.topk(logits, 2)
            t = int(top.indices[0])
            gaps.append(round(float(top.values[0] - top.values[1]), 4))
            if t == eos:
                break
            out.append(t)
    return out, gaps


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    out_path = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_OUT
    torch.manual_seed(0)
    t0 = time.time()
    r, model = load_model(path)
    tok = hf_tokenizer(r)
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    cases = []
    for g in GREEDY:
        text = g["text"] if g["chat"] is None else tok.apply_chat_template(
            g["chat"], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        cont, gaps = greedy(model, ids, eos)
        cases.append({"name": g["name"], "chat": g["chat"], "text": text, "prompt_ids": ids,
                      "continuation": cont, "stopped_at_eos": len(cont) < N_NEW, "top2_gaps": gaps,
                      "continuation_text": tok.decode(cont)})
        print(f"{g['name']}: {tok.decode(cont)!r} (smallest gap {min(gaps):.3f})")
    chats = [dict(c, text=tok.apply_chat_template(c["messages"], tokenize=False,
                                                  add_generation_prompt=c["add_generation_prompt"])) for c in CHATS]
    ref = {
        "model": os.path.basename(path),
        "model_sha256": sha,
        "model_bytes": os.path.getsize(path),
        "made_by": "tests/integration/make_reference_generate.py " + " ".join(sys.argv[1:]),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "gguf": importlib.metadata.version("gguf"),
                     "tokenizers": tokenizers.__version__, "jinja2": importlib.metadata.version("jinja2"),
                     "numpy": np.__version__},
        "n_new": N_NEW,
        "greedy": cases,
        "chat": chats,
    }
    with open(out_path, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{out_path} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
