"""`dsquant ppl` against llama.cpp's own forward pass on the same GGUF files.

Models, all made from the same weights: the default model (SmolLM2-135M Q4_1)
taken to F32 with `dsquant gguf --type F32 --allow-requantize`, and Q8_0 and
Q4_K_M quantized from that F32 file with `dsquant gguf`, and Q4_K_M by GPTQ
and by AWQ into the same blocks (`dsquant gguf --method gptq|awq`, 3 x 512
tokens of tinyshakespeare: the agreement does not depend on how good the
calibration is, but GGUF calibration wants at least as many tokens as the
widest linear input, 1536; AWQ's norms carry its scales): llama.cpp must load
them and agree with us on them as on the plain file (compared with
--llamacpp-act only, the same arithmetic).

Text: WikiText-2 test (wiki.test.raw), the first K = 10 chunks of 512 tokens
(DSQ_PPL_CHUNKS overrides K). With activations rounded to 8 bits, a change in
summation order anywhere (ours: a blocked attention GEMM for 8+ rows against
dot products for fewer; llama.cpp: its own SIMD order) flips some roundings,
and one flipped outlier step moves this 135M model's perplexity: over 3 chunks
our own two attention orders differ by 0.5%, over 10 chunks the differences
average out (llama.cpp vs ours, --llamacpp-act: Q8_0 -0.27%, Q4_K_M +0.32%).

  tokens     llama.cpp tokenizes the whole text as llama-perplexity does
             (common_tokenize with add_special, no special parsing); ours is
             `dsquant tokenize --file wiki.test.raw --add-special`. The ids of
             the K chunks (and the total count) must be identical; a mismatch
             is reported with its position and fails the test, and llama.cpp
             is then fed OUR ids so the perplexities still compare like with like.
  llama.cpp  llama_cpp.Llama (n_ctx 512, n_batch = n_ubatch = 512, logits for
             every position, 1 thread, an F32 KV cache like ours; DSQ_LLAMA_KV=f16
             selects llama.cpp's default F16 cache, which alone moves the Q8_0
             perplexity by about 0.4% on this small model) evaluates each chunk from an empty
             cache with perplexity.cpp's protocol: BOS replaces the chunk's
             first token when the vocabulary adds BOS; positions 256..510 are
             scored against the next token; NLL by log-softmax; PPL =
             exp(mean NLL), +/- as perplexity.cpp prints it.
  ours       `dsquant ppl MODEL --data wikitext2 --protocol llamacpp --ctx 512
             --chunks K --threads 1 --json`, twice for the quantized models:
             default (F32 activations against dequantized weight tiles, the
             more accurate arithmetic) and --llamacpp-act (activations rounded
             to each type's vec_dot_type and integer dot products in every
             product, which is what llama.cpp's CPU backend does in prefill).

Checks:
  - F32: PPL within 0.1% of llama.cpp's (nothing is rounded differently,
    only the summation order differs: 1e-5 observed).
  - Q8_0 and Q4_K_M with --llamacpp-act: within 0.5% of llama.cpp's (same
    arithmetic; summation-order differences still flip a few activation
    roundings, ~0.2% here).
  - the GPTQ Q4_K_M file with --llamacpp-act: within 1% (see TOL_GPTQ).
  - Q8_0 and Q4_K_M default: within 1.5% (the gap is llama.cpp's activation
    rounding, 0.2-1% on this 135M model); both numbers are printed.
  - ordering, on both sides: PPL(F32) <= PPL(Q8_0) <= PPL(Q4_K_M), each step
    allowed to go the wrong way by at most the larger of the two +/- values.

Our runs go in a background process (1 thread) while llama.cpp runs here (1
thread), so the two cores are used in parallel. About 3 minutes on 2 busy cores
(a Xeon); over 20 on an AVX2-only 2-vCPU EPYC beside two other tests, so the
work is split in two parts that ctest runs as two tests (CMakeLists.txt):
`--part plain` (F32, Q8_0, Q4_K_M and the ordering checks) and `--part calibrated`
(the GPTQ and AWQ files); no argument runs both.
Exit 77 (skipped) when the model, the dataset or a Python package is missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from dsq_testlib import binary, default_model, dsquant, skip, wiki_path

CTX = 512
TOL_F32 = 0.001        # F32: only summation order differs (observed 1e-5)
TOL_SAME = 0.005       # same arithmetic on both sides (the bound)
# The GPTQ file, same arithmetic too: its agreement is issue 15's "llama.cpp's perplexity
# agrees with ours", not the runtime issue's 0.5% for the plain files. Summation-order
# noise alone moved it from -0.22% (one machine's llama.cpp build) to +0.52% (a Zen 5
# build) while the plain Q4_K_M stayed at +0.26%; a block layout llama.cpp read
# differently would be off by far more.
TOL_GPTQ = 0.01
TOL_PREFILL_Q = 0.015  # F32 activations (ours) against Q8 activations (llama.cpp)
KV_TYPES = {"f32": 0, "f16": 1}  # ggml type ids for llama.cpp's KV cache


try:
    import numpy as np
    import llama_cpp
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); scripts/install-deps.sh installs numpy and llama-cpp-python")


def ppl_stats(nll):
    """perplexity.cpp's final estimate and its +/-."""
    nll = np.asarray(nll, dtype=np.float64)
    mean, mean2 = nll.mean(), (nll * nll).mean()
    ppl = float(np.exp(mean))
    err = float(np.sqrt((mean2 - mean * mean) / (nll.size - 1)) * ppl) if nll.size > 1 else 0.0
    return ppl, err


