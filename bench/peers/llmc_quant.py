"""llm-compressor side of the peer comparison (runs in the peers venv, see
bench/peers/setup.sh; driven by bench/peers/run_peers.py, not by CI).

Quantizes a Hugging Face folder with llm-compressor's AWQ or GPTQ on the CPU,
calibrating on exactly the token windows dsquant used (a JSON list of id
lists written by run_peers.py), and saves the compressed-tensors folder.

Recipes are llm-compressor's own defaults for each method, only the scheme
set to the bits/group being compared:
  gptq  GPTQModifier(config_groups=INT{bits} sym group {group}, ignore lm_head)
        (dampening_frac 0.01, block_size 128, actorder "static" by default)
  awq   AWQModifier() (duo scaling, n_grid 20, default Llama mappings)
        + QuantizationModifier(INT{bits} asym group {group}, ignore lm_head)
  sq-gptq      SmoothQuantModifier(smoothing_strength=--strength) + GPTQModifier(
               scheme "W8A8", ignore lm_head): llm-compressor's int8 W8A8 example
               (examples/quantization_w8a8_int8) takes 0.8; the modifier's default is 0.5
  fp8-dynamic  QuantizationModifier(scheme "FP8_DYNAMIC", ignore lm_head), no data
  fp8-block    QuantizationModifier(scheme "FP8_BLOCK", ignore lm_head), no data
"""
import argparse
import json
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
from llmcompressor.modifiers.transform.awq import AWQModifier

try:  # 0.14 keeps SmoothQuant under modifiers.transform, older releases under modifiers.smoothquant
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
except ImportError:  # pragma: no cover
    from llmcompressor.modifiers.smoothquant import SmoothQuantModifier
from llmcompressor.pipelines.cache import IntermediatesCache

# llm-compressor 0.14's AWQ pins its cached activations (pin_memory), a CUDA call
# that raises "Found no NVIDIA driver" on a CPU-only machine; pinning only speeds
# host-to-GPU copies, so on the CPU it is a no-op here.
if not torch.cuda.is_available():
    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None


def scheme(bits, group, sym):
    return {"group_0": {"targets": ["Linear"],
                        "weights": {"num_bits": bits, "type": "int", "symmetric": sym,
                                    "strategy": "group", "group_size": group}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", choices=["awq", "gptq", "sq-gptq", "fp8-dynamic", "fp8-block"], required=True)
    ap.add_argument("--strength", type=float, default=0.5, help="sq-gptq: SmoothQuant smoothing_strength")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--windows", help="JSON list of token-id lists (not for the fp8 methods)")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="auto")
    if a.method.startswith("fp8"):  # weights only at quantization time: no calibration data
        scheme_name = "FP8_DYNAMIC" if a.method == "fp8-dynamic" else "FP8_BLOCK"
        oneshot(model=model, recipe=[QuantizationModifier(targets="Linear", scheme=scheme_name, ignore=["lm_head"])],
                output_dir=a.out, save_compressed=True)
        print(json.dumps({"seconds": time.time() - t0, "torch": torch.__version__, "dtype": str(model.dtype)}))
        return
    windows = json.load(open(a.windows))
    n, seqlen = len(windows), len(windows[0])
    ds = Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * seqlen for _ in windows]})
    if a.method == "sq-gptq":
        recipe = [SmoothQuantModifier(smoothing_strength=a.strength),
                  GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]
    elif a.method == "gptq":
        recipe = [GPTQModifier(config_groups=scheme(a.bits, a.group, True), ignore=["lm_head"])]
    else:
        recipe = [AWQModifier(), QuantizationModifier(config_groups=scheme(a.bits, a.group, False),
                                                      ignore=["lm_head"])]
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=seqlen, num_calibration_samples=n,
            output_dir=a.out, save_compressed=True)
    print(json.dumps({"seconds": time.time() - t0, "n_samples": n, "seqlen": seqlen,
                      "torch": torch.__version__, "dtype": str(model.dtype), "strength": a.strength}))


if __name__ == "__main__":
    main()
