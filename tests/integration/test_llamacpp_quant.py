"""`dsquant gguf` quantizes like llama.cpp's own quantizer, and llama.cpp runs the result.

The default model (SmolLM2-135M Q4_1) becomes an F32 GGUF (`dsquant gguf
--type F32 --allow-requantize`). Then, for each of Q4_K_M, Q6_K, Q8_0, Q2_K, Q4_0
and IQ4_NL:
  (b) `dsquant gguf F32 --type T` and llama.cpp's llama_model_quantize (through
      llama-cpp-python, ftype T, 2 threads) must write the same tensors: same
      names in the same order, same types and shapes, and byte-identical data
      (a mismatch is reported per tensor with the number of differing blocks);
      general.file_type and general.quantization_version must agree too;
  (c) gguf-py's gguf.quants.dequantize of each of our tensors (any type it
      supports, which is every type written here) must equal, bit for bit,
      our own dequantization of it: `dsquant gguf OUT --type F32
      --allow-requantize`, which takes every tensor to F32 in GGUF layout (no
      Q/K permutation involved);
  (a) for Q4_K_M only, llama_cpp.Llama loads our file, the logits of a short
      prompt are finite and close to those of the F32 model, and a greedy
      16-token continuation is non-empty text; gguf-py's GGUFReader reads the
      file's tensor table and quantization KVs as written.
  (d) a budgeted file (`dsquant gguf --type Q4_K_M --target-bpw 5.5`, types
      from q4_0 q5_0 q8_0 q4_K q6_K chosen per tensor, sensitivities on one
      chunk of tinyshakespeare): at most 5.5 bits per weight, more than one
      type among its tensors, and llama.cpp runs it as in (a).

All mismatches are collected and printed before the test fails.
Exit 77 (skipped) when the default model or a Python package is missing.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

from dsq_testlib import default_model, dsquant, skip, wiki_path

try:
    import numpy as np
    import gguf
    from gguf import quants
    import llama_cpp
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); scripts/install-deps.sh installs numpy, gguf and llama-cpp-python")

# llama.cpp's llama_ftype values (include/llama.h), by llama-quantize's names.
FTYPES = {"Q4_K_M": 15, "Q6_K": 18, "Q8_0": 7, "Q2_K": 10, "Q4_0": 2, "IQ4_NL": 25}
PROMPT = "The capital of France is"
THREADS = 2

# Runs llama.cpp's quantizer in a child process, so its log lines stay out of
# ours and a crash in it cannot take the test down with it.
LLAMA_QUANTIZE = r'''
import ctypes, sys, llama_cpp
inp, out, ftype, nthread = sys.argv[1:5]
llama_cpp.llama_backend_init()
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(ftype)
p.nthread = int(nthread)
sys.exit(llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p)))
'''


def llama_quantize(src, dst, ftype_name):
    r = subprocess.run([sys.executable, "-c", LLAMA_QUANTIZE, src, dst, str(FTYPES[ftype_name]), str(THREADS)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(dst):
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        sys.exit(f"llama_model_quantize {ftype_name} failed ({r.returncode}):\n{tail}")


# ---- reading GGUF files ----
# gguf-py's GGUFReader spends seconds on the 100k tokenizer strings of every
# file it opens (test_gguf_consumer.py already checks that it reads ours); here
# we only need the tensor table, so this reads the header, skipping KV values
# and keeping the scalar ones, and maps the data.

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Tensor:
    def __init__(self, name, ne, ggml_type, offset):
        self.name, self.shape, self.tensor_type, self.offset = name, ne, gguf.GGMLQuantizationType(ggml_type), offset
        bs, ts = gguf.GGML_QUANT_SIZES[self.tensor_type]
        self.row_bytes = ne[0] // bs * ts
        self.n_rows = int(np.prod(ne[1:], dtype=np.int64)) if len(ne) > 1 else 1
        self.data = None  # rows of raw bytes (uint8, n_rows x row_bytes)


class GGUFIndex:
    def __init__(self, path):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos, self.kv, self.tensors = 0, {}, []
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        self.version, n_tensors, n_kv = self.take("<I"), self.take("<Q"), self.take("<Q")
        for _ in range(n_kv):
            key, vtype = self.string(), self.take("<I")
            value = self.value(vtype)
            if value is not None:
                self.kv[key] = value
        infos = []
        for _ in range(n_tensors):
            name, n_dims = self.string(), self.take("<I")
            ne = [self.take("<Q") for _ in range(n_dims)]
            infos.append((name, ne, self.take("<I"), self.take("<Q")))
        align = self.kv.get("general.alignment", 32)
        data_start = (self.pos + align - 1) // align * align
        for name, ne, ggml_type, offset in infos:
            t = Tensor(name, ne, ggml_type, data_start + offset)
            end = t.offset + t.n_rows * t.row_bytes
            if end > self.buf.size:
                raise ValueError(f"{path}: tensor {name} ends past the end of the file")
            t.data = self.buf[t.offset:end].reshape(t.n_rows, t.row_bytes)
            self.tensors.append(t)

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode()

    def value(self, vtype):
        """The scalar value of a KV; None for strings and arrays (skipped)."""
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == 8:
            n = self.take("<Q")
            self.pos += n
            return None
        if vtype != 9:
            raise ValueError(f"unknown GGUF value type {vtype}")
        item, n = self.take("<I"), self.take("<Q")
        if item in SCALARS:
            self.pos += n * struct.calcsize(SCALARS[item])
        else:
            for _ in range(n):
                self.value(item)
        return None


# ---- (b) our file against llama.cpp's ----

def compare_with_llama(ftype_name, ours_path, ref_path):
    """Problems found (strings); empty when the two files hold the same tensors."""
    ours, ref = GGUFIndex(ours_path), GGUFIndex(ref_path)
    problems = []
    for key in ("general.file_type", "general.quantization_version"):
        if ours.kv.get(key) != ref.kv.get(key):
            problems.append(f"{key}: ours {ours.kv.get(key)}, llama.cpp {ref.kv.get(key)}")
    names_o, names_r = [t.name for t in ours.tensors], [t.name for t in ref.tensors]
    if names_o != names_r:
        if set(names_o) != set(names_r):
            problems.append(f"tensor names differ: only ours {sorted(set(names_o) - set(names_r))[:5]}, "
                            f"only llama.cpp {sorted(set(names_r) - set(names_o))[:5]}")
        else:
            i = next(i for i, (a, b) in enumerate(zip(names_o, names_r)) if a != b)
            problems.append(f"tensor order differs from position {i}: ours {names_o[i]}, llama.cpp {names_r[i]}")
    by_name = {t.name: t for t in ours.tensors}
    bad_tensors = 0
    for r in ref.tensors:
        o = by_name.get(r.name)
        if o is None:
            continue
        if o.tensor_type != r.tensor_type or list(o.shape) != list(r.shape):
            problems.append(f"{r.name}: ours {o.tensor_type.name} {list(o.shape)}, "
                            f"llama.cpp {r.tensor_type.name} {list(r.shape)}")
            continue
        if not np.array_equal(o.data, r.data):
            bs, ts = gguf.GGML_QUANT_SIZES[r.tensor_type]
            diff = np.any(o.data.reshape(-1, ts) != r.data.reshape(-1, ts), axis=1)
            first = int(np.argmax(diff))
            bad_tensors += 1
            problems.append(f"{r.name} ({r.tensor_type.name}): {int(diff.sum())} of {diff.size} blocks differ, "
                            f"first block {first} (elements {first * bs}..{first * bs + bs - 1})")
    if bad_tensors:
        problems.append(f"{bad_tensors} of {len(ref.tensors)} tensors differ in bytes")
    return [f"{ftype_name}: {p}" for p in problems]


# ---- (c) gguf-py's dequantization against ours ----

def our_dequantization(quant_path, tmp):
    """Our F32 dequantization of quant_path, in GGUF layout."""
    out = os.path.join(tmp, "deq.gguf")
    dsquant("gguf", quant_path, "-o", out, "--type", "F32", "--allow-requantize", "--force",
            "--threads", str(THREADS))
    return out


def compare_dequantization(ftype_name, quant_path, tmp):
    """Problems found, and how many quantized tensors were compared."""
    deq_path = our_dequantization(quant_path, tmp)
    q, d = GGUFIndex(quant_path), GGUFIndex(deq_path)
    ours = {t.name: t for t in d.tensors}
    problems, checked = [], 0
    for t in q.tensors:
        o = ours.get(t.name)
        if o is None or o.tensor_type != gguf.GGMLQuantizationType.F32 or list(o.shape) != list(t.shape):
            problems.append(f"{t.name}: our dequantized file has no F32 {list(t.shape)} tensor of that name")
            continue
        try:
            want = quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:  # a type gguf-py cannot dequantize: nothing to compare with
            continue
        want = np.ascontiguousarray(want, dtype=np.float32).reshape(-1).view(np.uint32)
        got = np.ascontiguousarray(o.data).reshape(-1).view(np.uint32)  # F32 bits
        checked += 1
        if not np.array_equal(got, want):
            bad = np.flatnonzero(got != want)
            i = int(bad[0])
            problems.append(f"{t.name} ({t.tensor_type.name}): {bad.size} values differ from gguf-py's, first at "
                            f"{i}: ours {got[i:i + 1].view(np.float32)[0]!r}, "
                            f"gguf-py {want[i:i + 1].view(np.float32)[0]!r}")
    del q, d
    os.remove(deq_path)
    return [f"{ftype_name} dequantization: {p}" for p in problems], checked


def gguf_py_reads(ftype_name, path):
    """gguf-py's own reader (slow, so once) sees the tensor table and KVs we meant."""
    ix, r = GGUFIndex(path), gguf.GGUFReader(path)
    problems = []
    got = [(t.name, t.tensor_type, list(t.shape), int(t.data_offset)) for t in r.tensors]
    want = [(t.name, t.tensor_type, list(t.shape), t.offset) for t in ix.tensors]
    if got != want:
        problems.append("GGUFReader's tensor table differs from the file's")
    for key in ("general.file_type", "general.quantization_version"):
        f = r.fields.get(key)
        value = None if f is None else f.contents()
        if value != ix.kv.get(key):
            problems.append(f"GGUFReader reads {key} as {value}, the file holds {ix.kv.get(key)}")
    return [f"{ftype_name}: {p}" for p in problems]


