"""The `safetensors` package reads what `dsquant convert` writes, and writes
what it reads.

1. The default model (SmolLM2-135M Q4_1 GGUF) is converted to a Hugging Face
   folder in F32. `safetensors.safe_open` must read every tensor, with the
   metadata transformers writes ({"format": "pt"}), and each tensor must equal
   gguf-py's own dequantization of the source (gguf.quants.dequantize), with
   the names mapped and the Llama Q/K rows un-permuted here independently.
2. A tiny Llama checkpoint written by `safetensors.numpy.save_file` (F16) is
   converted to GGUF and back: the GGUF (read with gguf-py) holds the same
   values in llama.cpp's layout, and the HF output equals the input exactly.

Exit 77 (skipped) when the default model or a Python package is missing.
"""
import json
import os
import shutil
import sys
import tempfile

from dsq_testlib import default_model, dsquant, skip

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
    import gguf
    from gguf import quants
except ImportError as e:  # pragma: no cover
    skip(f"python package missing ({e}); pip install -r tests/integration/requirements.txt")


def hf_name(gguf_name):
    """GGUF -> HF tensor names for Llama, written out from gguf-py's tensor_mapping."""
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if gguf_name in top:
        return top[gguf_name]
    _, bid, part, suffix = gguf_name.split(".")
    sub = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}[part]
    return f"model.layers.{bid}.{sub}.{suffix}"


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf permute(): HF rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def field(reader, key):
    return reader.fields[key].contents()


def dequantized(t):
    """A GGUF tensor as float32 in numpy (outermost-first) shape."""
    shape = tuple(int(x) for x in reversed(t.shape))
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    return quants.dequantize(t.data, t.tensor_type).reshape(shape)


def open_hf(folder):
    """name -> (file, handle) over model.safetensors or a sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    handles = {fn: safe_open(os.path.join(folder, fn), framework="numpy") for fn in files}
    names = {}
    for fn, h in handles.items():
        for k in h.keys():
            assert k not in names, f"{k} in two shards"
            names[k] = h
    return handles, names


def check_default_model(tmp):
    src = default_model()
    out = os.path.join(tmp, "hf")
    dsquant("convert", src, "-o", out, "--dtype", "f32")
    reader = gguf.GGUFReader(src)
    n_head = int(field(reader, "llama.attention.head_count"))
    n_kv = int(field(reader, "llama.attention.head_count_kv"))
    handles, names = open_hf(out)
    for h in handles.values():
        assert h.metadata() == {"format": "pt"}, h.metadata()
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["LlamaForCausalLM"], cfg
    assert cfg["hidden_size"] == int(field(reader, "llama.embedding_length"))
    assert cfg["num_hidden_layers"] == int(field(reader, "llama.block_count"))
    assert cfg["num_key_value_heads"] == n_kv
    assert cfg["torch_dtype"] == "float32"
    assert cfg["tie_word_embeddings"] is True  # the source has no output.weight

    assert len(names) == len(reader.tensors), (len(names), len(reader.tensors))
    for t in reader.tensors:
        name = hf_name(t.name)
        assert name in names, f"{name} missing from the HF output"
        got = names[name].get_tensor(name)
        want = dequantized(t)
        if ".attn_q." in t.name:
            want = unpermute(want, n_head)
        elif ".attn_k." in t.name:
            want = unpermute(want, n_kv)
        assert got.dtype == np.float32, (name, got.dtype)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[0]
            sys.exit(f"{name}: differs from gguf-py's dequantization at {tuple(bad)}: "
                     f"{got[tuple(bad)]} vs {want[tuple(bad)]}")
    print(f"ok: {len(names)} tensors of {out} equal gguf-py's dequantization of {os.path.basename(src)}")
    return out


def tiny_llama(folder, tokenizer_from):
    """A 2-layer Llama written by the safetensors package, sharing the real tokenizer."""
    os.makedirs(folder)
    for fn in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        p = os.path.join(tokenizer_from, fn)
        if os.path.exists(p):
            shutil.copy(p, folder)
    with open(os.path.join(tokenizer_from, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    hidden, inter, heads, kv, layers = 64, 96, 4, 2, 2
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "torch_dtype": "float16"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rng = np.random.default_rng(7)
    hd = hidden // heads

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float16)

    ts = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden),
          "lm_head.weight": w(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        ts.update({p + "input_layernorm.weight": w(hidden), p + "post_attention_layernorm.weight": w(hidden),
                   p + "self_attn.q_proj.weight": w(hidden, hidden), p + "self_attn.k_proj.weight": w(kv * hd, hidden),
                   p + "self_attn.v_proj.weight": w(kv * hd, hidden), p + "self_attn.o_proj.weight": w(hidden, hidden),
                   p + "mlp.gate_proj.weight": w(inter, hidden), p + "mlp.up_proj.weight": w(inter, hidden),
                   p + "mlp.down_proj.weight": w(hidden, inter)})
    save_file(ts, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return ts, heads, kv


def check_python_written(tmp, tokenizer_from):
    folder = os.path.join(tmp, "tiny")
    ts, heads, kv = tiny_llama(folder, tokenizer_from)
    gg = os.path.join(tmp, "tiny.gguf")
    back = os.path.join(tmp, "tiny-back")
    dsquant("convert", folder, "-o", gg, "--dtype", "f16")
    reader = gguf.GGUFReader(gg)
    assert field(reader, "general.architecture") == "llama"
    assert int(field(reader, "general.file_type")) == 1  # MOSTLY_F16
    by_name = {t.name: t for t in reader.tensors}
    assert len(by_name) == len(ts)
    for t in reader.tensors:
        name = hf_name(t.name)
        want = ts[name]
        if name.endswith("q_proj.weight"):
            want = permute(want, heads)
        elif name.endswith("k_proj.weight"):
            want = permute(want, kv)
        want_type = gguf.GGMLQuantizationType.F32 if want.ndim == 1 else gguf.GGMLQuantizationType.F16
        assert t.tensor_type == want_type, (t.name, t.tensor_type)
        got = np.asarray(t.data).reshape(want.shape)
        assert np.array_equal(got.astype(np.float32), want.astype(np.float32)), t.name
    dsquant("convert", gg, "-o", back, "--dtype", "f16")
    _, names = open_hf(back)
    assert set(names) == set(ts), set(names) ^ set(ts)
    for name, want in ts.items():
        got = names[name].get_tensor(name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), name
    print(f"ok: a checkpoint written by safetensors.numpy converts to GGUF and back bit for bit")


def main():
    with tempfile.TemporaryDirectory(prefix="dsq-st-") as tmp:
        hf = check_default_model(tmp)
        check_python_written(tmp, hf)


if __name__ == "__main__":
    main()
