#!/usr/bin/env python3
"""Records llama-quantize's per-tensor type choices as test fixtures.

Runs the real quantizer (llama.cpp's llama_model_quantize, through the
llama-cpp-python package, which builds llama.cpp from source) on F32 GGUFs and
writes, for each run, one line per output tensor: name, ggml ne, output type.
See README.md in this folder for the exact command and versions.

Usage: make_fixtures.py LLAMA_CPP_PYTHON WORKDIR [SMOLLM2_GGUF]
  LLAMA_CPP_PYTHON: a python that can `import llama_cpp`
  WORKDIR: scratch folder for the F32 and quantized GGUFs (deleted as it goes)
The python running this script needs gguf-py and numpy."""
import os
import subprocess
import sys

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))

# llama_ftype values (include/llama.h)
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12,
          "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25,
          "IQ4_XS": 30, "F16": 1, "BF16": 32}
GGML = {"q4_0": 2, "q8_0": 8, "q5_K": 13}

QUANTIZE = r'''
import ctypes, sys, llama_cpp
inp, out, ftype, pure, leave_out, out_t, emb_t = sys.argv[1:8]
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(ftype); p.nthread = 2; p.pure = pure == "1"
p.quantize_output_tensor = leave_out != "1"
if int(out_t) >= 0: p.output_tensor_type = int(out_t)
if int(emb_t) >= 0: p.token_embedding_type = int(emb_t)
sys.exit(llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p)))
'''