# ---- (a) llama.cpp runs our Q4_K_M ----

def prompt_logits(llm, tokens):
    llm.reset()
    llm.eval(tokens)
    logits = np.array(llm.scores[:len(tokens)], dtype=np.float32)
    return logits


def load(path):
    # One thread: ggml's threads spin at every barrier, which on a busy
    # 2-core machine makes a 6-token prompt take seconds instead of 0.1 s.
    return llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=1, n_threads_batch=1, n_batch=64, logits_all=True,
                           verbose=False)


def run_with_llama(quant_path, f32_path):
    problems = []
    llm = load(quant_path)
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True)
    logits = prompt_logits(llm, tokens)
    if logits.shape != (len(tokens), llm.n_vocab()) or not np.all(np.isfinite(logits)):
        problems.append(f"Q4_K_M logits: shape {logits.shape} or non-finite values "
                        f"({int(np.sum(~np.isfinite(logits)))} of {logits.size})")
    out = llm.create_completion(PROMPT, max_tokens=16, temperature=0.0, top_k=1)
    text = out["choices"][0]["text"]
    n_gen = out["usage"]["completion_tokens"]
    if not text.strip() or n_gen < 1:
        problems.append(f"Q4_K_M greedy continuation is empty ({n_gen} tokens: {text!r})")
    del llm

    ref = load(f32_path)
    ref_logits = prompt_logits(ref, tokens)
    del ref
    # A 4-5 bit model follows its F32 source closely; a scrambled block layout would not.
    corr = float(np.corrcoef(logits[-1], ref_logits[-1])[0, 1])
    if not corr > 0.9:
        problems.append(f"Q4_K_M last-token logits correlate {corr:.3f} with the F32 model's (want > 0.9)")
    print(f"llama.cpp runs our Q4_K_M: {PROMPT!r} ->{text!r} ({n_gen} tokens); "
          f"logits correlation with F32 {corr:.4f}")
    return problems


