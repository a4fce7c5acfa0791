#!/usr/bin/env python3
"""GGUF quantization throughput: `dsquant gguf` against llama.cpp's quantizer.

Both quantize the same F32 GGUF (the default model SmolLM2-135M-Instruct,
taken to F32 with `dsquant convert`, unless --f32 names another file) to each
ftype, with 1 and 2 threads. llama.cpp is llama-cpp-python's
llama_model_quantize (its vendored llama.cpp, nthread N). Per (ftype, threads)
the two alternate, which one goes first alternating too, --reps times; the
best time of each is kept. Before every timed run pending writeback is
flushed (sync) so neither pays for the other's dirty pages; the input stays
in the page cache for both.

What is timed:
  ours       the whole `dsquant gguf IN -o OUT --type T --threads N` process,
             wall clock (exec, parsing, quantization, writing, fsync, rename);
  llama.cpp  only the llama_model_quantize call plus an fsync of its output,
             inside a Python child that has already imported llama_cpp
             (interpreter start and import are not charged to it).
Throughput is the model's weights (all tensors, copied ones included) per
second. After the runs, the last two outputs are compared tensor by tensor
(names, order, types, shapes, bytes): "identical bytes: yes/no".

Target (issue 18): ours >= 6x llama.cpp for Q4_K_M and Q6_K with identical
bytes; a missed target or differing bytes is marked `!` and makes the exit
status 1.

--synthetic GB quantizes instead a Llama-shaped F32 checkpoint of about GB
gigabytes made here: hidden 2048, FFN 5632, 16 heads / 4 KV heads (every
row a multiple of 256, so the k-quants run without fallbacks, unlike the
default model's 576-wide rows), the default model's tokenizer, as many
layers as the size asks, and seeded random weights with per-row scales and
a few large columns (so the scale searches have something to find).

usage: bench_quant.py [--binary PATH] [--f32 GGUF | --synthetic GB] [--workdir DIR]
                      [--reps N] [--types Q4_0,Q8_0,...] [--threads 1,2]
Needs numpy, gguf and llama-cpp-python (the test venv, ~/.cache/dsquant/venv).
Results and the command used are kept in docs/benchmarks.md.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import gguf

# llama.cpp's llama_ftype values (include/llama.h).
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_S": 14,
          "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30}
DEFAULT_TYPES = ["Q4_0", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "IQ4_XS"]
TARGETS = {"Q4_K_M": 6.0, "Q6_K": 6.0}

LLAMA_QUANTIZE = r'''
import ctypes, os, sys, time, llama_cpp
inp, out, ftype, nthread = sys.argv[1:5]
llama_cpp.llama_backend_init()
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(ftype)
p.nthread = int(nthread)
t0 = time.perf_counter()
rc = llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p))
if rc == 0:
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
print(f"SECONDS {time.perf_counter() - t0:.6f}")
sys.exit(rc)
'''


def default_binary():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.environ.get("DSQ_BINARY") or os.path.join(here, "build", "dsquant")


def default_model():
    cache = os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        sys.exit(f"{' '.join(cmd[:3])} ... failed ({r.returncode}):\n{tail}")
    return r


def make_f32(binary, workdir):
    model = default_model()
    if not os.path.exists(model):
        sys.exit(f"{model} not found; run scripts/fetch-default-model.sh (or pass --f32)")
    hf, f32 = os.path.join(workdir, "hf"), os.path.join(workdir, "f32.gguf")
    run([binary, "-q", "convert", model, "-o", hf, "--dtype", "f32", "--force"])
    run([binary, "-q", "convert", hf, "-o", f32, "--dtype", "f32", "--force"])
    shutil.rmtree(hf)
    return f32


SYN_HIDDEN, SYN_FFN, SYN_HEADS, SYN_KV_HEADS = 2048, 5632, 16, 4


def synthetic_tensor(rng, rows, cols):
    """rows x cols weights: normal, each row its own scale, 1 column in 64 wider."""
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    w *= (0.02 * np.exp(rng.standard_normal((rows, 1), dtype=np.float32) * 0.3)).astype(np.float32)
    big = rng.choice(cols, size=max(1, cols // 64), replace=False)
    w[:, big] *= 4.0
    return w


def make_synthetic(ref_f32, workdir, gigabytes):
    """A Llama-shaped F32 GGUF of about `gigabytes` GB with ref_f32's tokenizer."""
    ref = gguf.GGUFReader(ref_f32)
    vocab = len(ref.fields["tokenizer.ggml.tokens"].contents())
    h, f, kv = SYN_HIDDEN, SYN_FFN, SYN_HIDDEN // SYN_HEADS * SYN_KV_HEADS
    per_layer = 4 * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h)
    n_layer = max(1, round((gigabytes * 1e9 - 4 * (2 * vocab * h + h)) / per_layer))
    path = os.path.join(workdir, "synthetic.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("synthetic")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(h)
    w.add_feed_forward_length(f)
    w.add_head_count(SYN_HEADS)
    w.add_head_count_kv(SYN_KV_HEADS)
    w.add_rope_dimension_count(h // SYN_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(ref.fields["tokenizer.ggml.tokens"].contents())
    w.add_token_types(ref.fields["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(ref.fields["tokenizer.ggml.merges"].contents())
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    rng = np.random.default_rng(18)
    ones = np.ones(h, dtype=np.float32)
    w.add_tensor("token_embd.weight", synthetic_tensor(rng, vocab, h))
    for i in range(n_layer):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones)
        w.add_tensor(b + "attn_q.weight", synthetic_tensor(rng, h, h))
        w.add_tensor(b + "attn_k.weight", synthetic_tensor(rng, kv, h))
        w.add_tensor(b + "attn_v.weight", synthetic_tensor(rng, kv, h))
        w.add_tensor(b + "attn_output.weight", synthetic_tensor(rng, h, h))
        w.add_tensor(b + "ffn_norm.weight", ones)
        w.add_tensor(b + "ffn_gate.weight", synthetic_tensor(rng, f, h))
        w.add_tensor(b + "ffn_up.weight", synthetic_tensor(rng, f, h))
        w.add_tensor(b + "ffn_down.weight", synthetic_tensor(rng, h, f))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", synthetic_tensor(rng, vocab, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def time_ours(binary, f32, out, ftype, threads):
    if os.path.exists(out):  # as for llama.cpp: neither pays for unlinking the last output
        os.remove(out)
    os.sync()
    t0 = time.perf_counter()
    run([binary, "-q", "gguf", f32, "-o", out, "--type", ftype, "--threads", str(threads), "--force"])
    return time.perf_counter() - t0


def time_llama(f32, out, ftype, threads):
    if os.path.exists(out):
        os.remove(out)
    os.sync()
    r = run([sys.executable, "-c", LLAMA_QUANTIZE, f32, out, str(FTYPES[ftype]), str(threads)])
    line = [x for x in r.stdout.splitlines() if x.startswith("SECONDS ")]
    return float(line[-1].split()[1])


def same_tensors(a_path, b_path):
    """("yes", "") or ("no", why)."""
    a, b = gguf.GGUFReader(a_path), gguf.GGUFReader(b_path)
    if [t.name for t in a.tensors] != [t.name for t in b.tensors]:
        return "no", "tensor names or order differ"
    bad = []
    for x, y in zip(a.tensors, b.tensors):
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            bad.append(f"{x.name} type/shape")
            continue
        xb = np.ascontiguousarray(x.data).reshape(-1).view(np.uint8)
        yb = np.ascontiguousarray(y.data).reshape(-1).view(np.uint8)
        if not np.array_equal(xb, yb):
            bad.append(x.name)
    return ("yes", "") if not bad else ("no", f"{len(bad)} tensors differ, first {bad[0]}")


def n_weights(path):
    return sum(int(t.n_elements) for t in gguf.GGUFReader(path).tensors)


def bench_one(args, f32, ftype, threads):
    ours_out = os.path.join(args.workdir, f"ours-{ftype}-{threads}.gguf")
    llama_out = os.path.join(args.workdir, f"llama-{ftype}-{threads}.gguf")
    ours, llama = [], []
    for rep in range(args.reps):
        if rep % 2 == 0:
            ours.append(time_ours(args.binary, f32, ours_out, ftype, threads))
            llama.append(time_llama(f32, llama_out, ftype, threads))
        else:
            llama.append(time_llama(f32, llama_out, ftype, threads))
            ours.append(time_ours(args.binary, f32, ours_out, ftype, threads))
    same, why = same_tensors(ours_out, llama_out)
    mb_out = os.path.getsize(ours_out) / 1e6
    os.remove(ours_out)
    os.remove(llama_out)
    return min(ours), min(llama), same, why, mb_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=default_binary())
    ap.add_argument("--f32", help="F32 GGUF to quantize (default: the default model taken to F32)")
    ap.add_argument("--synthetic", type=float, metavar="GB",
                    help="quantize a Llama-shaped random F32 checkpoint of about GB gigabytes instead")
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/var/tmp"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    types = args.types.split(",")
    for t in types:
        if t not in FTYPES:
            sys.exit(f"unknown ftype {t}; known: {', '.join(FTYPES)}")
    threads = [int(x) for x in args.threads.split(",")]
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found (--binary or DSQ_BINARY)")

    args.workdir = tempfile.mkdtemp(prefix="dsq-bench-quant-", dir=args.workdir)
    try:
        f32 = args.f32 or make_f32(args.binary, args.workdir)
        what = f32 if args.f32 else "SmolLM2-135M-Instruct F32 GGUF"
        if args.synthetic:
            f32 = make_synthetic(f32, args.workdir, args.synthetic)
            what = f"synthetic Llama-shaped F32 GGUF (hidden {SYN_HIDDEN}, FFN {SYN_FFN}, random weights)"
        nw = n_weights(f32)
        print(f"input: {what}, {nw / 1e6:.1f} M weights, "
              f"{os.path.getsize(f32) / 1e6:.0f} MB; best of {args.reps}, interleaved\n")
        print("| ftype  | thr | out MB | ours s | ours Mw/s | llama.cpp s | llama.cpp Mw/s | ratio | identical bytes |")
        print("|--------|----:|-------:|-------:|----------:|------------:|---------------:|------:|-----------------|")
        failed = False
        for ftype in types:
            for n in threads:
                ours, llama, same, why, mb = bench_one(args, f32, ftype, n)
                ratio = llama / ours
                miss = same != "yes" or ratio < TARGETS.get(ftype, 0)
                failed |= miss
                print(f"| {ftype:<6} | {n:3d} | {mb:6.1f} | {ours:6.2f} | {nw / ours / 1e6:9.1f} | {llama:11.2f} | "
                      f"{nw / llama / 1e6:14.1f} | {ratio:4.2f}x{'!' if miss else ' '}| "
                      f"identical bytes: {same}{' (' + why + ')' if why else ''} |", flush=True)
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    if failed:
        print(f"\n! marks a missed target ({', '.join(f'{k} >= {v}x' for k, v in TARGETS.items())}) "
              "or bytes that differ from llama.cpp's")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
