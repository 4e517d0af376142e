#!/usr/bin/env bash
# Builds and runs every test: the full build (LLVM + Python) through ctest
# (GoogleTest, lit + FileCheck, pytest), after building the core once more
# without LLVM and Python so the layering stays honest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DYNAFUSE_VENV:-$root/.venv}
"$root/scripts/setup.sh"
export PATH="$venv/bin:$PATH"
jobs=${DYNAFUSE_JOBS:-2}

echo "== core without LLVM or Python =="
cmake -S "$root" -B "$root/build-nollvm" -G Ninja -DDYNAFUSE_ENABLE_LLVM=OFF \
  -DDYNAFUSE_ENABLE_PYTHON=OFF -DDYNAFUSE_BUILD_TESTS=ON >/dev/null
cmake --build "$root/build-nollvm" -j "$jobs"
ctest --test-dir "$root/build-nollvm" --output-on-failure --no-tests=error -j "$jobs"

echo "== full build: unit, lit and pytest =="
ctest --test-dir "$root/build" --output-on-failure --no-tests=error -j "$jobs"