# ---------------------------------------------------------------- tokens

def compare_tokens(model, wiki, k, problems):
    """Token ids of the whole text: llama.cpp's if they equal ours, else ours."""
    with open(wiki, "rb") as f:
        text = f.read()
    llm = llama_cpp.Llama(model, vocab_only=True, verbose=False)
    add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    theirs = llm.tokenize(text, add_bos=True, special=False)
    bos = llm.token_bos()
    del llm
    ours = [int(t) for t in dsquant("tokenize", model, "--file", wiki, "--add-special").split()]
    need = k * CTX
    print(f"tokens: llama.cpp {len(theirs)}, ours {len(ours)}; add_bos {bool(add_bos)}")
    if ours[:need] != theirs[:need]:
        i = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        problems.append(f"TOKENIZER MISMATCH at token {i} (chunk {i // CTX + 1}): ours {ours[i:i + 8]}, "
                        f"llama.cpp {theirs[i:i + 8]}; llama.cpp is fed our ids below")
    elif len(ours) != len(theirs):
        problems.append(f"TOKENIZER MISMATCH past the scored chunks: {len(ours)} ids (ours) vs {len(theirs)}")
    return ours, bool(add_bos), bos


# ---------------------------------------------------------------- llama.cpp

def llama_ppl(model, ids, k, add_bos, bos):
    kv = KV_TYPES[os.environ.get("DSQ_LLAMA_KV", "f32")]
    llm = llama_cpp.Llama(model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, logits_all=True, n_threads=1,
                          n_threads_batch=1, type_k=kv, type_v=kv, verbose=False)
    first = CTX // 2
    nll = []
    for c in range(k):
        chunk = list(ids[c * CTX:(c + 1) * CTX])
        if add_bos:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[first:CTX - 1], dtype=np.float64)
        mx = logits.max(axis=1, keepdims=True)
        lse = np.log(np.exp(logits - mx).sum(axis=1)) + mx[:, 0]
        target = np.asarray(chunk[first + 1:CTX])
        nll.extend(lse - logits[np.arange(CTX - 1 - first), target])
    del llm
    return ppl_stats(nll)


# ---------------------------------------------------------------- ours (background)

