"""Our 8-bit folders decoded by code written here from the formats' documentation.

Each folder is made by our CLI from the default model (F32 Hugging Face
folder) or, for 128x128 FP8 blocks, from a random Llama whose widths are
multiples of 128 (dsq_testlib.make_tiny_llama: SmolLM2's 576 is not, and
vLLM needs whole activation groups); the default model's blocks are written
too, with --partial-blocks (partial last blocks and groups). The decoders below know only the
formats as documented:

  compressed-tensors int-quantized / float-quantized (compressed-tensors
    0.20.1 compressors/naive_quantized, quantization/lifecycle/initialize.py):
    per linear "weight" I8 | F8_E4M3 [out, in], "weight_scale" F32 [1] (tensor)
    | [out, 1] (channel) | [ceil(out/128), ceil(in/128)] (block), "input_scale"
    [1] only for static activations; quantization_config.config_groups names
    the scheme.
  vLLM fp8 (vLLM quantization/fp8.py; DeepSeek-V3 README_WEIGHTS.md):
    quant_method "fp8", activation_scheme, weight_block_size for blocks; per
    linear weight F8_E4M3, "weight_scale" [] or "weight_scale_inv" [grid]
    (a multiplier despite the name), "input_scale" [] when static.
  ModelOpt FP8 (Model-Optimizer export/quant_utils.py, vLLM modelopt.py):
    hf_quant_config.json {"quantization": {"quant_algo": "FP8"}}, weight_scale
    [] and input_scale [] per linear.

FP8 E4M3FN is decoded from its bits (1 sign, 4 exponent bits of bias 7,
3 mantissa bits, 0x7f/0xff NaN, no infinities) and encoded by round to
nearest even over the 254 finite values, in numpy. The scale rule
(compressed-tensors calculate_qparams, symmetric): s = amax / 127.5 for INT8
(q = clamp(rint(w / s), -128, 127)), s = amax / 448 for FP8, per tensor,
row or block.

Checks per folder:
  * the config and tensor names, dtypes and shapes are the documented ones;
  * round-to-nearest folders (no smoothing): codes and scales recomputed from
    the base weights equal the folder's bit for bit;
  * smoothed folders: the product the model computes, norm' * W' (the
    smoothing factor folded into the RMSNorm before q/k/v and gate/up),
    reconstructs norm * W within half a step of each row's scale (plus the
    F16 rounding of the stored norm); linears not smoothed are exact RTN;
  * static input scales are positive and shared by the linears that share
    an input (q/k/v, gate/up), as one observer sees one tensor;
  * compressed-tensors' own decompressor (NaiveQuantizationCompressor)
    gives our decoder's weights exactly;
  * transformers loads the compressed-tensors folders on the CPU
    (CompressedTensorsConfig(dequantize=True): dense weights) and the
    weight-only FP8 folder's NLL on 2 x 256 WikiText-2 tokens equals ours
    within 2e-4; for folders whose activations are quantized, transformers'
    dense model is compared with our runtime on the weight-only folder of
    the same weights (fp8 dynamic == weight-only weights).
A folder whose command this dsquant lacks fails the test (the commands are part of the tree).
About 2 minutes. Exit 77 when the model, the data or a package is missing.
"""
import json
import os
import shutil
import sys
import tempfile
import time

from dsq_testlib import default_model, dsquant, has_command, make_tiny_llama, skip, wiki_excerpt, wiki_path

try:
    import numpy as np
    import torch  # only to read F8_E4M3 bytes through safetensors and to run transformers
    from safetensors import safe_open
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); scripts/install-deps.sh installs numpy, safetensors, torch")

CTX, CHUNKS, TOL = 256, 2, 2e-4
CALIB = ["--n-samples", "4", "--seqlen", "64"]
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
# the RMSNorm whose output each smoothed linear reads
NORM_OF = {"self_attn.q_proj": "input_layernorm", "self_attn.k_proj": "input_layernorm",
           "self_attn.v_proj": "input_layernorm", "mlp.gate_proj": "post_attention_layernorm",
           "mlp.up_proj": "post_attention_layernorm"}

