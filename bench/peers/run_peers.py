"""Peer comparison: dsquant against llm-compressor, AWQ and GPTQ, and with --w8
SmoothQuant W8A8 and FP8 (not in CI).

    bash bench/peers/setup.sh                       # once: llm-compressor venv
    python3 bench/peers/run_peers.py [--n-samples 32 --seqlen 512 --schemes w4g64,w3g64]
    python3 bench/peers/run_peers.py --w8 [--n-samples 32 --seqlen 512]   # 8-bit table

The 8-bit table (--w8, rows from --w8-methods): llm-compressor's SmoothQuant +
GPTQ W8A8 recipe (examples/quantization_w8a8_int8: smoothing_strength 0.8)
and the same with the modifier's default strength 0.5, against
`dsquant smoothquant --weights gptq --alpha 0.8 / 0.5` on the same windows;
FP8_DYNAMIC and FP8_BLOCK against `dsquant fp8 --scheme dynamic / block`;
dsquant-only rows for its defaults (RTN, per-family alpha), --alpha auto and
--no-smooth. A command that refuses (FP8 blocks on a model whose widths are
not multiples of 128) is a row with its error. Our runtime evaluates every
folder with its activations quantized as the folder says (per token INT8 /
FP8), as vLLM runs them.

Same base model (the default SmolLM2-135M GGUF taken to a BF16 Hugging Face
folder by `dsquant convert`), same calibration tokens (dsquant samples the
windows; their starts come back in its --json output and llm-compressor is fed
exactly those token ids), same scheme, and one evaluator for every result:
`dsquant ppl --protocol hf` on WikiText-2 (our runtime reads both tools'
compressed-tensors folders; on the base it agrees with transformers to
4 decimals, tests/test_forward.c). Wall time and peak RSS are measured around
each quantizing process (wait4's ru_maxrss), on the same threads.

dsquant runs with the options that match llm-compressor's defaults: GPTQ
symmetric with act-order and static groups (llm-compressor's actorder
"static"), damp 0.01, blocks of 128; AWQ asymmetric with duo scaling and a
20-point grid (dsquant also runs AutoAWQ's clip search, llm-compressor does
not). Output: a markdown table on stdout and a JSON file in the work folder.
Python here is only the driver: stdlib only, the tools run as subprocesses.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")


def measured(cmd, env=None, log=None, fail_ok=False):
    """Runs cmd; returns (stdout, wall seconds, peak RSS MiB of the process tree's largest).
    fail_ok: a failure raises RuntimeError with the log's last line instead of ending the run."""
    t0 = time.time()
    with open(log or os.devnull, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    if os.waitstatus_to_exitcode(status) != 0 and fail_ok:
        last = ""
        if log and os.path.exists(log):
            with open(log) as f:
                lines = [x.strip() for x in f if x.strip()]
            last = lines[-1] if lines else ""
        raise RuntimeError(last or f"exit {os.waitstatus_to_exitcode(status)}")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}; see {log}")
    return out, wall, ru.ru_maxrss / 1024.0


def dsquant(binary, *args):
    r = subprocess.run([binary, "-q", *args], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"dsquant {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def ppl(binary, model, chunks, threads):
    j = json.loads(dsquant(binary, "ppl", model, "--data", "wikitext2", "--protocol", "hf", "--ctx", "512",
                           "--chunks", str(chunks), "--threads", str(threads), "--json"))
    return j["ppl"]


def copy_tokenizer(base, out):
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(base, f)) and not os.path.exists(os.path.join(out, f)):
            shutil.copy(os.path.join(base, f), os.path.join(out, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsquant", default=os.path.join(ROOT, "build", "dsquant"))
    ap.add_argument("--work", default=os.path.join(CACHE, "bench", "peers"))
    ap.add_argument("--base", help="HF folder (default: made from the default GGUF, BF16)")
    ap.add_argument("--methods", default="gptq,awq")
    ap.add_argument("--schemes", default="w4g64,w3g64")
    ap.add_argument("--n-samples", type=int, default=32)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--calib", default="tinyshakespeare")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--chunks", type=int, default=40, help="WikiText-2 windows of 512 for the evaluation")
    ap.add_argument("--no-peer", action="store_true", help="only dsquant (no llm-compressor)")
    ap.add_argument("--no-rtn", action="store_true", help="skip the RTN rows")
    ap.add_argument("--w8", action="store_true", help="the 8-bit table (SmoothQuant W8A8, FP8) instead")
    ap.add_argument("--w8-methods", default="sq-gptq-0.8,sq-gptq-0.5,fp8-dynamic,fp8-block,sq-rtn-default,"
                    "sq-rtn-auto,w8a8-no-smooth")
    ap.add_argument("--dsq-args", default="", help="extra options for the dsquant quantize commands, e.g. "
                    "'--loss-samples 4' (recorded in results.json)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    peer_py = os.path.join(CACHE, "peers-venv", "bin", "python")
    if not a.no_peer and not os.path.exists(peer_py):
        sys.exit(f"{peer_py} missing: run bash bench/peers/setup.sh")
    base = a.base or os.path.join(a.work, "base-bf16")
    if not a.base and not os.path.exists(base):
        gguf = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
        dsquant(a.dsquant, "convert", gguf, "-o", base, "--dtype", "bf16")
    results = {"base": base, "n_samples": a.n_samples, "seqlen": a.seqlen, "calib": a.calib,
               "threads": a.threads, "chunks": a.chunks, "rows": []}
    results["ppl_base"] = ppl(a.dsquant, base, a.chunks, a.threads)
    print(f"base {base}: WikiText-2 ppl {results['ppl_base']:.4f} ({a.chunks} x 512, hf protocol)", file=sys.stderr)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if a.w8:
        return run_w8(a, base, results, env, peer_py)
    for scheme in a.schemes.split(","):
        bits, group = int(scheme[1:scheme.index("g")]), int(scheme[scheme.index("g") + 1:])
        if not a.no_rtn:
            out = os.path.join(a.work, f"rtn-{scheme}")
            dsquant(a.dsquant, "rtn", base, "-o", out, "--w-bit", str(bits), "--group", str(group), "--force",
                    "--format", "compressed-tensors")
            results["rows"].append({"method": "rtn", "scheme": scheme, "tool": "dsquant",
                                    "ppl": ppl(a.dsquant, out, a.chunks, a.threads)})
        for method in a.methods.split(","):
            out = os.path.join(a.work, f"dsq-{method}-{scheme}")
            extra = ["--act-order", "--static-groups", "--sym"] if method == "gptq" else ["--zero-point"]
            cmd = [a.dsquant, method, base, "-o", out, "--w-bit", str(bits), "--group", str(group), "--force",
                   "--format", "compressed-tensors", "--calib", a.calib, "--n-samples", str(a.n_samples),
                   "--seqlen", str(a.seqlen), "--seed", "0", "--threads", str(a.threads), "--json", *extra,
                   *shlex.split(a.dsq_args)]
            text, wall, rss = measured(cmd, env, os.path.join(a.work, f"dsq-{method}-{scheme}.log"))
            j = json.loads(text)
            row = {"method": method, "scheme": scheme, "tool": "dsquant", "seconds": wall, "peak_rss_mib": rss,
                   "ppl": ppl(a.dsquant, out, a.chunks, a.threads), "args": cmd[2:], "compute": j.get("compute")}
            results["rows"].append(row)
            print(f"dsquant {method} {scheme}: ppl {row['ppl']:.4f}, {wall:.1f} s, {rss:.0f} MiB", file=sys.stderr)
            if a.no_peer:
                continue
            # the same windows for llm-compressor
            calib = j["calib"]
            ids_txt = dsquant(a.dsquant, "tokenize", base, "--file", calib)
            ids = [int(t) for t in ids_txt.split()]
            if len(ids) != j["calib_text_tokens"]:
                sys.exit(f"tokenize gave {len(ids)} ids, calibration saw {j['calib_text_tokens']}")
            windows = [ids[s:s + a.seqlen] for s in j["calib_starts"]]
            wpath = os.path.join(a.work, f"windows-{a.n_samples}x{a.seqlen}.json")
            with open(wpath, "w") as f:
                json.dump(windows, f)
            pout = os.path.join(a.work, f"llmc-{method}-{scheme}")
            shutil.rmtree(pout, ignore_errors=True)
            cmd = [peer_py, os.path.join(HERE, "llmc_quant.py"), "--model", base, "--out", pout, "--method", method,
                   "--bits", str(bits), "--group", str(group), "--windows", wpath, "--threads", str(a.threads)]
            text, wall, rss = measured(cmd, env, os.path.join(a.work, f"llmc-{method}-{scheme}.log"))
            copy_tokenizer(base, pout)
            prow = {"method": method, "scheme": scheme, "tool": "llm-compressor", "seconds": wall,
                    "peak_rss_mib": rss, "ppl": ppl(a.dsquant, pout, a.chunks, a.threads),
                    "inner": json.loads(text.strip().splitlines()[-1])}
            results["rows"].append(prow)
            print(f"llm-compressor {method} {scheme}: ppl {prow['ppl']:.4f}, {wall:.1f} s, {rss:.0f} MiB",
                  file=sys.stderr)
            with open(os.path.join(a.work, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    pb = results["ppl_base"]
    print(f"\nbase (BF16) WikiText-2 ppl {pb:.4f}; calibration {a.n_samples} x {a.seqlen} tokens of {a.calib}; "
          f"{a.threads} threads\n")
    print("| method | scheme | tool | ppl | delta to base | wall s | peak RSS MiB | time ratio | RSS ratio |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    rows = results["rows"]
    for r in rows:
        mine = next((x for x in rows if x["tool"] == "dsquant" and x["method"] == r["method"]
                     and x["scheme"] == r["scheme"]), None)
        tr = rr = "-"
        if r["tool"] == "llm-compressor" and mine:
            tr = f"{r['seconds'] / mine['seconds']:.1f}x"
            rr = f"{r['peak_rss_mib'] / mine['peak_rss_mib']:.1f}x"
        sec = f"{r['seconds']:.1f}" if "seconds" in r else "-"
        rss = f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else "-"
        print(f"| {r['method']} | {r['scheme']} | {r['tool']} | {r['ppl']:.4f} | {r['ppl'] - pb:+.4f} | {sec} | "
              f"{rss} | {tr} | {rr} |")


# 8-bit rows: name -> (dsquant command and options, llm-compressor method and options or None)
W8_ROWS = {
    "sq-gptq-0.8": (["smoothquant", "--weights", "gptq", "--alpha", "0.8"], ["sq-gptq", "--strength", "0.8"]),
    "sq-gptq-0.5": (["smoothquant", "--weights", "gptq", "--alpha", "0.5"], ["sq-gptq", "--strength", "0.5"]),
    "fp8-dynamic": (["fp8", "--scheme", "dynamic"], ["fp8-dynamic"]),
    "fp8-block": (["fp8", "--scheme", "block"], ["fp8-block"]),
    "sq-rtn-default": (["smoothquant"], None),
    "sq-rtn-auto": (["smoothquant", "--alpha", "auto"], None),
    "w8a8-no-smooth": (["smoothquant", "--no-smooth"], None),
}


def run_w8(a, base, results, env, peer_py):
    calib = ["--calib", a.calib, "--n-samples", str(a.n_samples), "--seqlen", str(a.seqlen), "--seed", "0"]
    windows_path = None
    for name in a.w8_methods.split(","):
        cmd_ours, peer = W8_ROWS[name]
        out = os.path.join(a.work, f"dsq-{name}")
        cmd = [a.dsquant, cmd_ours[0], base, "-o", out, *cmd_ours[1:], "--force", "--threads", str(a.threads),
               "--json", *(calib if cmd_ours[0] == "smoothquant" or "static" in cmd_ours else [])]
        try:
            text, wall, rss = measured(cmd, env, os.path.join(a.work, f"dsq-{name}.log"), fail_ok=True)
            j = json.loads(text)
            row = {"method": name, "scheme": j.get("scheme", ""), "tool": "dsquant", "seconds": wall,
                   "peak_rss_mib": rss, "ppl": ppl(a.dsquant, out, a.chunks, a.threads), "args": cmd[2:],
                   "alpha": j.get("alpha")}
            if j.get("calib_starts") and windows_path is None:  # the windows llm-compressor is fed
                ids = [int(t) for t in dsquant(a.dsquant, "tokenize", base, "--file", j["calib"]).split()]
                windows_path = os.path.join(a.work, f"windows-{a.n_samples}x{a.seqlen}.json")
                with open(windows_path, "w") as f:
                    json.dump([ids[s:s + a.seqlen] for s in j["calib_starts"]], f)
        except RuntimeError as e:
            row = {"method": name, "tool": "dsquant", "error": str(e)}
        results["rows"].append(row)
        print(f"dsquant {name}: {row.get('ppl', row.get('error'))}", file=sys.stderr)
        if peer and not a.no_peer:
            pout = os.path.join(a.work, f"llmc-{name}")
            shutil.rmtree(pout, ignore_errors=True)
            pcmd = [peer_py, os.path.join(HERE, "llmc_quant.py"), "--model", base, "--out", pout, "--method", peer[0],
                    *peer[1:], "--threads", str(a.threads)]
            if peer[0] == "sq-gptq":
                if windows_path is None:
                    sys.exit(f"{name}: no calibration windows from dsquant to give llm-compressor")
                pcmd += ["--windows", windows_path]
            try:
                text, wall, rss = measured(pcmd, env, os.path.join(a.work, f"llmc-{name}.log"), fail_ok=True)
                copy_tokenizer(base, pout)
                prow = {"method": name, "tool": "llm-compressor", "seconds": wall, "peak_rss_mib": rss,
                        "ppl": ppl(a.dsquant, pout, a.chunks, a.threads),
                        "inner": json.loads(text.strip().splitlines()[-1])}
            except (RuntimeError, SystemExit) as e:
                prow = {"method": name, "tool": "llm-compressor", "error": str(e)}
            results["rows"].append(prow)
            print(f"llm-compressor {name}: {prow.get('ppl', prow.get('error'))}", file=sys.stderr)
        with open(os.path.join(a.work, "results-w8.json"), "w") as f:
            json.dump(results, f, indent=1)
    pb = results["ppl_base"]
    print(f"\nbase (BF16) WikiText-2 ppl {pb:.4f} ({a.chunks} x 512, hf protocol, our runtime for every folder); "
          f"calibration {a.n_samples} x {a.seqlen} tokens of {a.calib}; {a.threads} threads\n")
    print("| method | tool | ppl | delta to base | wall s | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|")
    for r in results["rows"]:
        if "error" in r:
            print(f"| {r['method']} | {r['tool']} | refused: {r['error'][:120]} | | | |")
            continue
        print(f"| {r['method']} | {r['tool']} | {r['ppl']:.4f} | {r['ppl'] - pb:+.4f} | {r['seconds']:.1f} | "
              f"{r['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
