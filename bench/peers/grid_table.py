"""The group-grid peer table of issue 17 (not in CI): RTN, GPTQ and AWQ at
w4g64, w3g64 and w4g128, dsquant with each --grid against llm-compressor with
its default observer and with imatrix_mse, over several calibration seeds.

    bash bench/peers/setup.sh                      # once: llm-compressor venv
    python3 bench/peers/grid_table.py --dsquant build/dsquant [--seeds 0,1,2]
        [--methods gptq,rtn,awq] [--schemes w4g64,w3g64,w4g128] [--tools dsq,llmc]
        [--redo dsq]                               # rerun our cells (a new build)

Every cell (tool, method, scheme, grid, seed) is one quantizing process and one
evaluation, kept in WORK/cells.json, so a rerun only does the missing cells
(--redo TOOL drops that tool's first). Same protocol as run_peers.py: the
BF16 base made from the default GGUF, the same calibration windows for both
tools (dsquant samples them with --seed S; llm-compressor is fed those token
ids), one evaluator (`dsquant ppl --protocol hf`, WikiText-2, --chunks x 512).
w4g128 runs on the base widened by widen.py (hidden 640, 12 query heads: the
same function, widths that 128 divides), against that base's own perplexity.
Cells that take no calibration data (RTN minmax and mse, llm-compressor's RTN
minmax) run once and stand for every seed.

dsquant's GPTQ rows refit the scales to the codes (its default); the
"+norefit" row keeps GPTQ's own scales. Options on both sides match llm-compressor's defaults: GPTQ symmetric,
act-order with static groups, damp 0.01, blocks of 128; AWQ asymmetric, duo
scaling, 20-point grid (dsquant adds AutoAWQ's clip search); RTN symmetric.
Output: a markdown table (mean and spread over the seeds of each cell's
perplexity delta, ratios of the means) on stdout.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from run_peers import CACHE, HERE, ROOT, copy_tokenizer, dsquant, measured, try_ppl, write_windows

GRIDS = {  # method -> tool -> grids (dsquant's --grid / llm-compressor's observer)
    "rtn": {"dsq": ["minmax", "mse", "imatrix-mse"], "llmc": ["minmax", "imatrix_mse"]},
    "gptq": {"dsq": ["minmax", "mse", "imatrix-mse", "imatrix-mse+norefit"], "llmc": ["minmax", "imatrix_mse"]},
    "awq": {"dsq": ["clip"], "llmc": ["minmax", "imatrix_mse"]},
}
DATA_FREE = {("dsq", "rtn", "minmax"), ("dsq", "rtn", "mse"), ("llmc", "rtn", "minmax")}


def parse_scheme(s):
    return int(s[1:s.index("g")]), int(s[s.index("g") + 1:])


class Table:
    def __init__(self, a):
        self.a = a
        self.path = os.path.join(a.work, "cells.json")
        self.cells = json.load(open(self.path)) if os.path.exists(self.path) else {}
        self.peer_py = os.path.join(CACHE, "peers-venv", "bin", "python")

    def save(self):
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.cells, f, indent=1)
        os.replace(self.path + ".tmp", self.path)

    def base(self, scheme):
        """(folder, its perplexity): the widened base for group 128."""
        plain = os.path.join(self.a.work, "..", "base-bf16")
        if not os.path.exists(plain):
            gguf = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
            dsquant(self.a.dsquant, "convert", gguf, "-o", plain, "--dtype", "bf16")
        folder = plain
        if parse_scheme(scheme)[1] == 128:
            folder = os.path.join(self.a.work, "..", "base-bf16-w640")
            if not os.path.exists(folder):
                subprocess.run([self.peer_py, os.path.join(HERE, "widen.py"), plain, folder], check=True)
        key = "base:" + os.path.basename(folder)
        if key not in self.cells:
            p, err = try_ppl(self.a.dsquant, folder, self.a.chunks, self.a.threads)
            if err:
                sys.exit(f"{folder}: {err}")
            self.cells[key] = {"ppl": p}
            self.save()
        return os.path.abspath(folder), self.cells[key]["ppl"]

    def windows(self, base, seed):
        """The token windows dsquant calibrates on with --seed seed (a data-only RTN run gives them)."""
        path = os.path.join(self.a.work, f"windows-{os.path.basename(base)}-s{seed}.json")
        if os.path.exists(path):
            return path
        out = os.path.join(self.a.work, "tmp-windows")
        j = json.loads(dsquant(self.a.dsquant, "rtn", base, "-o", out, "--force", "--grid", "imatrix-mse",
                               "--group", "64", "--format", "compressed-tensors", *self.calib(seed), "--json"))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(write_windows(self.a, base, j), path)  # run_peers' windows file, kept per base and seed
        return path

    def calib(self, seed):
        return ["--calib", self.a.calib, "--n-samples", str(self.a.n_samples), "--seqlen", str(self.a.seqlen),
                "--seed", str(seed)]

    def command(self, tool, method, scheme, grid, seed, base, out):
        bits, group = parse_scheme(scheme)
        if tool == "dsq":
            g, _, variant = grid.partition("+")  # "+norefit": GPTQ's own scales
            extra = {"gptq": ["--act-order", "--static-groups", "--sym", "--grid", g] +
                             (["--no-refit"] if variant == "norefit" else []),
                     "rtn": ["--grid", grid], "awq": ["--zero-point"]}[method]
            cal = [] if (tool, method, grid) in DATA_FREE else self.calib(seed)
            return [self.a.dsquant, method, base, "-o", out, "--w-bit", str(bits), "--group", str(group), "--force",
                    "--format", "compressed-tensors", "--threads", str(self.a.threads), *cal, *extra]
        cmd = [self.peer_py, os.path.join(HERE, "llmc_quant.py"), "--model", base, "--out", out, "--method", method,
               "--bits", str(bits), "--group", str(group), "--threads", str(self.a.threads), "--observer", grid]
        if (tool, method, grid) not in DATA_FREE:
            cmd += ["--windows", self.windows(base, seed)]
        return cmd

    def run_cell(self, tool, method, scheme, grid, seed):
        seed = 0 if (tool, method, grid) in DATA_FREE else seed
        key = f"{tool}/{method}/{scheme}/{grid}/{seed}"
        if key in self.cells:
            return
        base, _ = self.base(scheme)
        out = os.path.join(self.a.work, key.replace("/", "-"))
        shutil.rmtree(out, ignore_errors=True)
        cmd = self.command(tool, method, scheme, grid, seed, base, out)
        log = out + ".log"
        _, wall, rss, rc = measured(cmd, dict(os.environ), log, check=False)
        cell = {"seconds": wall, "peak_rss_mib": rss, "args": cmd[1:]}
        if rc:
            cell["error"] = open(log, errors="replace").read().strip().splitlines()[-1][:300]
        else:
            copy_tokenizer(base, out)
            cell["ppl"], err = try_ppl(self.a.dsquant, out, self.a.chunks, self.a.threads)
            if err:
                cell["error"] = err
            shutil.rmtree(out, ignore_errors=True)  # the folders add up; the cell keeps its command
        self.cells[key] = cell
        self.save()
        what = f"ppl {cell['ppl']:.4f}" if cell.get("ppl") else cell["error"]
        print(f"{key}: {what}, {wall:.1f} s, {rss:.0f} MiB", file=sys.stderr, flush=True)

    def deltas(self, tool, method, scheme, grid, seeds):
        _, pb = self.base(scheme)
        out = []
        for s in ([0] if (tool, method, grid) in DATA_FREE else seeds):  # one run stands for every seed
            c = self.cells.get(f"{tool}/{method}/{scheme}/{grid}/{s}")
            if c and c.get("ppl"):
                out.append((c["ppl"] - pb, c["seconds"]))
        return out

    def report(self, seeds):
        a = self.a
        print(f"calibration {a.n_samples} x {a.seqlen} tokens of {a.calib}, seeds {','.join(map(str, seeds))}; "
              f"WikiText-2 {a.chunks} x 512 (hf protocol); {a.threads} threads\n")
        print("| scheme | method | grid / observer | dsquant delta | llm-compressor delta | ratio | wall s (ours / theirs) |")
        print("|---|---|---|---:|---:|---:|---:|")

        def fmt(d):
            if not d:
                return "-"
            v = [x for x, _ in d]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            return f"+{statistics.mean(v):.2f} ± {sd:.2f} (n={len(v)})"

        for scheme in a.schemes.split(","):
            _, pb = self.base(scheme)
            for method in a.methods.split(","):
                pairs = {"minmax": "minmax", "imatrix-mse": "imatrix_mse"}
                rows = [(g, pairs.get(g)) for g in GRIDS[method]["dsq"]]
                rows += [(None, g) for g in GRIDS[method]["llmc"] if g not in [p for _, p in rows]]
                for mine, theirs in rows:
                    d = self.deltas("dsq", method, scheme, mine, seeds) if mine else []
                    t = self.deltas("llmc", method, scheme, theirs, seeds) if theirs else []
                    ratio = (f"{statistics.mean(x for x, _ in d) / statistics.mean(x for x, _ in t):.2f}x"
                             if d and t else "-")
                    secs = " / ".join(f"{statistics.mean(s for _, s in x):.0f}" if x else "-" for x in (d, t))
                    label = " / ".join(x or "-" for x in (mine, theirs))
                    print(f"| {scheme} (base {pb:.3f}) | {method} | {label} | {fmt(d)} | {fmt(t)} | {ratio} | {secs} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsquant", default=os.path.join(ROOT, "build", "dsquant"))
    ap.add_argument("--work", default=os.path.join(CACHE, "bench", "peers", "grid-table"))
    ap.add_argument("--methods", default="gptq,rtn,awq")
    ap.add_argument("--schemes", default="w4g64,w3g64,w4g128")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--tools", default="dsq,llmc")
    ap.add_argument("--grids", default="", help="only these grids / observers (comma-separated)")
    ap.add_argument("--redo", default="", help="drop the cells whose key starts with one of these (comma-"
                    "separated: 'dsq', 'llmc/gptq/w4g128', 'base:') first")
    ap.add_argument("--n-samples", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--calib", default="tinyshakespeare")
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--report", action="store_true", help="only print the table of the cells there are")
    a = ap.parse_args()
    a.dsquant = os.path.abspath(a.dsquant)
    os.makedirs(a.work, exist_ok=True)
    t = Table(a)
    if "llmc" in a.tools and not os.path.exists(t.peer_py):
        sys.exit(f"{t.peer_py} missing: run bash bench/peers/setup.sh")
    if a.redo:
        t.cells = {k: v for k, v in t.cells.items() if not k.startswith(tuple(a.redo.split(",")))}
        t.save()
    seeds = [int(s) for s in a.seeds.split(",")]
    if not a.report:
        for method in a.methods.split(","):
            for scheme in a.schemes.split(","):
                for seed in seeds:
                    for tool in a.tools.split(","):
                        for grid in GRIDS[method][tool]:
                            if not a.grids or grid in a.grids.split(","):
                                t.run_cell(tool, method, scheme, grid, seed)
    t.report(seeds)


if __name__ == "__main__":
    main()
