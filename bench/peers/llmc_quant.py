"""llm-compressor side of the peer comparison (runs in the peers venv, see
bench/peers/setup.sh; driven by bench/peers/run_peers.py, not by CI).

Quantizes a Hugging Face folder with llm-compressor's AWQ, GPTQ, SmoothQuant
W8A8 or FP8 on the CPU, calibrating on exactly the token windows dsquant used
(a JSON list of id lists written by run_peers.py; FP8 dynamic and block take
no data), and saves the compressed-tensors folder.

Recipes are llm-compressor's own defaults for each method, only the scheme
set to the bits/group being compared:
  gptq  GPTQModifier(config_groups=INT{bits} sym group {group}, ignore lm_head)
        (dampening_frac 0.01, block_size 128, actorder "static" by default);
        --observer sets the weights' observer (imatrix_mse: each group's
        scale searched with the error weighted by the input's mean x^2)
  rtn   QuantizationModifier(config_groups=INT{bits} sym group {group}, ignore
        lm_head): round-to-nearest; the windows only feed imatrix_mse
  awq   AWQModifier() (duo scaling, n_grid 20, default Llama mappings)
        + QuantizationModifier(INT{bits} asym group {group}, ignore lm_head)
  sq    SmoothQuantModifier(smoothing_strength={alpha}) (its default Llama
        mappings: q/k/v from input_layernorm, gate/up from
        post_attention_layernorm) + GPTQModifier(targets Linear, scheme
        "W8A8", ignore lm_head): llm-compressor's W8A8-INT8 example recipe
        (examples/quantization_w8a8_int8), 0.8 there, 0.5 its default
  fp8-dynamic  QuantizationModifier(targets Linear, scheme "FP8_DYNAMIC",
        ignore lm_head), no calibration data (examples/quantization_w8a8_fp8)
  fp8-block    the same with scheme "FP8_BLOCK"
"""
import argparse
import json
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
from llmcompressor.modifiers.transform.awq import AWQModifier
from llmcompressor.pipelines.cache import IntermediatesCache

# llm-compressor 0.14's AWQ pins its cached activations (pin_memory), a CUDA call
# that raises "Found no NVIDIA driver" on a CPU-only machine; pinning only speeds
# host-to-GPU copies, so on the CPU it is a no-op here.
if not torch.cuda.is_available():
    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None


def scheme(bits, group, sym, observer=None):
    weights = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group", "group_size": group}
    if observer:
        weights["observer"] = observer
    return {"group_0": {"targets": ["Linear"], "weights": weights}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", choices=["rtn", "awq", "gptq", "sq", "fp8-dynamic", "fp8-block"], required=True)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=0.8, help="SmoothQuant smoothing_strength (sq)")
    ap.add_argument("--windows", help="JSON list of token-id lists (every method but fp8-*)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--observer", help="the weights' observer (gptq, awq): minmax (the default), mse, imatrix_mse")
    a = ap.parse_args()
    if a.observer == "minmax":
        a.observer = None  # the schemes' default: keeps the recipe exactly llm-compressor's own
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="auto")
    n = seqlen = 0
    if a.method == "rtn" and not a.windows:
        recipe = [QuantizationModifier(config_groups=scheme(a.bits, a.group, True), ignore=["lm_head"])]
        oneshot(model=model, recipe=recipe, output_dir=a.out, save_compressed=True)
    elif a.method.startswith("fp8-"):
        # data-free: weights are scaled from themselves, activations at run time
        preset = {"fp8-dynamic": "FP8_DYNAMIC", "fp8-block": "FP8_BLOCK"}[a.method]
        recipe = [QuantizationModifier(targets="Linear", scheme=preset, ignore=["lm_head"])]
        oneshot(model=model, recipe=recipe, output_dir=a.out, save_compressed=True)
    else:
        windows = json.load(open(a.windows))
        n, seqlen = len(windows), len(windows[0])
        ds = Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * seqlen for _ in windows]})
        if a.method == "rtn":
            recipe = [QuantizationModifier(config_groups=scheme(a.bits, a.group, True, a.observer),
                                           ignore=["lm_head"])]
        elif a.method == "gptq":
            recipe = [GPTQModifier(config_groups=scheme(a.bits, a.group, True, a.observer), ignore=["lm_head"])]
        elif a.method == "sq":
            recipe = [SmoothQuantModifier(smoothing_strength=a.alpha),
                      GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]
        else:
            recipe = [AWQModifier(), QuantizationModifier(config_groups=scheme(a.bits, a.group, False, a.observer),
                                                          ignore=["lm_head"])]
        oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=seqlen, num_calibration_samples=n,
                output_dir=a.out, save_compressed=True)
    print(json.dumps({"seconds": time.time() - t0, "n_samples": n, "seqlen": seqlen,
                      "torch": torch.__version__, "dtype": str(model.dtype)}))


if __name__ == "__main__":
    main()
