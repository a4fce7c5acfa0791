"""Peer comparison: dsquant against llm-compressor, AWQ, GPTQ, SmoothQuant W8A8
and FP8 (not in CI).

    bash bench/peers/setup.sh                       # once: llm-compressor venv
    python3 bench/peers/run_peers.py [--n-samples 32 --seqlen 512 --schemes w4g64,w3g64]
    python3 bench/peers/run_peers.py --methods sq,fp8 [--n-samples 32]   # the 8-bit rows

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
not). The 8-bit methods (`sq`, `fp8`, the rows in W8_ROWS) run in pairs of one
dsquant command and one llm-compressor recipe (llmc_quant.py's sq / fp8-*), plus
dsquant-only rows (our defaults, alpha auto, plain W8A8); a tool that refuses a
scheme gets a row with its error line instead of a perplexity, and so does a
folder our runtime cannot read. Their results are merged into results-w8.json by
row, so --no-peer and --peer-only runs can be made one after the other.
Output: a markdown table on stdout and a JSON file in the work folder.
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


def measured(cmd, env=None, log=None, check=True):
    """Runs cmd; returns (stdout, wall seconds, peak RSS MiB of the process tree's largest),
    and with check=False a fourth item: the exit code."""
    t0 = time.time()
    with open(log or os.devnull, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    rc = os.waitstatus_to_exitcode(status)
    if check and rc != 0:
        sys.exit(f"failed ({rc}): {' '.join(cmd)}; see {log}")
    return (out, wall, ru.ru_maxrss / 1024.0) if check else (out, wall, ru.ru_maxrss / 1024.0, rc)


def error_line(log):
    """The line that says why a tool failed: its last line naming an error, else its last line."""
    lines = [x.strip() for x in open(log, errors="replace") if x.strip()]
    named = [x for x in lines if "Error" in x or "error" in x or "refus" in x]
    return (named or lines or ["(no output)"])[-1][:300]


def dsquant(binary, *args):
    r = subprocess.run([binary, "-q", *args], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"dsquant {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def ppl(binary, model, chunks, threads):
    j = json.loads(dsquant(binary, "ppl", model, "--data", "wikitext2", "--protocol", "hf", "--ctx", "512",
                           "--chunks", str(chunks), "--threads", str(threads), "--json"))
    return j["ppl"]


def try_ppl(binary, model, chunks, threads):
    """(ppl, None) or (None, the evaluator's error line): a folder we cannot read is a finding."""
    r = subprocess.run([binary, "-q", "ppl", model, "--data", "wikitext2", "--protocol", "hf", "--ctx", "512",
                        "--chunks", str(chunks), "--threads", str(threads), "--json"], capture_output=True, text=True)
    if r.returncode:
        return None, (r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    return json.loads(r.stdout)["ppl"], None


# The 8-bit rows: (pair, dsquant label, dsquant args, llm-compressor args or None). A pair is
# one scheme with one recipe on both sides; dsquant-only rows have no peer.
SQ_CAL = object()  # stands for the calibration options
W8_ROWS = {
    "sq": [
        ("w8a8 alpha 0.8 gptq", "smoothquant --weights gptq --alpha 0.8",
         ["smoothquant", "--weights", "gptq", "--alpha", "0.8", SQ_CAL], ["--method", "sq", "--alpha", "0.8"]),
        ("w8a8 alpha 0.5 gptq", "smoothquant --weights gptq --alpha 0.5",
         ["smoothquant", "--weights", "gptq", "--alpha", "0.5", SQ_CAL], ["--method", "sq", "--alpha", "0.5"]),
        ("w8a8 defaults", "smoothquant (rtn, family alpha 0.85)", ["smoothquant", SQ_CAL], None),
        ("w8a8 alpha auto", "smoothquant --alpha auto (rtn)", ["smoothquant", "--alpha", "auto", SQ_CAL], None),
        ("w8a8 alpha auto gptq", "smoothquant --alpha auto --weights gptq",
         ["smoothquant", "--alpha", "auto", "--weights", "gptq", SQ_CAL], None),
        ("w8a8 no smooth", "smoothquant --no-smooth (rtn)", ["smoothquant", "--no-smooth", SQ_CAL], None),
        ("w8a8 no smooth gptq", "smoothquant --no-smooth --weights gptq",
         ["smoothquant", "--no-smooth", "--weights", "gptq", SQ_CAL], None),
    ],
    "fp8": [
        ("fp8 dynamic", "fp8 --scheme dynamic", ["fp8", "--scheme", "dynamic"], ["--method", "fp8-dynamic"]),
        ("fp8 block", "fp8 --scheme block --partial-blocks", ["fp8", "--scheme", "block", "--partial-blocks"], ["--method", "fp8-block"]),
    ],
}


def slug(text):
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def run_w8(a, base, env, peer_py, results):
    """The 8-bit rows (W8_ROWS), each pair as dsquant then llm-compressor on the same windows."""
    windows_path = None
    for method in [m for m in a.methods.split(",") if m in W8_ROWS]:
        for pair, label, args, peer in W8_ROWS[method]:
            if a.rows and pair not in a.rows.split(","):
                continue
            out = os.path.join(a.work, "dsq-" + slug(pair))
            cal = ["--calib", a.calib, "--n-samples", str(a.n_samples), "--seqlen", str(a.seqlen), "--seed", "0"]
            cmd = [a.dsquant, *[x for arg in args for x in (cal if arg is SQ_CAL else [arg])], base, "-o", out,
                   "--threads", str(a.threads), "--force", "--json"]
            if not a.peer_only:
                log = os.path.join(a.work, "dsq-" + slug(pair) + ".log")
                text, wall, rss, rc = measured(cmd, env, log, check=False)
                row = {"pair": pair, "tool": "dsquant", "label": label, "args": cmd[1:], "seconds": wall,
                       "peak_rss_mib": rss}
                if rc:
                    row["error"] = error_line(log)
                else:
                    j = json.loads(text)
                    row["ppl"], row["eval_error"] = try_ppl(a.dsquant, out, a.chunks, a.threads)
                    row.update({k: j[k] for k in ("alpha", "alpha_start", "compute", "n_smoothed") if k in j})
                    if j.get("calib_starts"):
                        windows_path = write_windows(a, base, j)
                put_row(a, results, row)
            if peer is None or a.no_peer:
                continue
            if "--method" in peer and peer[peer.index("--method") + 1] == "sq" and windows_path is None:
                windows_path = os.path.join(a.work, f"windows-{a.n_samples}x{a.seqlen}.json")
                if not os.path.exists(windows_path):
                    sys.exit(f"{windows_path} missing: run the dsquant rows first (without --peer-only)")
            pout = os.path.join(a.work, "llmc-" + slug(pair))
            shutil.rmtree(pout, ignore_errors=True)
            pcmd = [peer_py, os.path.join(HERE, "llmc_quant.py"), "--model", base, "--out", pout, *peer,
                    "--threads", str(a.threads)]
            if peer[1] == "sq":
                pcmd += ["--windows", windows_path]
            log = os.path.join(a.work, "llmc-" + slug(pair) + ".log")
            text, wall, rss, rc = measured(pcmd, env, log, check=False)
            prow = {"pair": pair, "tool": "llm-compressor", "label": " ".join(peer), "seconds": wall,
                    "peak_rss_mib": rss}
            if rc:
                prow["error"] = error_line(log)
            else:
                copy_tokenizer(base, pout)
                prow["inner"] = json.loads(text.strip().splitlines()[-1])
                prow["ppl"], prow["eval_error"] = try_ppl(a.dsquant, pout, a.chunks, a.threads)
            put_row(a, results, prow)


def write_windows(a, base, j):
    """The token windows dsquant calibrated on, as ids, for llm-compressor (checked to be whole)."""
    ids = [int(t) for t in dsquant(a.dsquant, "tokenize", base, "--file", j["calib"]).split()]
    windows = [ids[s:s + a.seqlen] for s in j["calib_starts"]]
    if len(windows) != a.n_samples or any(len(w) != a.seqlen for w in windows):
        sys.exit(f"calibration windows do not fit the tokenized text ({len(ids)} ids)")
    wpath = os.path.join(a.work, f"windows-{a.n_samples}x{a.seqlen}.json")
    with open(wpath, "w") as f:
        json.dump(windows, f)
    return wpath


def put_row(a, results, row):
    """Replaces the row of the same pair and tool (a rerun) and saves results-w8.json."""
    key = (row["pair"], row["tool"])
    results["rows"] = [r for r in results["rows"] if (r["pair"], r["tool"]) != key] + [row]
    with open(os.path.join(a.work, "results-w8.json"), "w") as f:
        json.dump(results, f, indent=1)
    what = f"ppl {row['ppl']:.4f}" if row.get("ppl") else row.get("error") or row.get("eval_error")
    print(f"{row['tool']} {row['pair']}: {what}, {row['seconds']:.1f} s, {row['peak_rss_mib']:.0f} MiB",
          file=sys.stderr)


def recipe_of(peer_label):
    """llmc_quant.py's options as the recipe they build, for the table."""
    w = peer_label.split()
    m = w[w.index("--method") + 1]
    if m == "sq":
        return f"SmoothQuantModifier({w[w.index('--alpha') + 1]}) + GPTQModifier W8A8"
    return f"QuantizationModifier FP8_{m[4:].upper()}" if m.startswith("fp8-") else peer_label


def print_w8(results, pb):
    order = [p for m in W8_ROWS.values() for p, *_ in m]
    rows = sorted(results["rows"], key=lambda r: (order.index(r["pair"]) if r["pair"] in order else 99,
                                                  r["tool"] != "dsquant"))
    print("| scheme | tool | command / recipe | ppl | delta to base | wall s | peak RSS MiB | time ratio | RSS ratio |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        mine = next((x for x in rows if x["tool"] == "dsquant" and x["pair"] == r["pair"]), None)
        tr = rr = ""
        if r["tool"] == "llm-compressor" and mine and "error" not in r and "error" not in mine:
            tr = f"{r['seconds'] / mine['seconds']:.1f}x"
            rr = f"{r['peak_rss_mib'] / mine['peak_rss_mib']:.1f}x"
        if r.get("ppl"):
            p, d = f"{r['ppl']:.4f}", f"{r['ppl'] - pb:+.4f} ({100 * (r['ppl'] - pb) / pb:+.2f}%)"
        else:
            p, d = "refused: " + r["error"] if "error" in r else "eval failed: " + r["eval_error"], ""
        label = recipe_of(r["label"]) if r["tool"] == "llm-compressor" else r["label"]
        print(f"| {r['pair']} | {r['tool']} | `{label}` | {p} | {d} | {r['seconds']:.1f} | "
              f"{r['peak_rss_mib']:.0f} | {tr} | {rr} |")


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
    ap.add_argument("--peer-only", action="store_true", help="8-bit rows: only llm-compressor (dsquant's "
                    "windows file from an earlier run)")
    ap.add_argument("--rows", default="", help="8-bit rows: only these pairs (comma-separated names "
                    "from W8_ROWS, e.g. 'w8a8 alpha 0.8 gptq,fp8 dynamic')")
    ap.add_argument("--base-ppl", type=float, help="the base's perplexity from an earlier run (skips it)")
    ap.add_argument("--no-rtn", action="store_true", help="skip the RTN rows")
    ap.add_argument("--dsq-args", default="", help="extra options for the dsquant quantize commands, e.g. "
                    "'--loss-samples 4' (recorded in results.json)")
    ap.add_argument("--peer-args", default="", help="extra options for llmc_quant.py, e.g. '--observer imatrix_mse'")
    ap.add_argument("--tag", default="", help="suffix of this run's folders and rows (compare runs with other "
                    "--dsq-args / --peer-args side by side)")
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
    results["ppl_base"] = a.base_ppl or ppl(a.dsquant, base, a.chunks, a.threads)
    print(f"base {base}: WikiText-2 ppl {results['ppl_base']:.4f} ({a.chunks} x 512, hf protocol)", file=sys.stderr)
    # both tools run in the caller's environment: each gets its OpenMP defaults
    # (a passive wait policy, set here before, slowed dsquant's many short
    # parallel regions by a fifth)
    env = dict(os.environ)
    w8 = [m for m in a.methods.split(",") if m in W8_ROWS]
    if w8:
        wpath = os.path.join(a.work, "results-w8.json")
        if os.path.exists(wpath):
            kept = json.load(open(wpath))
            if (kept["n_samples"], kept["seqlen"], kept["calib"]) == (a.n_samples, a.seqlen, a.calib):
                results["rows"] = kept["rows"]
        run_w8(a, base, env, peer_py, results)
        print(f"\nbase (BF16) WikiText-2 ppl {results['ppl_base']:.4f}; calibration {a.n_samples} x {a.seqlen} "
              f"tokens of {a.calib} (SmoothQuant rows); {a.threads} threads\n")
        print_w8(results, results["ppl_base"])
        return
    for scheme in a.schemes.split(","):
        bits, group = int(scheme[1:scheme.index("g")]), int(scheme[scheme.index("g") + 1:])
        if not a.no_rtn:
            out = os.path.join(a.work, f"rtn-{scheme}")
            dsquant(a.dsquant, "rtn", base, "-o", out, "--w-bit", str(bits), "--group", str(group), "--force",
                    "--format", "compressed-tensors")
            results["rows"].append({"method": "rtn", "scheme": scheme, "tool": "dsquant",
                                    "ppl": ppl(a.dsquant, out, a.chunks, a.threads)})
        for method in a.methods.split(","):
            out = os.path.join(a.work, f"dsq-{method}-{scheme}{a.tag}")
            extra = ["--act-order", "--static-groups", "--sym"] if method == "gptq" else ["--zero-point"]
            cmd = [a.dsquant, method, base, "-o", out, "--w-bit", str(bits), "--group", str(group), "--force",
                   "--format", "compressed-tensors", "--calib", a.calib, "--n-samples", str(a.n_samples),
                   "--seqlen", str(a.seqlen), "--seed", "0", "--threads", str(a.threads), "--json", *extra,
                   *shlex.split(a.dsq_args)]
            text, wall, rss = measured(cmd, env, os.path.join(a.work, f"dsq-{method}-{scheme}{a.tag}.log"))
            j = json.loads(text)
            row = {"method": method + a.tag, "scheme": scheme, "tool": "dsquant", "seconds": wall, "peak_rss_mib": rss,
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
            pout = os.path.join(a.work, f"llmc-{method}-{scheme}{a.tag}")
            shutil.rmtree(pout, ignore_errors=True)
            cmd = [peer_py, os.path.join(HERE, "llmc_quant.py"), "--model", base, "--out", pout, "--method", method,
                   "--bits", str(bits), "--group", str(group), "--windows", wpath, "--threads", str(a.threads),
                   *shlex.split(a.peer_args)]
            text, wall, rss = measured(cmd, env, os.path.join(a.work, f"llmc-{method}-{scheme}{a.tag}.log"))
            copy_tokenizer(base, pout)
            prow = {"method": method + a.tag, "scheme": scheme, "tool": "llm-compressor", "seconds": wall,
                    "peak_rss_mib": rss, "ppl": ppl(a.dsquant, pout, a.chunks, a.threads),
                    "inner": json.loads(text.strip().splitlines()[-1]), "args": cmd[2:]}
            results["rows"].append(prow)
            print(f"llm-compressor {method} {scheme}: ppl {prow['ppl']:.4f}, {wall:.1f} s, {rss:.0f} MiB",
                  file=sys.stderr)
            with open(os.path.join(a.work, f"results{a.tag}.json"), "w") as f:
                json.dump(results, f, indent=1)
    with open(os.path.join(a.work, f"results{a.tag}.json"), "w") as f:
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


if __name__ == "__main__":
    main()
