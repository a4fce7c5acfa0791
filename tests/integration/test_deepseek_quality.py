"""Quantization quality on a trained tiny DeepSeek-V3-architecture model
(tests/integration/train_tiny_deepseek.py: MLA, 8 routed experts top-2 with
sigmoid noaux_tc routing over 4 groups, a shared expert, a dense first layer,
trained a few minutes on the Gutenberg books; cached in
$DSQ_CACHE/models/tiny-dsv3-<hash>, rebuilt when the script or the
tokenizer changes).

Perplexity (`dsquant ppl --protocol hf --ctx 128 --chunks 64`: 8192 tokens) on the held-out tenth of
the books, for the base model and every method: RTN, GPTQ and AWQ at 4, 3
and 2 bits (groups of 32) and RTN at 8 bits per channel into
compressed-tensors folders, SmoothQuant W8A8 (smooth-all, every expert's
up -> down too) against plain W8A8, FP8 dynamic, block and static
(our FP8 kernels, FP8 activations; static scales per expert from its
routed tokens), and llama.cpp's Q6_K and Q4_K_M mixes of the
deepseek2 GGUF (`dsquant gguf`). The GPTQ run's expert coverage report
(tokens per expert) is printed and checked. Asserted: every quantized model
within reach of the base (ppl < 3x base), 8-bit RTN within 1% of the base,
FP8 within 5%, Q6_K better than Q4_K_M, RTN worse with fewer bits, GPTQ
better than RTN at 3 and 2 bits (at 4 bits both stay within 0.2% of the
base: the tied 49152-token embedding, unquantized, dominates this model), so
is AWQ, W8A8 within 1%, SmoothQuant's expert groups smoothed, every expert
calibrated on routed tokens (none under the threshold with 32 x 128
calibration tokens and trained routing). The table goes to stdout (and, by
hand, to docs/benchmarks.md).

About 5 minutes the first time (training), 1 minute after. Exit 77 without
torch/transformers, the default model (its tokenizer) or the Gutenberg text.
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from dsq_testlib import cache_dir, default_model, dsquant, skip

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); scripts/install-deps.sh installs torch and transformers")

problems = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        problems.append(what)


def books():
    dirs = [os.environ.get("DSQ_DATA"),
            os.environ.get("DSQ_SHARED_DIR") and os.path.join(os.environ["DSQ_SHARED_DIR"], "datasets"),
            os.path.join(HERE, "..", "..", "..", "shared", "datasets")]
    for d in dirs:
        if d and glob.glob(os.path.join(d, "gutenberg-nltk", "*.txt.zst")):
            return sorted(glob.glob(os.path.join(d, "gutenberg-nltk", "austen-*.txt.zst")))
    skip("the Gutenberg books (../shared/datasets/gutenberg-nltk) are missing")


def trained_model(work):
    """The cached model, or train it (about 4 minutes)."""
    smol = os.path.join(work, "smol")
    dsquant("-q", "convert", default_model(), "-o", smol)
    texts = books()
    h = hashlib.sha256()
    with open(os.path.join(HERE, "train_tiny_deepseek.py"), "rb") as f:
        h.update(f.read())
    with open(os.path.join(smol, "tokenizer.json"), "rb") as f:
        h.update(f.read())
    for t in texts:
        h.update(os.path.basename(t).encode())
    out = os.path.join(cache_dir(), "models", "tiny-dsv3-" + h.hexdigest()[:12])
    if os.path.exists(os.path.join(out, "heldout.txt")):
        return out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([sys.executable, os.path.join(HERE, "train_tiny_deepseek.py"), tmp, smol, *texts],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("training failed:\n" + r.stderr[-2000:])
    print("trained:", r.stdout.strip(), flush=True)
    os.replace(tmp, out)
    return out


def ppl(model, data):
    j = json.loads(dsquant("-q", "ppl", model, "--data", data, "--protocol", "hf", "--ctx", "128", "--chunks", "64",
                           "--json"))
    return j["ppl"]


def main():
    work = tempfile.mkdtemp(prefix="dsq-dsq3-")
    try:
        m = trained_model(work)
        if "--train-only" in sys.argv:  # scripts/test.sh: train (once) before ctest, on an idle machine
            print("tiny DeepSeek-V3:", m)
            return
        data, calib = os.path.join(m, "heldout.txt"), os.path.join(m, "calib.txt")
        q = ["--calib", calib, "--n-samples", "32", "--seqlen", "128", "--format", "ct", "--json"]
        rows = [("base (F32)", ppl(m, data), "")]
        runs = {}
        for name, method, extra in (("rtn w8 channel", "rtn", ["--w-bit", "8", "--group", "-1"]),
                                    ("rtn w4 g32", "rtn", ["--w-bit", "4", "--group", "32"]),
                                    ("gptq w4 g32", "gptq", ["--w-bit", "4", "--group", "32"]),
                                    ("awq w4 g32", "awq", ["--w-bit", "4", "--group", "32"]),
                                    ("rtn w3 g32", "rtn", ["--w-bit", "3", "--group", "32"]),
                                    ("gptq w3 g32", "gptq", ["--w-bit", "3", "--group", "32"]),
                                    ("awq w3 g32", "awq", ["--w-bit", "3", "--group", "32"]),
                                    ("rtn w2 g32", "rtn", ["--w-bit", "2", "--group", "32"]),
                                    ("gptq w2 g32", "gptq", ["--w-bit", "2", "--group", "32"]),
                                    ("awq w2 g32", "awq", ["--w-bit", "2", "--group", "32"])):
            out = os.path.join(work, name.replace(" ", "-"))
            runs[name] = json.loads(dsquant("-q", method, m, "-o", out, *q, *extra))
            rows.append((name, ppl(out, data), ""))
        for name, opts in (("w8a8 (no smoothing)", ["--no-smooth", *q[:6]]),
                           ("smoothquant w8a8", ["--smooth-all", *q[:6]])):
            out = os.path.join(work, name.split()[0])
            runs[name] = json.loads(dsquant("-q", "smoothquant", m, "-o", out, *opts, "--json"))
            rows.append((name, ppl(out, data), "INT8 activations"))
        for name, opts in (("fp8 dynamic", ["--scheme", "dynamic"]),
                           ("fp8 block 128", ["--scheme", "block", "--partial-blocks"]),
                           ("fp8 static", ["--scheme", "static", *q[:6]])):
            out = os.path.join(work, name.replace(" ", "-"))
            dsquant("-q", "fp8", m, "-o", out, *opts)
            rows.append((name, ppl(out, data), "FP8 activations"))
        bf = os.path.join(work, "bf16.gguf")
        dsquant("-q", "convert", m, "-o", bf, "--dtype", "bf16")
        klds = {}
        for mix in ("Q6_K", "Q4_K_M"):
            out = os.path.join(work, mix + ".gguf")
            dsquant("-q", "gguf", bf, "-o", out, "--type", mix)
            klds[mix] = json.loads(dsquant("-q", "kld", m, out, "--data", data, "--ctx", "128", "--chunks", "32",
                                           "--json"))["kld"]["value"]
            rows.append((f"gguf {mix}", ppl(out, data), f"{os.path.getsize(out) / 1e6:.1f} MB, KLD {klds[mix]:.5f}"))
        base = rows[0][1]
        print(f"\n{'model':<18} {'ppl':>10} {'vs base':>9}  note")
        for name, p, note in rows:
            print(f"{name:<18} {p:>10.3f} {100 * (p / base - 1):>+8.2f}%  {note}")
        cov = runs["gptq w4 g32"].get("expert_coverage", {})
        print("gptq expert coverage:", json.dumps(cov), flush=True)
        r = dict((n, p) for n, p, _ in rows)
        check(all(p < 3 * base for p in r.values()), "every quantized model within 3x the base perplexity")
        check(abs(r["rtn w8 channel"] / base - 1) < 0.01, f"8-bit RTN within 1% of the base ({r['rtn w8 channel']:.3f})")
        # by KL divergence from the base: the two sit within the perplexity's noise of each other
        # (83.59 against 83.46 on a model retrained on another machine)
        check(klds["Q6_K"] < klds["Q4_K_M"], f"Q6_K's KLD {klds['Q6_K']:.5f} below Q4_K_M's {klds['Q4_K_M']:.5f}")
        check(r["gptq w3 g32"] < r["rtn w3 g32"] and r["gptq w2 g32"] < r["rtn w2 g32"],
              "GPTQ beats RTN at 3 and 2 bits (at 4 bits both are within noise of the base here)")
        check(r["rtn w2 g32"] > r["rtn w3 g32"] > r["rtn w8 channel"], "RTN degrades with fewer bits")
        check(r["awq w3 g32"] < r["rtn w3 g32"] and r["awq w2 g32"] < r["rtn w2 g32"],
              "AWQ (scales through MLA, the router and every expert) beats RTN at 3 and 2 bits")
        check(all(abs(r[k] / base - 1) < 0.01 for k in ("w8a8 (no smoothing)", "smoothquant w8a8")),
              "W8A8 INT8, plain and SmoothQuant (every expert smoothed), within 1% of the base")
        sq = runs["smoothquant w8a8"]
        check(sq.get("n_smoothed", 0) > 3 * 8, f"smoothquant smoothed the experts' groups too ({sq.get('n_smoothed')})")
        check(all(r[k] < 1.05 * base for k in ("fp8 dynamic", "fp8 block 128", "fp8 static")),
              "FP8 (dynamic, block, static) within 5% of the base")
        check(cov.get("experts") == 24 and cov.get("experts_below_min", 99) == 0 and cov.get("tokens_min", 0) > 0,
              f"every one of 3 x 8 experts calibrated on routed tokens ({cov})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problems:
        print(f"{len(problems)} problem(s):\n  " + "\n  ".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
