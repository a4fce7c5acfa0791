"""Our INT weight packers against the formats as their owners define them.

tests/tools/dsq_pack_tool (built next to dsquant) quantizes a random linear
layer (RTN or GPTQ, act-order included) and writes it as AutoAWQ GEMM, GPTQ v1
and compressed-tensors pack-quantized safetensors, plus the reference codes,
zeros, scales and g_idx as .npy files.

1. Unpackers written here with numpy from the format sources, not from our C
   code: AutoAWQ's unpack_awq + reverse_awq_order ([0,4,1,5,2,6,3,7]),
   AutoGPTQ's QuantLinear forward unpack (the shifts for 2/4/8 bits and the
   3-bit 12-shift table with its two straddling fields, zeros + 1),
   compressed-tensors' unpack_from_int32 (bit i*b of a dense stream, minus the
   2^(b-1) offset). Each must recover our codes, zeros, g_idx and scales (as
   rounded to the stored dtype) exactly, and so the dequantized weights.
2. compressed-tensors itself (QuantizationConfig validation of our
   quantization_config + PackedQuantizationCompressor.decompress) must give the
   same weights, bit for bit.
3. transformers' AwqConfig / GPTQConfig / CompressedTensorsConfig accept our
   quantization_config blocks.

Exit 77 (skipped) when numpy/safetensors or the tool are missing; the library
checks are skipped (and the test reports a skip) when torch/compressed-tensors
are missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from dsq_testlib import skip

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); pip install -r tests/integration/requirements.txt")

try:
    import torch
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationConfig
    HAVE_CT = True
except ImportError as e:  # pragma: no cover
    HAVE_CT = False
    CT_MISSING = str(e)

MODULE = "model.layers.0.mlp.down_proj"


def tool():
    b = os.environ.get("DSQ_BINARY") or shutil.which("dsquant")
    if not b:
        skip("DSQ_BINARY is not set")
    t = os.path.join(os.path.dirname(b), "dsq_pack_tool")
    if not os.path.exists(t):
        skip(f"{t} not built")
    return t


# ---------------------------------------------------------------- files

ST_DTYPES = {"I32": "<i4", "I64": "<i8", "F16": "<f2", "F32": "<f4", "BF16": "<u2"}


def load_file(path):
    """A safetensors file read by the spec (u64 header length, JSON header,
    data_offsets relative to the data section); BF16 comes back as uint16 bits
    (numpy has no bfloat16)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    assert header.get("__metadata__", {}).get("format") == "pt", header.get("__metadata__")
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=ST_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = arr.astype(arr.dtype.newbyteorder("=")) if arr.dtype.byteorder == ">" else arr
    return out


# ---------------------------------------------------------------- unpackers

AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def awq_unpack_cols(packed):
    """[R, C/8] int32 -> [R, C] (AutoAWQ unpack_awq then reverse_awq_order)."""
    w = packed.view(np.uint32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    nib = (w[:, :, None] >> shifts[None, None, :]) & 0xF  # [R, C/8, 8]: nibble order
    return nib[:, :, AWQ_REVERSE_ORDER].reshape(w.shape[0], -1).astype(np.int64)


# AutoGPTQ qlinear_cuda_old wf table for 3 bits: three words give 11 + 11 + 10 fields.
GPTQ3_WF = np.array([[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0],
                     [0, 1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31],
                     [0, 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0]], dtype=np.uint32)


def gptq_unpack_rows(packed, bits):
    """qweight-style [R*b/32, C] int32, packed down the rows -> [R, C]."""
    w = packed.view(np.uint32)
    if bits in (2, 4, 8):
        shifts = np.arange(0, 32, bits, dtype=np.uint32)
        v = (w[:, None, :] >> shifts[None, :, None]) & ((1 << bits) - 1)  # [R*b/32, 32/b, C]
        return v.reshape(-1, w.shape[1]).astype(np.int64)
    assert bits == 3
    t = w.reshape(w.shape[0] // 3, 3, 1, w.shape[1])  # [R/32, 3, 1, C]
    v = (t >> GPTQ3_WF[None, :, :, None]) & 0x7  # [R/32, 3, 12, C]
    v = v.astype(np.int64)
    hi0 = (t[:, 0, 0] >> 30) | ((t[:, 1, 0] << 2) & 0x4)  # field 10 straddles words 0 and 1
    hi1 = (t[:, 1, 0] >> 31) | ((t[:, 2, 0] << 1) & 0x6)  # field 21 straddles words 1 and 2
    v[:, 0, 10] = hi0 & 0x7
    v[:, 1, 11] = hi1 & 0x7
    out = np.concatenate([v[:, 0, :11], v[:, 1, 1:12], v[:, 2, 1:11]], axis=1)  # [R/32, 32, C]
    return out.reshape(-1, w.shape[1])


def gptq_unpack_cols(packed, bits):
    """qzeros-style [G, C*b/32] int32, packed along the columns -> [G, C]."""
    return gptq_unpack_rows(np.ascontiguousarray(packed.T), bits).T


def ct_unpack(packed, bits, count):
    """compressed-tensors unpack_from_int32 along the last dim: element i at
    stream bit i*bits (words little-endian), then minus the 2^(b-1) offset."""
    w = packed.view(np.uint32)
    stream = np.unpackbits(w.astype("<u4").view(np.uint8).reshape(w.shape[0], -1), axis=1, bitorder="little")
    fields = stream[:, : count * bits].reshape(w.shape[0], count, bits).astype(np.int64)
    unsigned = (fields << np.arange(bits)).sum(axis=2)
    return unsigned - (1 << (bits - 1))


def dequant(codes, zeros, scales, g_idx):
    """W[n, k] = (q[n, k] - z[n, g(k)]) * s[n, g(k)] in float32."""
    return (codes - zeros[:, g_idx]).astype(np.float32) * scales[:, g_idx].astype(np.float32)


# ---------------------------------------------------------------- one case

class Case:
    def __init__(self, rows, cols, bits, group, sym, method="rtn", act=False, static=False, rule="gptq",
                 scale="f16", seed=1):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def args(self):
        a = ["--rows", str(self.rows), "--cols", str(self.cols), "--bits", str(self.bits), "--group",
             str(self.group), "--method", self.method, "--rule", self.rule, "--scale-dtype", self.scale,
             "--seed", str(self.seed)]
        if self.sym:
            a.append("--sym")
        if self.act:
            a.append("--act-order")
        if self.static:
            a.append("--static-groups")
        return a

    def __str__(self):
        return " ".join(f"{k}={v}" for k, v in self.__dict__.items())


def load_refs(d):
    r = {k: np.load(os.path.join(d, "ref", f"{k}.npy")) for k in ("weight", "codes", "scales", "zeros", "g_idx")}
    r["codes"] = r["codes"].astype(np.int64)
    r["zeros"] = r["zeros"].astype(np.int64)
    r["g_idx"] = r["g_idx"].astype(np.int64)
    return r


def as_f32(scales, dtype):
    """Our F32 scales as stored in dtype ('f16' or 'bf16'), back in float32."""
    if dtype == "f16":
        return scales.astype(np.float16).astype(np.float32)
    bits = scales.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
    return rounded.astype(np.uint32).view(np.float32)


def stored_scales_f32(arr):
    """A stored scale array (F16, F32, or BF16 as uint16 bits) -> float32."""
    if arr.dtype == np.float16 or arr.dtype == np.float32:
        return arr.astype(np.float32)
    return (arr.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def check_equal(what, got, want, case):
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = np.argwhere(got != want)[:5] if got.shape == want.shape else f"shape {got.shape} != {want.shape}"
        sys.exit(f"FAIL {what} [{case}]: mismatch at {bad}")


def check_awq(d, ref, case):
    sd = load_file(os.path.join(d, "awq", "model.safetensors"))
    qw, qz, sc = (sd[f"{MODULE}.{s}"] for s in ("qweight", "qzeros", "scales"))
    N, K = ref["codes"].shape
    G = ref["scales"].shape[1]
    assert qw.dtype == np.int32 and qw.shape == (K, N // 8), qw.shape
    assert qz.shape == (G, N // 8) and sc.dtype == np.float16 and sc.shape == (G, N)
    codes = awq_unpack_cols(qw).T
    zeros = awq_unpack_cols(qz).T
    scales = sc.astype(np.float32).T
    check_equal("awq codes", codes, ref["codes"], case)
    check_equal("awq zeros", zeros, ref["zeros"], case)
    check_equal("awq scales", scales, as_f32(ref["scales"], "f16"), case)
    # AutoAWQ dequantize_gemm: group of input k is k // G (no g_idx in the format)
    gs = K // G
    assert np.array_equal(ref["g_idx"], np.arange(K) // gs)
    check_equal("awq dequant", dequant(codes, zeros, scales, np.arange(K) // gs),
                dequant(ref["codes"], ref["zeros"], as_f32(ref["scales"], "f16"), ref["g_idx"]), case)
    cfg = json.load(open(os.path.join(d, "awq", "config.json")))["quantization_config"]
    assert cfg["quant_method"] == "awq" and cfg["version"] == "gemm" and cfg["bits"] == 4 and cfg["zero_point"] is True
    assert cfg["group_size"] == case.group, cfg
    return cfg


def check_gptq(d, ref, case):
    sd = load_file(os.path.join(d, "gptq", "model.safetensors"))
    qw, qz, sc, gi = (sd[f"{MODULE}.{s}"] for s in ("qweight", "qzeros", "scales", "g_idx"))
    N, K = ref["codes"].shape
    G = ref["scales"].shape[1]
    b = case.bits
    assert qw.dtype == np.int32 and qw.shape == (K * b // 32, N), qw.shape
    assert qz.shape == (G, N * b // 32) and sc.shape == (G, N) and gi.dtype == np.int32 and gi.shape == (K,)
    codes = gptq_unpack_rows(qw, b).T
    zeros = ((gptq_unpack_cols(qz, b) + 1) & ((1 << b) - 1)).T  # v1: stored zero - 1, per field
    scales = stored_scales_f32(sc).T
    g_idx = gi.astype(np.int64)
    check_equal("gptq codes", codes, ref["codes"], case)
    check_equal("gptq zeros", zeros, ref["zeros"], case)
    check_equal("gptq g_idx", g_idx, ref["g_idx"], case)
    check_equal("gptq scales", scales, as_f32(ref["scales"], case.scale), case)
    if case.sym:
        assert (zeros == 1 << (b - 1)).all()
        if b == 4:
            assert (qz.view(np.uint32) == 0x77777777).all()  # the v1 convention, visibly
    check_equal("gptq dequant", dequant(codes, zeros, scales, g_idx),
                dequant(ref["codes"], ref["zeros"], as_f32(ref["scales"], case.scale), ref["g_idx"]), case)
    qc = json.load(open(os.path.join(d, "gptq", "quantize_config.json")))
    assert qc == json.load(open(os.path.join(d, "gptq", "config.json")))["quantization_config"]
    assert qc["quant_method"] == "gptq" and qc["checkpoint_format"] == "gptq" and qc["bits"] == b
    assert qc["group_size"] == case.group and qc["sym"] == case.sym and qc["desc_act"] == case.act
    return qc


def ct_tensors(d):
    sd = load_file(os.path.join(d, "ct", "model.safetensors"))
    return {k[len(MODULE) + 1:]: v for k, v in sd.items()}


def check_ct(d, ref, case):
    t = ct_tensors(d)
    N, K = ref["codes"].shape
    G = ref["scales"].shape[1]
    b = case.bits
    assert t["weight_packed"].dtype == np.int32 and t["weight_packed"].shape == (N, (K * b + 31) // 32)
    assert t["weight_shape"].dtype == np.int64 and list(t["weight_shape"]) == [N, K]
    assert t["weight_scale"].shape == (N, G)
    offset = 1 << (b - 1)
    q_signed = ct_unpack(t["weight_packed"], b, K)
    check_equal("ct codes", q_signed + offset, ref["codes"], case)
    if case.sym:
        assert "weight_zero_point" not in t
        zp_signed = np.zeros((N, G), dtype=np.int64)
    else:
        zp = t["weight_zero_point"]
        assert zp.dtype == np.int32 and zp.shape == ((N * b + 31) // 32, G)
        zp_signed = ct_unpack(np.ascontiguousarray(zp.T), b, N).T  # packed along dim 0
    check_equal("ct zeros", zp_signed + offset, ref["zeros"], case)
    scales = stored_scales_f32(t["weight_scale"])
    stype = "bf16" if case.scale == "bf16" else "f16"
    check_equal("ct scales", scales, as_f32(ref["scales"], stype), case)
    trivial = np.array_equal(ref["g_idx"], np.arange(K) // (K // G))
    assert ("weight_g_idx" in t) == (not trivial)
    g_idx = t["weight_g_idx"].astype(np.int64) if "weight_g_idx" in t else np.arange(K) // (K // G)
    check_equal("ct g_idx", g_idx, ref["g_idx"], case)
    want = dequant(ref["codes"], ref["zeros"], as_f32(ref["scales"], stype), ref["g_idx"])
    check_equal("ct dequant", dequant(q_signed, zp_signed, scales, g_idx), want, case)
    cfg = json.load(open(os.path.join(d, "ct", "config.json")))["quantization_config"]
    w = cfg["config_groups"]["group_0"]["weights"]
    assert cfg["format"] == "pack-quantized" and cfg["quantization_status"] == "compressed"
    assert w["num_bits"] == b and w["symmetric"] == case.sym
    assert w["strategy"] == ("channel" if case.group == -1 else "group")
    return cfg, want, trivial


def check_ct_library(d, cfg, want, trivial, case):
    """compressed-tensors' own validation and decompressor on our files."""
    if not trivial:
        # actorder "group" (g_idx) was removed from compressed-tensors; it must say so.
        try:
            QuantizationConfig.model_validate(cfg)
        except Exception as e:  # pydantic ValidationError
            assert "actorder" in str(e), e
            return "g_idx refused by this compressed-tensors (actorder 'group' removed)"
        # An older library that still accepts it: its decompressor ignores g_idx, nothing to compare.
        return "actorder 'group' accepted; decompressor does not apply g_idx"
    qc = QuantizationConfig.model_validate(cfg)
    scheme = qc.config_groups["group_0"]
    sd = {}
    from safetensors.torch import load_file as load_torch
    for k, v in load_torch(os.path.join(d, "ct", "model.safetensors")).items():
        sd[k[len(MODULE) + 1:]] = v
    out = PackedQuantizationCompressor.decompress(sd, scheme)
    w = out["weight"]
    stype = torch.bfloat16 if case.scale == "bf16" else torch.float16
    assert w.dtype == stype, w.dtype
    expect = torch.from_numpy(want).to(stype)  # exact product of a small int and the scale, rounded once
    if not torch.equal(w, expect):
        diff = (w.float() - expect.float()).abs()
        sys.exit(f"FAIL compressed-tensors decompress [{case}]: max diff {diff.max().item()} at "
                 f"{torch.nonzero(diff)[:5].tolist()}")
    return None


def check_transformers_configs(cfgs):
    try:
        from transformers.utils.quantization_config import AwqConfig, CompressedTensorsConfig, GPTQConfig
    except ImportError as e:
        return f"transformers missing ({e})"
    if "awq" in cfgs:
        a = AwqConfig.from_dict(dict(cfgs["awq"]))
        assert a.bits == 4 and a.zero_point and str(a.format).lower().endswith("gemm"), a
    if "gptq" in cfgs:
        g = GPTQConfig.from_dict(dict(cfgs["gptq"]))
        assert g.bits == cfgs["gptq"]["bits"] and g.format == "gptq", g
    if "ct" in cfgs and HAVE_CT:
        c = CompressedTensorsConfig.from_dict(dict(cfgs["ct"]))
        assert c.quantization_config is not None
    return None


CASES = [
    Case(64, 256, 4, 128, False, rule="awq"),
    Case(64, 256, 4, 32, True),
    Case(32, 200, 4, -1, False, scale="bf16"),  # per channel; compressed-tensors pads the rows
    Case(64, 256, 2, 64, False),
    Case(64, 256, 3, 32, True),
    Case(32, 200, 3, -1, False),  # 3-bit GPTQ needs in % 32 == 0: compressed-tensors only (padded)
    Case(64, 256, 8, -1, False, seed=3),
    Case(64, 256, 3, 128, False, method="gptq", act=True, seed=4),
    Case(64, 256, 4, 32, False, method="gptq", act=True, seed=5),
    Case(64, 256, 4, 64, True, method="gptq", act=True, static=True, seed=6),
    Case(32, 128, 8, 32, True, method="gptq", seed=7, scale="bf16"),
]


def main():
    exe = tool()
    notes = []
    cfgs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            d = os.path.join(tmp, f"case{i}")
            r = subprocess.run([exe, d, *case.args()], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAIL dsq_pack_tool [{case}]: {r.stderr.strip()}")
            ref = load_refs(d)
            has = {f: os.path.exists(os.path.join(d, f, "model.safetensors")) for f in ("awq", "gptq", "ct")}
            assert has["ct"], case
            assert has["awq"] == (case.bits == 4 and np.array_equal(ref["g_idx"], np.arange(case.cols) //
                                  (case.cols // ref["scales"].shape[1]))), (case, r.stdout)
            assert has["gptq"] == (case.cols * case.bits % 32 == 0 and case.rows * case.bits % 32 == 0), case
            if has["awq"]:
                cfgs["awq"] = check_awq(d, ref, case)
            if has["gptq"]:
                cfgs["gptq"] = check_gptq(d, ref, case)
            cfg, want, trivial = check_ct(d, ref, case)
            if trivial:
                cfgs["ct"] = cfg
            if case.method == "gptq" and case.act and not case.static:
                assert not trivial, f"act-order produced no reordering [{case}]"
            if HAVE_CT:
                note = check_ct_library(d, cfg, want, trivial, case)
                if note:
                    notes.append(f"case {i}: {note}")
            print(f"ok   case {i}: {case} ({', '.join(f for f in has if has[f])})")
    note = check_transformers_configs(cfgs)
    if note:
        notes.append(note)
    for n in notes:
        print(f"note: {n}")
    if not HAVE_CT:
        skip(f"numpy checks passed; compressed-tensors checks need torch + compressed-tensors ({CT_MISSING})")
    print(f"{len(CASES)} passed, 0 failed")


if __name__ == "__main__":
    main()