def budget_file(f32, tmp):
    """(d): a budgeted mix; llama.cpp must run it like any other file."""
    calib = os.path.join(os.path.dirname(wiki_path()), "tinyshakespeare.txt.zst")
    if not os.path.exists(calib):
        skip(f"no tinyshakespeare.txt.zst next to {wiki_path()}")
    out = os.path.join(tmp, "budget.gguf")
    summary = json.loads(dsquant("gguf", f32, "-o", out, "--type", "Q4_K_M", "--target-bpw", "5.5", "--candidates",
                                 "q4_0,q5_0,q8_0,q4_K,q6_K", "--calib", calib, "--budget-chunks", "1",
                                 "--budget-ctx", "32", "--threads", str(THREADS), "--json"))
    problems = []
    if not summary["bits_per_weight"] <= 5.5:
        problems.append(f"budget: {summary['bits_per_weight']} bits per weight, above the 5.5 asked")
    types = {t["type"] for t in summary["budget"]["tensors"]}
    if len(types) < 2:
        problems.append(f"budget: one type for every tensor ({types}): no allocation happened")
    problems += [p.replace("Q4_K_M", "budget") for p in run_with_llama(out, f32)]
    print(f"budget file: {summary['bits_per_weight']:.3f} bpw, types {sorted(types)}, "
          f"measured KLD {summary['budget']['measured_kld']:.4f}")
    os.remove(out)
    return problems


