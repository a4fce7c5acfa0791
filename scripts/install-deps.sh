#!/usr/bin/env bash
# Installs everything dsquant needs to build and test, from Debian and PyPI only.
# Idempotent: re-running it installs nothing new. Used by README.md and .ci/run.
set -euo pipefail

DEB_PKGS=(build-essential cmake pkg-config libcjson-dev libzstd-dev libcmocka-dev
          libpcre2-dev zstd python3 python3-pip)

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Python is used only by integration tests that drive real outside consumers.
if [ "${DSQ_NO_PYTHON:-0}" != "1" ]; then
  PY="${PYTHON:-python3}"
  req="$(dirname "$0")/../tests/integration/requirements.txt"
  if ! "$PY" -c "import numpy, safetensors, gguf" >/dev/null 2>&1; then
    "$PY" -m pip install -q --disable-pip-version-check -r "$req"
  fi
fi