# name, model ("base" or "tiny"), command and options, format, expectations
ARTIFACTS = [
    ("w8a8-rtn-dynamic", "base", ["smoothquant", "--no-smooth", *CALIB], "ct",
     dict(kind="int8", wgran="channel", act="token", smoothed=False)),
    ("w8a8-rtn-static", "base", ["smoothquant", "--no-smooth", "--act", "static", *CALIB], "ct",
     dict(kind="int8", wgran="channel", act="tensor", smoothed=False)),
    ("w8a8-smooth-dynamic", "base", ["smoothquant", *CALIB], "ct",
     dict(kind="int8", wgran="channel", act="token", smoothed=True)),
    ("fp8-ct-dynamic", "base", ["fp8", "--scheme", "dynamic"], "ct",
     dict(kind="fp8", wgran="channel", act="token", smoothed=False)),
    ("fp8-ct-weight-only", "base", ["fp8", "--scheme", "weight-only"], "ct",
     dict(kind="fp8", wgran="channel", act=None, smoothed=False)),
    ("fp8-ct-static", "base", ["fp8", "--scheme", "static", *CALIB], "ct",
     dict(kind="fp8", wgran="tensor", act="tensor", smoothed=False)),
    ("fp8-ct-block", "tiny", ["fp8", "--scheme", "block"], "ct",
     dict(kind="fp8", wgran="block", act="group", smoothed=False)),
    # SmolLM2's 576 widths: partial last groups and blocks, written on request (vLLM refuses them)
    ("fp8-ct-block-partial", "base", ["fp8", "--scheme", "block", "--partial-blocks"], "ct",
     dict(kind="fp8", wgran="block", act="group", smoothed=False)),
    ("fp8-native-static", "base", ["fp8", "--scheme", "static", "--format", "fp8", *CALIB], "fp8",
     dict(kind="fp8", wgran="tensor", act="tensor", smoothed=False)),
    ("fp8-native-block", "tiny", ["fp8", "--scheme", "block", "--format", "fp8"], "fp8",
     dict(kind="fp8", wgran="block", act="group", smoothed=False)),
    ("modelopt-fp8", "base", ["fp8", "--scheme", "static", "--format", "modelopt", *CALIB], "modelopt",
     dict(kind="fp8", wgran="tensor", act="tensor", smoothed=False)),
]


# --------------------------------------------------------------------------------------------
# FP8 E4M3FN and INT8 in numpy, from the bit layout and the scale rule.
# --------------------------------------------------------------------------------------------
def e4m3_decode(codes):
    c = codes.astype(np.int32)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 0x7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    mag = np.where((e == 15) & (m == 7), np.nan, mag)
    return (sign * mag).astype(np.float32)


_E4M3_POS = e4m3_decode(np.arange(127, dtype=np.uint8))  # codes 0x00..0x7e: 0 .. 448, increasing