def scratch_dir():
    """TMPDIR when set, else a RAM disk when it has room: the test writes about
    5 GB of files (1.3 GB at most at a time) that live a few seconds each, and
    fsyncs them; on a busy virtual disk that alone took a minute."""
    if os.environ.get("TMPDIR") or not os.path.isdir("/dev/shm"):
        return None
    st = os.statvfs("/dev/shm")
    return "/dev/shm" if st.f_bavail * st.f_frsize > (4 << 30) else None


def main():
    model = default_model()
    t_start = time.monotonic()
    problems = []
    with tempfile.TemporaryDirectory(prefix="dsq-llq-", dir=scratch_dir()) as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        # The source is Q4_1: taking it to F32 is a requantization.
        dsquant("gguf", model, "-o", f32, "--type", "F32", "--allow-requantize", "--threads", str(THREADS))
        for name in FTYPES:
            ours = os.path.join(tmp, f"ours-{name}.gguf")
            ref = os.path.join(tmp, f"llama-{name}.gguf")
            t0 = time.monotonic()
            dsquant("gguf", f32, "-o", ours, "--type", name, "--threads", str(THREADS))
            t1 = time.monotonic()
            llama_quantize(f32, ref, name)
            t2 = time.monotonic()
            same = compare_with_llama(name, ours, ref)
            os.remove(ref)
            deq, checked = compare_dequantization(name, ours, tmp)
            runs = run_with_llama(ours, f32) + gguf_py_reads(name, ours) if name == "Q4_K_M" else []
            os.remove(ours)
            print(f"{name}: ours {t1 - t0:.1f} s, llama.cpp {t2 - t1:.1f} s, checks {time.monotonic() - t2:.1f} s; "
                  f"{'identical tensors' if not same else 'DIFFERENT from llama.cpp'}; "
                  f"{checked} tensors dequantized as gguf-py does{' EXCEPT %d' % len(deq) if deq else ''}",
                  flush=True)
            problems += same + deq + runs
        problems += budget_file(f32, tmp)
    if problems:
        print("\n".join(problems))
        sys.exit(f"{len(problems)} problem(s), see above")
    print(f"ok: {len(FTYPES)} ftypes byte-identical to llama.cpp, dequantized as gguf-py does; "
          f"llama.cpp runs our Q4_K_M ({time.monotonic() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