def ours_runs(jobs, k, results, env):
    """Runs `dsquant ppl` for each (name, model, llamacpp_act) in turn."""
    for name, model, llact in jobs:
        args = ["ppl", model, "--data", "wikitext2", "--protocol", "llamacpp", "--ctx", str(CTX), "--chunks",
                str(k), "--threads", "1", "--json"]
        if llact:
            args.append("--llamacpp-act")
        t0 = time.time()
        r = subprocess.run([binary(), "-q", *args], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            results[(name, llact)] = RuntimeError(f"dsquant {' '.join(args)}: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        results[(name, llact)] = (j["ppl"], j["ppl_err"], j["n_scored"], time.time() - t0)


GPTQ = "Q4_K_M gptq"
AWQ = "Q4_K_M awq"


def calib_text():
    """The calibration text from the shared folder (offline), as a path."""
    path = os.path.join(os.path.dirname(wiki_path()), "tinyshakespeare.txt.zst")
    if not os.path.exists(path):
        skip(f"no tinyshakespeare.txt.zst next to {wiki_path()}")
    return path


def parse_part(argv):
    """Which models this run covers: 'plain', 'calibrated' or both."""
    if len(argv) == 1:
        return {"plain", "calibrated"}
    if len(argv) == 3 and argv[1] == "--part" and argv[2] in ("plain", "calibrated"):
        return {argv[2]}
    sys.exit(f"usage: {argv[0]} [--part plain|calibrated]")


def main():
    parts = parse_part(sys.argv)
    t_start = time.time()
    src, wiki = default_model(), wiki_path()
    k = int(os.environ.get("DSQ_PPL_CHUNKS", "10"))
    problems = []
    work = tempfile.mkdtemp(prefix="dsq-llppl-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    env = dict(os.environ)
    env.setdefault("DSQ_SHARED_DIR", os.path.dirname(os.path.dirname(wiki)))
    env["DSQ_DATA"] = os.path.dirname(wiki)
    try:
        models = {"F32": os.path.join(work, "f32.gguf")}
        dsquant("gguf", src, "-o", models["F32"], "--type", "F32", "--allow-requantize")
        if "plain" in parts:
            for t in ("Q8_0", "Q4_K_M"):
                models[t] = os.path.join(work, f"{t}.gguf")
                dsquant("gguf", models["F32"], "-o", models[t], "--type", t)
        if "calibrated" in parts:
            models[GPTQ] = os.path.join(work, "Q4_K_M-gptq.gguf")
            dsquant("gguf", models["F32"], "-o", models[GPTQ], "--type", "Q4_K_M", "--method", "gptq", "--calib",
                    calib_text(), "--n-samples", "3", "--seqlen", "512")
            models[AWQ] = os.path.join(work, "Q4_K_M-awq.gguf")
            dsquant("gguf", models["F32"], "-o", models[AWQ], "--type", "Q4_K_M", "--method", "awq", "--calib",
                    calib_text(), "--n-samples", "3", "--seqlen", "512", "--loss-samples", "1")
        print(f"models made in {time.time() - t_start:.1f} s")
        ids, add_bos, bos = compare_tokens(models["F32"], wiki, k, problems)

        jobs, names = [], []
        if "plain" in parts:
            names += ["F32", "Q8_0", "Q4_K_M"]
            jobs += [("F32", models["F32"], False), ("Q8_0", models["Q8_0"], True),
                     ("Q4_K_M", models["Q4_K_M"], True)]
        if "calibrated" in parts:
            names += [GPTQ, AWQ]
            jobs += [(GPTQ, models[GPTQ], True), (AWQ, models[AWQ], True)]
        if "plain" in parts:
            jobs += [("Q8_0", models["Q8_0"], False), ("Q4_K_M", models["Q4_K_M"], False)]
        ours = {}
        bg = threading.Thread(target=ours_runs, args=(jobs, k, ours, env))
        bg.start()
        theirs = {}
        for name in names:
            t0 = time.time()
            theirs[name] = llama_ppl(models[name], ids, k, add_bos, bos)
            print(f"llama.cpp {name}: PPL {theirs[name][0]:.4f} +/- {theirs[name][1]:.4f} ({time.time() - t0:.1f} s)")
        bg.join()
        for key, v in ours.items():
            if isinstance(v, Exception):
                sys.exit(str(v))

        print(f"\n{k} chunks of {CTX} (llama-perplexity protocol), {k * (CTX - 1 - CTX // 2)} tokens scored")
        print("| model | llama.cpp | ours --llamacpp-act | diff | ours default | diff |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in names:
            ref = theirs[name][0]
            lla = ours.get((name, True))
            d_lla = lla[0] / ref - 1 if lla else None
            if (name, False) not in ours:  # the calibrated files: the same arithmetic as llama.cpp's only
                print(f"| {name} | {ref:.4f} | {lla[0]:.4f} | {100 * d_lla:+.3f}% | - | - |")
                if abs(d_lla) > TOL_GPTQ:
                    problems.append(f"{name} --llamacpp-act: ours {lla[0]:.4f} vs llama.cpp {ref:.4f} "
                                    f"({100 * d_lla:+.3f}%, limit {100 * TOL_GPTQ:g}%)")
                continue
            pre = ours[(name, False)][0]
            d_pre = pre / ref - 1
            print(f"| {name} | {ref:.4f} | " + (f"{lla[0]:.4f} | {100 * d_lla:+.3f}% |" if lla else "- | - |")
                  + f" {pre:.4f} | {100 * d_pre:+.4f}% |")
            if not lla:
                if abs(d_pre) > TOL_F32:
                    problems.append(f"{name}: ours {pre:.4f} vs llama.cpp {ref:.4f} ({100 * d_pre:+.4f}%, "
                                    f"limit {100 * TOL_F32:g}%)")
                continue
            if abs(d_lla) > TOL_SAME:
                problems.append(f"{name} --llamacpp-act: ours {lla[0]:.4f} vs llama.cpp {ref:.4f} "
                                f"({100 * d_lla:+.3f}%, limit {100 * TOL_SAME:g}%)")
            if abs(d_pre) > TOL_PREFILL_Q:
                problems.append(f"{name} default: ours {pre:.4f} vs llama.cpp {ref:.4f} "
                                f"({100 * d_pre:+.3f}%, limit {100 * TOL_PREFILL_Q:g}%)")
        orders = () if "plain" not in parts else (
            ("llama.cpp", {n: theirs[n] for n in theirs}),
            ("ours", {n: ours[(n, False)][:2] for n in ("F32", "Q8_0", "Q4_K_M")}))
        for side, vals in orders:
            for a, b in (("F32", "Q8_0"), ("Q8_0", "Q4_K_M")):
                noise = max(vals[a][1], vals[b][1])
                if vals[a][0] > vals[b][0] + noise:
                    problems.append(f"ordering ({side}): PPL {a} {vals[a][0]:.4f} > {b} {vals[b][0]:.4f} "
                                    f"+ noise {noise:.4f}")
            print(f"ordering ({side}): F32 {vals['F32'][0]:.4f} <= Q8_0 {vals['Q8_0'][0]:.4f} <= "
                  f"Q4_K_M {vals['Q4_K_M'][0]:.4f} (+/- {vals['F32'][1]:.3f} .. {vals['Q4_K_M'][1]:.3f})")
        for (name, llact), v in sorted(ours.items()):
            print(f"ours {name} {'--llamacpp-act' if llact else 'default'}: {v[3]:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"total {time.time() - t_start:.1f} s")
    if problems:
        print("\nFAILED:")
        for p in problems:
            print("  " + p)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