def e4m3_encode(x):
    """Round to nearest, ties to the even code, after clamping to +-448 (torch's cast)."""
    x = np.clip(x.astype(np.float32), -448.0, 448.0)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(_E4M3_POS, a), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo, dhi = a - _E4M3_POS[lo], _E4M3_POS[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (pick | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def scale_grid(w, wgran, qmax):
    """The documented scale per tensor / row / 128x128 block (ceil grid), in float32."""
    a = np.abs(w)
    if wgran == "tensor":
        amax = np.array([[a.max()]], np.float32)
    elif wgran == "channel":
        amax = a.max(axis=1, keepdims=True)
    else:
        r, c = -(-w.shape[0] // 128), -(-w.shape[1] // 128)
        amax = np.zeros((r, c), np.float32)
        for i in range(r):
            for j in range(c):
                amax[i, j] = a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].max()
    s = (amax.astype(np.float32) / np.float32(qmax)).astype(np.float32)
    return np.where(s == 0, np.finfo(np.float32).eps, s).astype(np.float32)


def expand(s, shape):
    """A scale grid broadcast to every element of a [out, in] weight."""
    if s.size == 1:
        return np.full(shape, s.reshape(()), np.float32)
    if s.shape[1] == 1:
        return np.repeat(s, shape[1], axis=1)
    return np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:shape[0], :shape[1]]


def quantize(w, kind, wgran):
    s = scale_grid(w, wgran, 127.5 if kind == "int8" else 448.0)
    x = (w / expand(s, w.shape)).astype(np.float32)
    if kind == "int8":
        return np.clip(np.rint(x), -128, 127).astype(np.int8), s
    return e4m3_encode(x), s


def dequantize(codes, s, kind):
    v = codes.astype(np.float32) if kind == "int8" else e4m3_decode(codes)
    return (v * expand(s.reshape(s.shape if s.ndim == 2 else (1, 1)), codes.shape)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Reading a folder.
# --------------------------------------------------------------------------------------------
class Folder:
    def __init__(self, path):
        self.path = path
        self.f = safe_open(os.path.join(path, "model.safetensors"), framework="pt")
        self.keys = set(self.f.keys())
        with open(os.path.join(path, "config.json")) as fp:
            self.config = json.load(fp)

    def dtype(self, k):
        return self.f.get_slice(k).get_dtype()

    def get(self, k):
        t = self.f.get_tensor(k)
        if t.dtype == torch.float8_e4m3fn:
            return t.view(torch.uint8).numpy()  # the bytes; decoded in numpy
        return t.float().numpy() if t.is_floating_point() else t.numpy()


def base_weights(path):
    f = safe_open(os.path.join(path, "model.safetensors"), framework="pt")
    return {k: f.get_tensor(k).float().numpy() for k in f.keys()}


def check_config(name, fmt, exp, folder, problems):
    qc = folder.config.get("quantization_config")
    if fmt == "ct":
        g = qc["config_groups"]["group_0"]
        want_fmt = {"int-quantized"} if exp["kind"] == "int8" else {"float-quantized"}
        if exp["act"] is None:  # weight-only: naive-quantized, the same compressor under its own name
            want_fmt.add("naive-quantized")
        got_fmt = g.get("format") or qc.get("format")
        w, a = g["weights"], g.get("input_activations")
        ok = (qc["quant_method"] == "compressed-tensors" and got_fmt in want_fmt and w["num_bits"] == 8
              and w["type"] == ("int" if exp["kind"] == "int8" else "float") and w["symmetric"]
              and w["strategy"] == exp["wgran"] and (exp["wgran"] != "block" or w["block_structure"] == [128, 128]))
        if exp["act"] is None:
            ok = ok and a is None
        else:
            ok = ok and a is not None and a["num_bits"] == 8 and a["dynamic"] == (exp["act"] != "tensor") and \
                a["strategy"] == exp["act"] and (exp["act"] != "group" or a["group_size"] == 128)
    elif fmt == "fp8":
        ok = (qc["quant_method"] == "fp8" and qc["activation_scheme"] == ("static" if exp["act"] == "tensor"
                                                                          else "dynamic")
              and (qc.get("weight_block_size") == [128, 128]) == (exp["wgran"] == "block"))
    else:
        with open(os.path.join(folder.path, "hf_quant_config.json")) as fp:
            hq = json.load(fp)["quantization"]
        ok = hq["quant_algo"] == "FP8" and qc.get("quant_method") == "modelopt"
    if not ok:
        problems.append(f"{name}: quantization_config is not the documented one for {exp}: {json.dumps(qc)[:600]}")


def scale_name(fmt, exp):
    return "weight_scale_inv" if fmt == "fp8" and exp["wgran"] == "block" else "weight_scale"


def want_scale_shape(fmt, exp, shape):
    if exp["wgran"] == "channel":
        return [shape[0], 1]
    if exp["wgran"] == "block":
        return [-(-shape[0] // 128), -(-shape[1] // 128)]
    return [1] if fmt == "ct" else []


def check_linears(name, fmt, exp, folder, base, problems):
    kind, code_dtype = exp["kind"], "I8" if exp["kind"] == "int8" else "F8_E4M3"
    n_layers = folder.config["num_hidden_layers"]
    exact = mism = 0
    worst = 0.0
    decoded = {}
    for l in range(n_layers):
        in_scales = {}
        for lin in LINEARS:
            p = f"model.layers.{l}.{lin}."
            w0 = base[p + "weight"]
            sn = scale_name(fmt, exp)
            for k, dt in ((p + "weight", code_dtype), (p + sn, "F32")):
                if k not in folder.keys or folder.dtype(k) != dt:
                    problems.append(f"{name}: {k} missing or not {dt}")
                    return decoded
            codes, s = folder.get(p + "weight"), folder.get(p + sn)
            if list(codes.shape) != list(w0.shape) or list(s.shape) != want_scale_shape(fmt, exp, w0.shape):
                problems.append(f"{name}: {p}: weight {list(codes.shape)} / {sn} {list(s.shape)}, "
                                f"documented {list(w0.shape)} / {want_scale_shape(fmt, exp, w0.shape)}")
                return decoded
            s2 = s.reshape(-1, 1) if s.ndim < 2 else s
            has_in = p + "input_scale" in folder.keys
            if has_in != (exp["act"] == "tensor"):
                problems.append(f"{name}: {p}input_scale {'present' if has_in else 'absent'} for act {exp['act']}")
            if has_in:
                v = folder.get(p + "input_scale")
                if list(v.shape) != ([1] if fmt == "ct" else []) or not (np.isfinite(v).all() and (v > 0).all()):
                    problems.append(f"{name}: {p}input_scale {v!r} (shape {list(v.shape)})")
                in_scales[lin] = float(v.reshape(-1)[0])
            deq = dequantize(codes, s2, kind)
            decoded[p + "weight"] = deq
            if exp["smoothed"] and lin in NORM_OF:
                # what the model computes: norm' * W' against norm * W, within half a step of the row's scale
                nk = f"model.layers.{l}.{NORM_OF[lin]}.weight"
                n1, n0 = folder.get(nk).astype(np.float32), base[nk]
                err = np.abs(deq * n1[None, :] - w0 * n0[None, :])
                bound = 0.5 * expand(s2, w0.shape) * np.abs(n1)[None, :] * (1 + 1e-5) + \
                    np.abs(w0 * n0[None, :]) * 2.0 ** -10 + 1e-30  # + F16 rounding of the stored norm
                worst = max(worst, float((err / bound).max()))
                if (err > bound).any():
                    mism += 1
                    problems.append(f"{name}: {p}: norm'*W' off norm*W by up to {err.max():.3g} "
                                    f"({(err > bound).sum()} elements beyond half a step)")
                continue
            q, sq = quantize(w0, kind, exp["wgran"])
            if np.array_equal(sq.reshape(s2.shape).view(np.uint32), s2.astype(np.float32).view(np.uint32)) and \
                    np.array_equal(q.view(np.uint8), codes.view(np.uint8)):
                exact += 1
            else:
                mism += 1
                nd = int((q.view(np.uint8) != codes.view(np.uint8)).sum())
                problems.append(f"{name}: {p}: recomputed RTN differs ({nd} codes, scales equal: "
                                f"{np.array_equal(sq.reshape(s2.shape), s2)})")
        for group in (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("mlp.gate_proj", "mlp.up_proj")):
            vals = {in_scales[g] for g in group if g in in_scales}
            if len(vals) > 1:
                problems.append(f"{name}: layer {l}: input scales of {group} differ ({sorted(vals)}) though "
                                f"they read one tensor")
    extra = f", smoothed products within {worst:.2f} of the bound" if exp["smoothed"] else ""
    print(f"{name}: {exact} linears exact RTN, {mism} mismatched{extra}", flush=True)
    return decoded


def check_ct_decompress(name, exp, folder, decoded, problems):
    """compressed-tensors' own decompressor on each linear gives our decoder's weights."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme

    qc = folder.config["quantization_config"]
    g = qc["config_groups"]["group_0"]
    comp = BaseCompressor.get_value_from_registry(g.get("format") or qc["format"])
    scheme = QuantizationScheme.model_validate({k: v for k, v in g.items() if k != "format"})
    bad = 0
    for k, ours in decoded.items():
        p = k[:-len("weight")]
        sd = {"weight": folder.f.get_tensor(k), "weight_scale": folder.f.get_tensor(p + "weight_scale")}
        out = comp.decompress(sd, scheme)["weight"].float().numpy()
        if not np.array_equal(out, ours):
            bad += 1
            if bad == 1:
                problems.append(f"{name}: compressed-tensors decompresses {k} differently "
                                f"(max diff {np.abs(out - ours).max():.3g})")
    print(f"{name}: compressed-tensors {comp.__name__} decompressed {len(decoded)} linears, {bad} differ",
          flush=True)


def ours_nll(folder, text_file):
    return json.loads(dsquant("ppl", folder, "--data", text_file, "--protocol", "hf", "--ctx", str(CTX), "--chunks",
                              str(CHUNKS), "--threads", "2", "--json"))["nll_mean"]


def transformers_nll(folder, ids):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True,
                                                 quantization_config=CompressedTensorsConfig(dequantize=True))
    model.eval()
    nll = []
    with torch.no_grad():
        for c in range(CHUNKS):
            w = torch.tensor([ids[c * CTX:(c + 1) * CTX]])
            lp = torch.log_softmax(model(w).logits[0].double()[:-1], dim=-1)
            nll.extend((-lp[torch.arange(CTX - 1), w[0, 1:]]).tolist())
    return float(np.mean(nll))


def check_transformers(folders, ids, text_file, problems):
    """transformers' dense model of each ct folder against our runtime on the weight-only folder of its weights."""
    pairs = [("fp8-ct-weight-only", "fp8-ct-weight-only"), ("fp8-ct-dynamic", "fp8-ct-weight-only")]
    for theirs_name, ours_name in pairs:
        if theirs_name not in folders or ours_name not in folders:
            continue
        t = transformers_nll(folders[theirs_name], ids)
        o = ours_nll(folders[ours_name], text_file)
        rel = abs(t - o) / o
        print(f"transformers {theirs_name} {t:.6f} vs ours {ours_name} {o:.6f} (rel {rel:.1e})", flush=True)
        if rel > TOL:
            problems.append(f"transformers on {theirs_name}: NLL {t:.6f} vs ours on {ours_name} {o:.6f}")
    for name in ("w8a8-rtn-dynamic", "w8a8-smooth-dynamic", "fp8-ct-static", "fp8-ct-block-partial"):
        if name in folders:  # loads and runs; its activations are quantized by ours, not by the dense model
            t, o = transformers_nll(folders[name], ids), ours_nll(folders[name], text_file)
            print(f"transformers {name} (dense weights) {t:.6f}, ours (quantized activations) {o:.6f}", flush=True)
            if not np.isfinite(t) or abs(t - o) / o > 0.05:
                problems.append(f"transformers on {name}: NLL {t:.6f} far from ours {o:.6f}")


def main():
    t_start = time.time()
    src, wiki = default_model(), wiki_path()
    os.environ.setdefault("DSQ_SHARED_DIR", os.path.dirname(os.path.dirname(wiki)))
    work = tempfile.mkdtemp(prefix="dsq-w8fmt-")
    problems, skipped = [], []
    try:
        text_file = wiki_excerpt(work)
        models = {"base": os.path.join(work, "base"), "tiny": os.path.join(work, "tiny")}
        dsquant("convert", src, "-o", models["base"], "--dtype", "f32")
        make_tiny_llama(models["tiny"], models["base"])
        ids = [int(t) for t in dsquant("tokenize", models["base"], "--file", text_file).split()]
        weights = {m: base_weights(p) for m, p in models.items()}
        present, folders = {}, {}
        for name, model, cmd, fmt, exp in ARTIFACTS:
            if cmd[0] not in present:
                present[cmd[0]] = has_command(cmd[0])
            if not present[cmd[0]]:  # every command of the table is part of this tree: its absence is a bug
                raise SystemExit(f"FAIL {name}: this dsquant has no `{cmd[0]}` command")
            out = os.path.join(work, name)
            dsquant(cmd[0], models[model], "-o", out, *cmd[1:], "--threads", "2")
            folders[name] = out
            folder = Folder(out)
            check_config(name, fmt, exp, folder, problems)
            decoded = check_linears(name, fmt, exp, folder, weights[model], problems)
            if fmt == "ct" and decoded:
                check_ct_decompress(name, exp, folder, decoded, problems)
        check_transformers(folders, ids, text_file, problems)
        for s in skipped:
            print(f"SKIP {s}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{time.time() - t_start:.0f} s in all")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems[:40]))
        return 1
    if not folders:
        skip("no 8-bit command in this dsquant: " + "; ".join(skipped), fixture=False)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
