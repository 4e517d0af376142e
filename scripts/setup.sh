#!/usr/bin/env bash
# Installs everything Dynafuse needs, idempotently (a fast no-op when present):
# Debian packages (LLVM 16, MLIR 16, lit/FileCheck, GoogleTest and LLVM's static link
# dependencies), a virtual environment (.venv, or $DYNAFUSE_VENV) with torch
# 2.14.1, torchvision 0.29.1, pytest, lit, expecttest (which PyTorch's OpInfo
# test samples import), matplotlib (benchmark charts), transformers 5.24,
# timm 1.0.31 and diffusers 0.42.1 (library-code tests build their models from
# small configs, no weights), then Dynafuse itself through `pip install -e .`
# (scikit-build-core driving CMake and Ninja into build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DYNAFUSE_VENV:-$root/.venv}

debian_packages=(llvm-16-dev llvm-16-tools libmlir-16-dev mlir-16-tools googletest libgtest-dev libzstd-dev
  zlib1g-dev libtinfo-dev libxml2-dev libz3-dev g++ python3-venv)
missing=()
for package in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" - <<'PY' 2>/dev/null; then
import importlib.metadata as m
assert m.version("torch").startswith("2.14.1") and m.version("torchvision").startswith("0.29.1")
assert m.version("transformers") == "5.24.0" and m.version("timm") == "1.0.31"
assert m.version("diffusers") == "0.42.1"
for name in ("pytest", "lit", "scikit-build-core", "cmake", "ninja", "expecttest",
             "matplotlib"):
    m.version(name)
PY
  echo "setup: installing Python packages into $venv"
  "$venv/bin/pip" install -q torch==2.14.1 torchvision==0.29.1 pytest lit \
    scikit-build-core cmake ninja expecttest matplotlib transformers==5.24.0 \
    timm==1.0.31 diffusers==0.42.1
fi

export PATH="$venv/bin:$PATH"
echo "setup: building and installing dynafuse (pip install -e .)"
"$venv/bin/pip" install -q --no-build-isolation --no-deps -e "$root"
