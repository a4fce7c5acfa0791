"""gguf-py's GGUFReader reads the GGUF files `dsquant convert` writes.

The default model (SmolLM2-135M Q4_1) goes GGUF -> HF (F32) -> GGUF (F32).
The new GGUF must parse with gguf-py (alignment, offsets, value types), carry
the metadata we meant to write (the architecture keys and the tokenizer of the
source, general.file_type ALL_F32, no quantization_version since nothing is
quantized), and every tensor must be F32 with exactly the values gguf-py's own
dequantization gives for the source tensor, in the same (permuted) layout.

Exit 77 (skipped) when the default model or a Python package is missing.
"""
import os
import sys
import tempfile

from dsq_testlib import default_model, dsquant, skip

try:
    import numpy as np
    import gguf
    from gguf import quants
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); pip install -r tests/integration/requirements.txt")


def value(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def value_type(reader, key):
    return reader.fields[key].types[0]


def dequantized(t):
    shape = tuple(int(x) for x in reversed(t.shape))
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    return quants.dequantize(t.data, t.tensor_type).reshape(shape)


# Keys the conversion must carry over unchanged, with gguf-py's value types.
ARCH_KEYS = ["block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "vocab_size",
             "rope.dimension_count"]
TOKENIZER_KEYS = ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.chat_template"]


def check_metadata(src, out):
    assert value(out, "general.architecture") == "llama"
    assert int(value(out, "general.file_type")) == 0, value(out, "general.file_type")  # ALL_F32
    assert value(out, "general.quantization_version") is None, "no tensor is quantized"
    alignment = value(out, "general.alignment") or 32
    assert out.alignment == alignment
    for k in ARCH_KEYS:
        key = f"llama.{k}"
        assert value(out, key) is not None, f"{key} missing"
        assert value(out, key) == value(src, key), (key, value(out, key), value(src, key))
        assert value_type(out, key) == value_type(src, key), (key, value_type(out, key), value_type(src, key))
    for key in TOKENIZER_KEYS:
        assert value(out, key) == value(src, key), f"{key} differs"
    types = value(out, "tokenizer.ggml.token_type")
    assert types is not None and len(types) == len(value(src, "tokenizer.ggml.tokens"))


def check_tensors(src, out):
    by_name = {t.name: t for t in out.tensors}
    assert set(by_name) == {t.name for t in src.tensors}, set(by_name) ^ {t.name for t in src.tensors}
    data_start = out.data_offset
    for t in src.tensors:
        o = by_name[t.name]
        assert o.tensor_type == gguf.GGMLQuantizationType.F32, (t.name, o.tensor_type)
        assert list(o.shape) == list(t.shape), (t.name, o.shape, t.shape)
        assert (o.data_offset - data_start) % out.alignment == 0, f"{t.name} is not aligned"
        got = np.asarray(o.data, dtype=np.float32).reshape(tuple(int(x) for x in reversed(o.shape)))
        want = dequantized(t)
        if not np.array_equal(got, want):
            bad = tuple(np.argwhere(got != want)[0])
            sys.exit(f"{t.name}: {got[bad]} at {bad}, gguf-py dequantizes the source to {want[bad]}")
    return len(by_name)


def main():
    src_path = default_model()
    with tempfile.TemporaryDirectory(prefix="dsq-gguf-") as tmp:
        hf = os.path.join(tmp, "hf")
        out_path = os.path.join(tmp, "f32.gguf")
        dsquant("convert", src_path, "-o", hf, "--dtype", "f32")
        dsquant("convert", hf, "-o", out_path, "--dtype", "f32")
        src = gguf.GGUFReader(src_path)
        out = gguf.GGUFReader(out_path)
        check_metadata(src, out)
        n = check_tensors(src, out)
        print(f"ok: gguf-py reads {n} F32 tensors equal to the dequantized source, metadata as intended")


if __name__ == "__main__":
    main()
