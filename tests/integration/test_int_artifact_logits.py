"""Our INT artifacts of the real model: transformers on the CPU against our runtime.

The default model (SmolLM2-135M) is quantized by `dsquant rtn` at 4 bits,
groups of 64, with zero points, into the three formats: compressed-tensors
pack-quantized, AutoAWQ GEMM and GPTQ v1 (the same codes, scales and zeros in
three packings), and at 8 bits per channel, symmetric, into compressed-tensors.

  transformers  AutoModelForCausalLM.from_pretrained(compressed-tensors folder,
                CompressedTensorsConfig(dequantize=True)) on the CPU
                (compressed-tensors decompresses the packed weights);
                logits for every position of 2 windows of 256 tokens of
                WikiText-2 (ids from `dsquant tokenize`), NLL of the next token.
  ours          `dsquant ppl FOLDER --data FILE --protocol hf --ctx 256` on the
                same text: the same windows, all but the first token scored.

Checks: for each compressed-tensors folder our mean NLL equals transformers'
within 2e-4 (relative) while quantization moved it by far more than that
from the float model's; the AutoAWQ and GPTQ folders give exactly our
compressed-tensors folder's perplexity (the runtime reads the same weights
from all three packings). transformers' own AWQ and GPTQ loaders need
autoawq / gptqmodel, GPU-kernel packages not installed here; the packings
themselves are checked by independent unpackers in test_pack_formats.py.
About 1 minute. Exit 77 when the model, the dataset or a package is missing.
"""
import json
import os
import shutil
import sys
import tempfile

from dsq_testlib import default_model, dsquant, skip, wiki_excerpt, wiki_path

CTX = 256
CHUNKS = 2
TOL = 2e-4

try:
    import numpy as np
    import torch
    import compressed_tensors  # noqa: F401  (transformers needs it for these folders)
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); scripts/install-deps.sh installs torch, transformers, compressed-tensors")


def ours(folder, text_file):
    j = json.loads(dsquant("ppl", folder, "--data", text_file, "--protocol", "hf", "--ctx", str(CTX), "--chunks",
                           str(CHUNKS), "--json"))
    return j["nll_mean"], j["n_scored"]


def theirs(folder, ids, quantized):
    # dequantize=True: compressed-tensors' decompressor turns the packed weights into dense ones at load.
    # (transformers 5.24's compressed-run path pre-shapes weight_zero_point unpacked, [out, groups], while
    # compressed-tensors 0.20.1's own compressor writes it packed along rows, as we do, so asymmetric
    # pack-quantized folders - llm-compressor's included - only load this way.)
    kw = {"quantization_config": CompressedTensorsConfig(dequantize=True)} if quantized else {}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True, **kw)
    model.eval()
    nll = []
    with torch.no_grad():
        for c in range(CHUNKS):
            w = torch.tensor([ids[c * CTX:(c + 1) * CTX]])
            logits = model(w).logits[0].double()
            lp = torch.log_softmax(logits[:-1], dim=-1)
            nll.extend((-lp[torch.arange(CTX - 1), w[0, 1:]]).tolist())
    return float(np.mean(nll)), len(nll)


def main():
    src = default_model()
    wiki_path()  # exits 77 without the text, before anything is made
    work = tempfile.mkdtemp(prefix="dsq-intlogits-")
    problems = []
    try:
        text_file = wiki_excerpt(work)
        base = os.path.join(work, "base")
        dsquant("convert", src, "-o", base, "--dtype", "f32")
        ids = [int(t) for t in dsquant("tokenize", base, "--file", text_file).split()]
        if len(ids) < CHUNKS * CTX:
            sys.exit(f"only {len(ids)} tokens in the text, need {CHUNKS * CTX}")
        folders = {}
        for name, args in (("ct-w4g64-asym", ["--w-bit", "4", "--group", "64", "--zero-point",
                                              "--format", "compressed-tensors"]),
                           ("awq-w4g64-asym", ["--w-bit", "4", "--group", "64", "--zero-point", "--format", "awq"]),
                           ("gptq-w4g64-asym", ["--w-bit", "4", "--group", "64", "--zero-point",
                                                "--format", "gptq"]),
                           ("ct-w8-channel-sym", ["--w-bit", "8", "--group", "-1", "--sym",
                                                  "--format", "compressed-tensors"])):
            folders[name] = os.path.join(work, name)
            dsquant("rtn", base, "-o", folders[name], *args)
        nb, n_ours = ours(base, text_file)
        tb, n_theirs = theirs(base, ids, False)
        print(f"float: ours {nb:.6f} transformers {tb:.6f} ({n_ours} / {n_theirs} tokens)")
        if n_ours != n_theirs:
            problems.append(f"scored tokens: ours {n_ours}, transformers {n_theirs}")
        if abs(nb - tb) > TOL * tb:
            problems.append(f"float model: ours {nb:.6f} vs transformers {tb:.6f}")
        got = {}
        for name, folder in folders.items():
            got[name] = ours(folder, text_file)[0]
            line = f"{name}: ours {got[name]:.6f}"
            if name.startswith("ct-"):
                t = theirs(folder, ids, True)[0]
                line += f", transformers {t:.6f} (diff {abs(got[name] - t) / t:.2e}; float model {tb:.6f})"
                if abs(got[name] - t) > TOL * t:
                    problems.append(f"{name}: ours {got[name]:.6f} vs transformers {t:.6f}")
                if abs(t - tb) < 10 * TOL * tb and name.startswith("ct-w4"):
                    problems.append(f"{name}: 4-bit NLL {t:.6f} is too close to the float model's {tb:.6f} "
                                    f"to tell a packing error from none")
            print(line)
        for name in ("awq-w4g64-asym", "gptq-w4g64-asym"):
            if got[name] != got["ct-w4g64-asym"]:
                problems.append(f"{name}: {got[name]!r} differs from the compressed-tensors folder's "
                                f"{got['ct-w4g64-asym']!r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
