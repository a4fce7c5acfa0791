"""transformers (with torch, on CPU) loads the Hugging Face folder that
`dsquant convert` makes from the default model (SmolLM2-135M Q4_1 GGUF):
config, tokenizer (AutoTokenizer, chat template included) and weights, with no
missing, unexpected or mismatched tensors and no warning from the loader; one
forward pass gives finite logits of the right shape, and the model's greedy
continuation of a plain English prompt is made of ordinary words.

Exit 77 (skipped) when torch/transformers are not installed or the default
model is not in the cache.
"""
import logging
import os
import tempfile
import warnings

from dsq_testlib import default_model, dsquant, skip

try:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    skip(f"torch/transformers not importable ({e}); pip install torch transformers to run this test")


class Capture(logging.Handler):
    """Collects warnings and errors transformers logs while loading."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def main():
    src = default_model()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory(prefix="dsq-tf-") as tmp:
        out = os.path.join(tmp, "hf")
        dsquant("convert", src, "-o", out)

        transformers.logging.set_verbosity_warning()
        cap = Capture()
        logging.getLogger("transformers").addHandler(cap)
        with warnings.catch_warnings(record=True) as py_warnings:
            warnings.simplefilter("always")
            config = AutoConfig.from_pretrained(out, local_files_only=True)
            tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
            # transformers >= 4.56 names it dtype; older releases torch_dtype.
            major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
            key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
            model, info = AutoModelForCausalLM.from_pretrained(
                out, local_files_only=True, output_loading_info=True, **{key: torch.float32})
        logging.getLogger("transformers").removeHandler(cap)

        assert config.model_type == "llama", config.model_type
        assert config.num_hidden_layers == 30 and config.hidden_size == 576, config
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            assert not info.get(k), f"{k}: {info[k]}"
        # Weight-loading complaints come through the transformers logger.
        complaints = [m for m in cap.records if "weight" in m.lower() or "initialized" in m.lower()]
        assert not complaints, complaints
        ours = [str(w.message) for w in py_warnings if "tokenizer" in str(w.message).lower()]
        assert not ours, ours
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "tied embeddings"

        # The tokenizer: a byte-level BPE that reproduces its input and knows the chat markers.
        text = "The quick brown fox jumps over the lazy dog. 12345"
        ids = tok(text)["input_ids"]
        assert tok.decode(ids) == text, tok.decode(ids)
        assert len(ids) < len(text) // 2, f"{len(ids)} tokens for {len(text)} characters: merges not applied"
        assert tok.convert_tokens_to_ids("<|im_start|>") == 1, "chat markers"
        assert tok.eos_token is not None
        chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                       add_generation_prompt=True)
        assert "<|im_start|>user" in chat and chat.rstrip().endswith("assistant"), chat

        with torch.no_grad():
            batch = tok("The capital of France is", return_tensors="pt")
            logits = model(**batch).logits
            assert logits.shape == (1, batch["input_ids"].shape[1], config.vocab_size), logits.shape
            assert torch.isfinite(logits).all(), "non-finite logits"
            gen = model.generate(**batch, max_new_tokens=8, do_sample=False)
        cont = tok.decode(gen[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        letters = sum(c.isalpha() or c.isspace() for c in cont)
        assert cont.strip() and letters >= 0.7 * len(cont), f"continuation looks broken: {cont!r}"
        print(f"ok: transformers {transformers.__version__} loads {out}; continuation: {cont!r}")


if __name__ == "__main__":
    main()