def synthetic(path, n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, tied, n_expert=0):
    """A llama-architecture F32 GGUF with random weights: enough for llama_model_quantize."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(2)

    def t(name, *shape):  # shape outermost first (numpy order)
        w.add_tensor(name, rng.standard_normal(shape, dtype=np.float32) * 0.02)

    kv = n_embd // n_head * n_head_kv
    t("token_embd.weight", n_vocab, n_embd)
    t("output_norm.weight", n_embd)
    if not tied:
        t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}."
        t(b + "attn_norm.weight", n_embd)
        t(b + "attn_q.weight", n_embd, n_embd)
        t(b + "attn_k.weight", kv, n_embd)
        t(b + "attn_v.weight", kv, n_embd)
        t(b + "attn_output.weight", n_embd, n_embd)
        t(b + "ffn_norm.weight", n_embd)
        if n_expert:
            t(b + "ffn_gate_inp.weight", n_expert, n_embd)
            t(b + "ffn_gate_exps.weight", n_expert, n_ff, n_embd)
            t(b + "ffn_up_exps.weight", n_expert, n_ff, n_embd)
            t(b + "ffn_down_exps.weight", n_expert, n_embd, n_ff)
        else:
            t(b + "ffn_gate.weight", n_ff, n_embd)
            t(b + "ffn_up.weight", n_ff, n_embd)
            t(b + "ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_copy(src, path):
    """src GGUF with every tensor dequantized to F32 and every KV copied."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            w.add_file_type(0)
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape([int(x) for x in reversed(t.shape.tolist())]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(py, f32, out, ftype, pure=False, leave_output=False, output_type=-1, embd_type=-1):
    args = [py, "-c", QUANTIZE, f32, out, str(FTYPES[ftype]), "1" if pure else "0", "1" if leave_output else "0",
            str(output_type), str(embd_type)]
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def run_cli(binary, f32, out, ftype, imatrix):
    """The llama-quantize program itself: the only way to pass an importance matrix."""
    p = subprocess.run([binary, "--imatrix", imatrix, f32, out, ftype, "2"], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def record(out, fixture, header):
    r = gguf.GGUFReader(out)
    with open(fixture, "w") as fh:
        fh.write(header + "\n")
        for t in r.tensors:
            ne = "x".join(str(int(x)) for x in t.shape.tolist())
            fh.write(f"{t.name} {ne} {t.tensor_type.name}\n")
    os.remove(out)


def main():
    py, work = sys.argv[1], sys.argv[2]
    smol = sys.argv[3] if len(sys.argv) > 3 else os.path.expanduser(
        "~/.cache/dsquant/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    os.makedirs(work, exist_ok=True)
    models = {
        # name: (builder, header facts)
        "dense32": (lambda p: synthetic(p, 32, 256, 512, 8, 2, 512, tied=False),
                    "arch=llama n_layer=32 n_head=8 n_head_kv=2 n_expert=0"),
        "dense32tied": (lambda p: synthetic(p, 32, 256, 512, 8, 8, 512, tied=True),
                        "arch=llama n_layer=32 n_head=8 n_head_kv=8 n_expert=0"),
        "moe8": (lambda p: synthetic(p, 8, 256, 256, 8, 2, 512, tied=False, n_expert=8),
                 "arch=llama n_layer=8 n_head=8 n_head_kv=2 n_expert=8"),
        "smollm2": (lambda p: dequantized_copy(smol, p),
                    "arch=llama n_layer=30 n_head=9 n_head_kv=3 n_expert=0"),
    }
    all_q = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
             "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16"]
    runs = {
        "dense32": [(q, {}) for q in all_q] + [
            ("Q4_K_M", {"leave_output": True}),
            ("Q4_K_M", {"output_type": GGML["q8_0"], "embd_type": GGML["q4_0"]}),
            ("Q5_K_M", {"pure": True}),
        ],
        "dense32tied": [(q, {}) for q in ["Q2_K", "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q6_K", "Q8_0", "IQ4_XS"]] + [
            ("Q4_K_M", {"output_type": GGML["q5_K"]}),
        ],
        "moe8": [(q, {}) for q in ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_S", "Q8_0"]],
        "smollm2": [(q, {}) for q in ["Q4_K_M", "Q6_K", "Q8_0", "Q2_K", "Q3_K_M", "Q5_K_M", "IQ4_XS", "Q4_0"]] + [
            ("Q8_0", {"pure": True}),
            ("Q4_K_M", {"pure": True}),
        ],
    }
    # With LLAMA_QUANTIZE (a llama-quantize binary) and IMATRIX_DIR (holding
    # <model>.imatrix.dat written by write_imatrix.c), the imatrix-dependent rules too.
    binary, imdir = os.environ.get("LLAMA_QUANTIZE"), os.environ.get("IMATRIX_DIR")
    if binary and imdir:
        runs = {
            "dense32": [(q, {"imatrix": True}) for q in ["Q2_K_S", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q4_K_M", "Q3_K_M"]],
            "moe8": [(q, {"imatrix": True}) for q in ["Q2_K_S", "Q4_K_M", "IQ4_XS"]],
            "smollm2": [(q, {"imatrix": True}) for q in ["Q2_K_S", "IQ4_NL", "Q4_0"]],
        }
        models = {k: v for k, v in models.items() if k in runs}
    only = os.environ.get("ONLY")
    for model, (build, facts) in models.items():
        if only and model != only:
            continue
        f32 = os.path.join(work, model + ".f32.gguf")
        build(f32)
        for ftype, opts in runs[model]:
            suffix = "".join("_" + k + ("" if v is True else str(v)) for k, v in sorted(opts.items()))
            name = f"{model}_{ftype}{suffix}"
            out = os.path.join(work, name + ".gguf")
            if os.environ.get("ONLY_RUN") and name != os.environ["ONLY_RUN"]:
                continue
            if opts.get("imatrix"):
                rc, log = run_cli(binary, f32, out, ftype, os.path.join(imdir, model + ".imatrix.dat"))
            else:
                rc, log = run(py, f32, out, ftype, **opts)
            opt_text = " ".join(f"{k}={v}" for k, v in sorted(opts.items()))
            header = f"# {facts} ftype={ftype} {opt_text}".rstrip()
            if rc != 0:
                tail = [l.strip() for l in log.splitlines() if "GGML_ASSERT" in l or "error" in l.lower()][:3]
                print(f"{name}: llama_model_quantize failed rc={rc}: {' | '.join(tail)}")
                with open(os.path.join(HERE, name + ".fail"), "w") as fh:
                    fh.write(header + f"\n# rc={rc}\n" + "".join("# " + l + "\n" for l in tail))
                if os.path.exists(out):
                    os.remove(out)
                continue
            nfb = [l for l in log.splitlines() if "required fallback quantization" in l]
            loaded = [l.strip() for l in log.splitlines() if l.startswith("load_imatrix:")]
            extra = "".join("\n# " + l for l in loaded) + ("\n# " + nfb[0].strip() if nfb else "")
            record(out, os.path.join(HERE, name + ".txt"), header + extra)
            print(f"{name}: ok {nfb[0].strip() if nfb else ''}")
        if os.path.exists(f32):
            os.remove(f32)


if __name__ == "__main__":
    main()
