#!/usr/bin/env bash
# GPU check of the CUDA backend, for a machine with an NVIDIA GPU: builds
# the CUDA path without LLVM and Python, then
#   1. runs the CUDA GoogleTests (device runs compared with the interpreter;
#      here a missing device is an error, not a skip),
#   2. runs every module of benchmarks/gpu/suite with dynafuse-run
#      --backend=cuda against the interpreter,
#   3. runs the lit tests under test/lit/cuda.
# Needs cmake, ninja, a C++17 compiler, GoogleTest, cuda.h (CUDA_HOME or
# /usr/local/cuda*) and NVRTC 13 (DYNAFUSE_NVRTC=/path/libnvrtc.so.13, or
# on the library path). Exit status 0 only when everything passed.
#
#   benchmarks/gpu/check.sh [BUILD_DIR]     (default: build-gpu)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
jobs=${DYNAFUSE_JOBS:-$(nproc)}
status=0

if [ -z "${DYNAFUSE_NVRTC:-}" ]; then
  for candidate in "$root"/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13 \
      /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda-13*/lib64/libnvrtc.so.13; do
    if [ -e "$candidate" ]; then export DYNAFUSE_NVRTC=$candidate; break; fi
  done
fi
echo "== NVRTC: ${DYNAFUSE_NVRTC:-libnvrtc.so.13 from the library path}"
# A private cache: stale entries never hide a compiler change.
export DYNAFUSE_CACHE_DIR=${DYNAFUSE_CACHE_DIR:-$build/cache}

echo "== configure and build (CUDA on, LLVM and Python off)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDYNAFUSE_ENABLE_LLVM=OFF -DDYNAFUSE_ENABLE_PYTHON=OFF \
  -DDYNAFUSE_ENABLE_CUDA=ON >/dev/null || exit 1
cmake --build "$build" -j "$jobs" || exit 1

command -v nvidia-smi >/dev/null && nvidia-smi -L

echo "== GoogleTest: CUDA*, NVRTC*"
out=$("$build/test/dynafuse-unittests" --gtest_filter='CUDA*:NVRTC*' 2>&1)
echo "$out" | tail -25
if echo "$out" | grep -q "FAILED"; then status=1; fi
if echo "$out" | grep -q "SKIPPED \]"; then
  echo "check.sh: tests were skipped (no device or NVRTC?)"; status=1
fi

echo "== dynafuse-run suite: cuda vs interp"
for file in "$root"/benchmarks/gpu/suite/*.graph "$root"/benchmarks/gpu/suite/*.loop; do
  [ -e "$file" ] || continue
  for sizes in s0=1 s0=37 s0=1000; do
    "$build/tools/dynafuse-run/dynafuse-run" "$file" --backend=cuda \
      --sizes=$sizes --rtol=1e-4 || status=1
  done
done

echo "== lit: test/lit/cuda"
lit=$(command -v lit || echo "$root/.venv/bin/lit")
"$lit" -sv "$build/test/lit" --filter cuda || status=1

echo "== check.sh: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status
