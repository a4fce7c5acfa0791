#!/usr/bin/env python3
"""Forward-pass speed of the dsquant CPU runtime against llama.cpp.

Models: the default model (SmolLM2-135M-Instruct) as F32, BF16, Q8_0 and
Q4_K_M GGUFs, made from the same weights with `dsquant gguf` (the F32 file
from the Q4_1 original with --allow-requantize, the others from the F32 one);
--models names other files instead.

Tests, as llama-bench defines them:
  pp N  one decode of N tokens from an empty cache, logits for the last token;
  tg N  N decodes of one token each at positions 0..N-1, logits for each.
Token ids are fixed pseudo-random values.

  ours       bench/bench_forward (built next to dsquant), a child process per
             measurement: it loads the model, runs an untimed warm-up, then
             one timed pp and one timed tg (dsq_forward_range).
  llama.cpp  llama-cpp-python's vendored llama.cpp in this process: one
             llama_context per model (n_ctx = max(pp, tg) rounded up to 256,
             n_batch = n_ubatch = 512, default F16 KV cache, no flash
             attention), llama_decode on llama_batch_get_one batches timed
             with perf_counter, after a warm-up decode; threads set with
             llama_set_n_threads.
For every (model, threads) the two run --reps times, interleaved, the one that
goes first alternating; the best run of each counts. Ratio = ours / llama.cpp
(target >= 0.8, marked `!` when missed).

Both engines run their kernels on libgomp (this llama.cpp wheel is built with
OpenMP), whose threads spin at barriers by default. On a machine whose cores
are shared with other work, a spinning thread waits for a descheduled one for
whole time slices, and multi-thread results collapse for both engines alike;
--omp-wait-policy passive sets OMP_WAIT_POLICY=PASSIVE for both (set before
llama.cpp is loaded and passed to our child processes).

--gemm instead compares the batched and calibration matrix products with
their peers: `bench_gemv --gemm-only` (our dsq_gemm_f32, dsq_linear_forward_gemm
with F32 weights, and the BF16 linear with weights packed once, as a
calibration pass runs it) against numpy's A @ W.T (its bundled OpenBLAS) and
torch's F32 and BF16 matmul (oneDNN; AMX where the CPU has it), in a child
with OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = torch threads = threads, on the
same shapes, GFLOP/s, best of --reps. Target (issue 18): our F32 and BF16 at
least 0.7x torch's.

usage: bench_runtime.py [--bench-forward PATH] [--binary DSQUANT] [--workdir DIR]
                        [--models F32=a.gguf,Q8_0=b.gguf] [--threads 1,2]
                        [--pp 512] [--tg 64] [--reps 3] [--json OUT]
                        [--omp-wait-policy default|passive]
       bench_runtime.py --gemm [--bench-gemv PATH] [--threads 1,2] [--reps 5]
Needs llama-cpp-python (the test venv, ~/.cache/dsquant/venv).
Results and the command used are kept in docs/benchmarks.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

llama_cpp = None  # imported in main(), after OMP_WAIT_POLICY is set

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")
DEFAULT_MODEL = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TYPES = ["F32", "BF16", "Q8_0", "Q4_K_M"]
TARGET = 0.8


def find_program(name, given):
    if given:
        return given
    for d in sorted(os.listdir(os.path.dirname(HERE))):
        p = os.path.join(os.path.dirname(HERE), d, name)
        if d.startswith("build") and os.access(p, os.X_OK):
            return p
    sys.exit(f"bench_runtime: {name} not found; build it and pass its path")


def make_models(dsquant, workdir):
    os.makedirs(workdir, exist_ok=True)
    f32 = os.path.join(workdir, "smollm2-F32.gguf")
    out = {}
    for t in TYPES:
        path = os.path.join(workdir, f"smollm2-{t}.gguf")
        if not os.path.exists(path):
            src = DEFAULT_MODEL if t == "F32" else f32
            args = [dsquant, "-q", "gguf", src, "-o", path, "--type", t]
            if t == "F32":
                args.append("--allow-requantize")
            subprocess.run(args, check=True)
        out[t] = path
    return out


def tokens(n, vocab):
    s, ids = 0x9E3779B97F4A7C15, []
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        ids.append((s >> 33) % vocab)
    return ids


class Llama:
    """One llama.cpp context, timed through the low-level API."""

    def __init__(self, path, n_ctx, pp, tg):
        self.llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=1,
                                   n_threads_batch=1, logits_all=False, verbose=False)
        self.ctx = self.llm._ctx.ctx
        ids = tokens(max(pp, tg, 1), self.llm.n_vocab())
        self.pp_ids = (llama_cpp.llama_token * pp)(*ids[:pp])
        self.tg_ids = [(llama_cpp.llama_token * 1)(t) for t in ids[:tg]]
        self.pp, self.tg = pp, tg

    def decode(self, arr, n):
        rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, n))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def run(self, threads):
        llama_cpp.llama_set_n_threads(self.ctx, threads, threads)
        res = {}
        if self.pp:
            llama_cpp.llama_kv_cache_clear(self.ctx)
            t0 = time.perf_counter()
            self.decode(self.pp_ids, self.pp)
            llama_cpp.llama_synchronize(self.ctx)
            res["pp"] = self.pp / (time.perf_counter() - t0)
        if self.tg:
            llama_cpp.llama_kv_cache_clear(self.ctx)
            t0 = time.perf_counter()
            for a in self.tg_ids:
                self.decode(a, 1)
                llama_cpp.llama_synchronize(self.ctx)
            res["tg"] = self.tg / (time.perf_counter() - t0)
        return res

    def warm(self):
        llama_cpp.llama_set_n_threads(self.ctx, 2, 2)
        llama_cpp.llama_kv_cache_clear(self.ctx)
        self.decode(self.pp_ids, min(self.pp, 64) or 1)
        llama_cpp.llama_kv_cache_clear(self.ctx)


def ours(bench_forward, path, threads, pp, tg):
    r = subprocess.run([bench_forward, path, "--threads", str(threads), "--pp", str(pp), "--tg", str(tg),
                        "--reps", "1"], check=True, capture_output=True, text=True)
    j = json.loads(r.stdout)
    return {k: j[k]["tokens_per_second"] for k in ("pp", "tg") if k in j}


GEMM_SHAPES = ((512, 1536, 576), (512, 576, 1536), (8192, 1536, 576), (8192, 576, 1536), (512, 4096, 4096))

# numpy's OpenBLAS sgemm, then torch's F32 and BF16 matmul (oneDNN; AMX-BF16 on
# CPUs with it), each A @ W.T on the shapes of bench_gemv --gemm; lines
# "lib m x n x k GFLOP/s". torch is optional (absent: no torch lines).
PEER_GEMM = r'''
import sys, time
import numpy as np
reps, threads = int(sys.argv[1]), int(sys.argv[2])
shapes = eval(sys.argv[3])
rng = np.random.default_rng(0)
def timed(f):
    best = 1e30
    for r in range(reps + 1):
        t0 = time.perf_counter()
        f()
        if r:
            best = min(best, time.perf_counter() - t0)
    return best
try:
    import torch
    torch.set_num_threads(threads)
except ImportError:
    torch = None
for m, n, k in shapes:
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    flops = 2 * m * n * k / 1e9
    print(f"openblas {m} x {n} x {k} {flops / timed(lambda: a @ w.T):.1f}")
    if torch is not None:
        ta, tw = torch.from_numpy(a), torch.from_numpy(w)
        print(f"torch_f32 {m} x {n} x {k} {flops / timed(lambda: ta @ tw.T):.1f}")
        ba, bw = ta.bfloat16(), tw.bfloat16()
        print(f"torch_bf16 {m} x {n} x {k} {flops / timed(lambda: ba @ bw.T):.1f}")
'''


def gemm_compare(bench_gemv, threads, reps):
    print(f"F32 and BF16 GEMM, GFLOP/s, best of {reps}; ratios are ours / the peer's at the same thread count\n")
    for th in threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(th), OMP_NUM_THREADS=str(th))
        r = subprocess.run([sys.executable, "-c", PEER_GEMM, str(reps), str(th), repr(GEMM_SHAPES)], env=env,
                           check=True, capture_output=True, text=True)
        peer = {}
        for line in r.stdout.strip().splitlines():
            lib, rest = line.split(" ", 1)
            shape, gf = rest.rsplit(" ", 1)
            peer[(lib, shape)] = float(gf)
        r = subprocess.run([bench_gemv, "--gemm-only", "--threads", str(th), "--reps", str(reps)], check=True,
                           capture_output=True, text=True)
        ours = {}
        for line in r.stdout.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            # | shape | gemm AVX2 | gemm | ratio | linear F32 | linear BF16 | BF16/F32 | linear BF16 packed |
            if len(cells) == 8 and " x " in cells[0] and cells[0][0].isdigit():
                ours[cells[0]] = (float(cells[2]), float(cells[4]), float(cells[7]))
        print(f"threads {th}\n")
        print("| m x n x k | dsq_gemm_f32 (1 thr) | our linear F32 | OpenBLAS | torch F32 | F32 vs torch "
              "| our linear BF16 (packed) | torch BF16 | BF16 vs torch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

        def cell(v):
            return f"{v:.1f}" if v is not None else "-"

        def ratio(x, y):
            return f"{x / y:.2f}" if x is not None and y else "-"

        for m, n, k in GEMM_SHAPES:
            shape = f"{m} x {n} x {k}"
            g, lin, l16 = ours.get(shape, (None, None, None))
            tf, tb = peer.get(("torch_f32", shape)), peer.get(("torch_bf16", shape))
            print(f"| {shape} | {cell(g)} | {cell(lin)} | {cell(peer.get(('openblas', shape)))} | {cell(tf)} "
                  f"| {ratio(lin, tf)} | {cell(l16)} | {cell(tb)} | {ratio(l16, tb)} |")
        print()


def best(runs, key):
    vals = [r[key] for r in runs if key in r]
    return max(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-forward")
    ap.add_argument("--binary")
    ap.add_argument("--workdir", default=os.path.join(CACHE, "bench"))
    ap.add_argument("--models", help="TYPE=PATH,... (default: made from the default model)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--omp-wait-policy", choices=["default", "passive"], default="default")
    ap.add_argument("--gemm", action="store_true", help="compare the F32 and BF16 GEMMs with OpenBLAS and torch instead")
    ap.add_argument("--bench-gemv")
    a = ap.parse_args()
    if a.gemm:
        gemm_compare(find_program("bench_gemv", a.bench_gemv), [int(t) for t in a.threads.split(",")], a.reps)
        return 0
    if a.omp_wait_policy == "passive":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        os.environ.pop("OMP_WAIT_POLICY", None)
    global llama_cpp
    import llama_cpp as lc
    llama_cpp = lc
    bench_forward = find_program("bench_forward", a.bench_forward)
    if a.models:
        models = dict(kv.split("=", 1) for kv in a.models.split(","))
    else:
        models = make_models(find_program("dsquant", a.binary), a.workdir)
    threads = [int(t) for t in a.threads.split(",")]
    n_ctx = (max(a.pp, a.tg, 1) + 255) // 256 * 256
    llama_cpp.llama_backend_init()
    print(f"llama.cpp: {llama_cpp.llama_print_system_info().decode().strip()}", flush=True)
    load = os.getloadavg()
    results = []
    for name, path in models.items():
        ll = Llama(path, n_ctx, a.pp, a.tg)
        ll.warm()
        for th in threads:
            runs_o, runs_l = [], []
            for rep in range(a.reps):
                if rep % 2 == 0:
                    runs_o.append(ours(bench_forward, path, th, a.pp, a.tg))
                    runs_l.append(ll.run(th))
                else:
                    runs_l.append(ll.run(th))
                    runs_o.append(ours(bench_forward, path, th, a.pp, a.tg))
            row = {"model": name, "path": path, "threads": th}
            for k in ("pp", "tg"):
                o, l = best(runs_o, k), best(runs_l, k)
                if o is not None:
                    row[k] = {"ours": o, "llama": l, "ratio": o / l, "runs_ours": [r[k] for r in runs_o],
                              "runs_llama": [r[k] for r in runs_l]}
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "path"}), flush=True)
        del ll
    load_after = os.getloadavg()
    print()
    print(f"pp{a.pp} / tg{a.tg}, tokens per second, best of {a.reps} (interleaved), OMP wait policy "
          f"{a.omp_wait_policy}; load average {load[0]:.1f} before, {load_after[0]:.1f} after")
    print()
    print("| model | threads | pp ours | pp llama.cpp | ratio | tg ours | tg llama.cpp | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    missed = False
    for r in results:
        cells = []
        for k in ("pp", "tg"):
            if k not in r:
                cells += ["-", "-", "-"]
                continue
            v = r[k]
            mark = "" if v["ratio"] >= TARGET else " !"
            missed |= bool(mark)
            cells += [f"{v['ours']:.1f}", f"{v['llama']:.1f}", f"{v['ratio']:.2f}{mark}"]
        print(f"| {r['model']} | {r['threads']} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pp": a.pp, "tg": a.tg, "reps": a.reps, "omp_wait_policy": a.omp_wait_policy,
                       "load_before": load, "load_after": load_after, "llama_cpp": llama_cpp.__version__,
                       "results": results}, f, indent=1)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
