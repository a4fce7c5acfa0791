#!/usr/bin/env python3
"""Checks a tokenizer.json that dsquant wrote against llama.cpp's tokenizer
test vectors, with the Hugging Face `tokenizers` package as the consumer.

    check_tokenizer_json.py TOKENIZER_DIR VOCAB.gguf.inp VOCAB.gguf.out [--text TEXT --ids "1 2 3"]

TOKENIZER_DIR holds the tokenizer.json written from VOCAB.gguf (for example
by `dsquant convert` or dsq_tokenizer_gguf_to_hf). The .inp file holds texts
joined by "\\n__ggml_vocab_test__\\n" (a final separator ends it), the .out
file one line of expected ids per text (llama.cpp's models/ggml-vocab-*
files, see ../shared/tokenizer/README.md). Texts are encoded without special
tokens, as those files were made. --text/--ids adds one more case.

Prints "N passed, N failed" and exits 1 on any failure, 77 when the
`tokenizers` package is missing (ctest's skip code; 1 instead under
DSQ_TEST_REQUIRE_FIXTURES=1, see dsq_testlib.py).
"""
import argparse
import os
import sys

from dsq_testlib import skip

SEPARATOR = "\n__ggml_vocab_test__\n"


def load_cases(inp_path, out_path):
    with open(inp_path, encoding="utf-8") as f:
        texts = f.read().split(SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()
    with open(out_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(texts):
        raise SystemExit(f"{out_path}: {len(lines)} lines for {len(texts)} texts")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_dir")
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--text", action="append", default=[])
    ap.add_argument("--ids", action="append", default=[])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        skip("the tokenizers package is not installed; scripts/install-deps.sh installs it")
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    cases = load_cases(args.inp, args.out)
    if len(args.text) != len(args.ids):
        raise SystemExit("--text and --ids must come in pairs")
    cases += [(t, [int(x) for x in ids.split()]) for t, ids in zip(args.text, args.ids)]
    passed = failed = 0
    for text, want in cases:
        got = tok.encode(text, add_special_tokens=False).ids
        if got == want:
            passed += 1
            continue
        failed += 1
        if args.verbose or failed <= 5:
            print(f"FAIL {text!r}\n  want {want}\n  got  {got}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
