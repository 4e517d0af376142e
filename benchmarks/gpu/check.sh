#!/usr/bin/env bash
# GPU check of the CUDA backend, for a machine with an NVIDIA GPU:
#   0. first, Python end to end: builds the extension (CUDA on, LLVM off)
#      against the machine's python3 and its torch (any CPython 3.11-3.13,
#      torch 2.11 on; the lent machine has 3.12 and torch 2.11) and runs the
#      GPU pytest modules: CUDA tensors captured, guarded by device and run
#      with backend "auto" and "cuda" (test_backends.py, test_cuda_models.py:
#      an MLP, a conv net, an attention block, resnet18), and
#      test_capture_devices.py; then times whole models (ResNet-18,
#      MobileNetV2, ViT-B/16, a GPT-2 block, an MLP) in eager torch,
#      Dynafuse's cuda backend and torch.compile (benchmarks/gpu/models.py,
#      a report: it does not fail the check);
# then builds the CUDA path without LLVM and Python, and
#   1. runs the CUDA GoogleTests (device runs compared with the interpreter;
#      here a missing device is an error, not a skip),
#   2. runs every module of benchmarks/gpu/suite with dynafuse-run
#      --backend=cuda against the interpreter,
#   3. runs the lit tests under test/lit/cuda,
#   4. benchmarks the fused memory-bound kernels of benchmarks/gpu/bench
#      (gelu chain, softmax and layer_norm over rows of 1024 to 8192) with
#      dynafuse-run --bench against a device-to-device copy, and, where
#      torch with CUDA is importable, the same computations in eager torch
#      and torch.compile (benchmarks/gpu/torch_bandwidth.py). Benchmarks
#      report; they do not fail the check.
# Needs cmake, ninja, a C++17 compiler (C++20 for the extension), pytest
# and torch with CUDA for python3 ($DYNAFUSE_PYTHON), cuda.h (CUDA_HOME or
# /usr/local/cuda*) and NVRTC 13 (DYNAFUSE_NVRTC=/path/libnvrtc.so.13, the
# nvidia-cuda-nvrtc package beside python3's torch, or found by CMake);
# GoogleTest and lit where present. Exit status 0 only when everything that
# ran passed.
#
# The lent GPU machine has no GoogleTest, FileCheck or lit. Where this
# machine has GoogleTest (Debian's libgtest-dev),
#   benchmarks/gpu/check.sh --carry-gtest   # here: headers, static libraries
#                                           # and CMake config (1.5 MB) into
#                                           # benchmarks/gpu/carry (ignored)
# and carry that folder along: the GoogleTests then build and run there
# (found through CMAKE_PREFIX_PATH), without the lit tier
# (DYNAFUSE_LIT_TESTS=OFF where FileCheck or lit is missing).
#
# A GPU machine without NVRTC runs cubins prepared on a machine with it:
#   benchmarks/gpu/check.sh --prepare   # here: sm_90 cubins of every test
#                                       # kernel and suite module into
#                                       # benchmarks/gpu/prepared-cache
#   benchmarks/gpu/check.sh             # there, with that directory carried
#
#   benchmarks/gpu/check.sh [--prepare | --python] [BUILD_DIR]   (default: build-gpu)
#   (--python: only step 0, the Python end-to-end part)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prepare=0
python_only=0
carry=$root/benchmarks/gpu/carry
if [ "${1:-}" = "--carry-gtest" ]; then
  # The /usr layout under $carry: GTest's CMake config finds its headers
  # and libraries relative to itself.
  libdir=lib/x86_64-linux-gnu
  [ -e /usr/include/gtest/gtest.h ] && [ -e /usr/$libdir/cmake/GTest ] ||
    { echo "check.sh: no GoogleTest in /usr (apt-get install libgtest-dev)"; exit 1; }
  rm -rf "$carry" && mkdir -p "$carry/include" "$carry/$libdir/cmake"
  cp -r /usr/include/gtest "$carry/include/" &&
    cp /usr/$libdir/libgtest*.a "$carry/$libdir/" &&
    cp -r /usr/$libdir/cmake/GTest "$carry/$libdir/cmake/" || exit 1
  du -sh "$carry"
  exit 0
fi
if [ "${1:-}" = "--prepare" ]; then prepare=1; shift; fi
if [ "${1:-}" = "--python" ]; then python_only=1; shift; fi
build=${1:-$root/build-gpu}
arch=${DYNAFUSE_CUDA_ARCH:-sm_90}
jobs=${DYNAFUSE_JOBS:-$(nproc)}
status=0

if [ -z "${DYNAFUSE_NVRTC:-}" ]; then
  for candidate in "$root"/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13 \
      /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda-13*/lib64/libnvrtc.so.13; do
    if [ -e "$candidate" ]; then export DYNAFUSE_NVRTC=$candidate; break; fi
  done
fi
echo "== NVRTC: ${DYNAFUSE_NVRTC:-libnvrtc.so.13 from the library path}"
# The prepared cubins (and everything compiled here) live in one cache.
export DYNAFUSE_CACHE_DIR=${DYNAFUSE_CACHE_DIR:-$root/benchmarks/gpu/prepared-cache}
mkdir -p "$DYNAFUSE_CACHE_DIR"

if [ $prepare = 0 ]; then
  python=${DYNAFUSE_PYTHON:-$(command -v python3 || command -v python)}
  # NVRTC from the pip package torch's CUDA build installs, when no other.
  if [ -z "${DYNAFUSE_NVRTC:-}" ]; then
    DYNAFUSE_NVRTC=$("$python" - <<'PY' 2>/dev/null
import glob, os, sys
for entry in sys.path:
    for found in glob.glob(os.path.join(entry, "nvidia", "*", "lib", "libnvrtc.so.1[0-9]")):
        print(found); raise SystemExit
PY
)
    [ -n "$DYNAFUSE_NVRTC" ] && export DYNAFUSE_NVRTC && echo "== NVRTC: $DYNAFUSE_NVRTC"
  fi
  echo "== Python end to end: the extension against $("$python" -c 'import sys, torch; print(f"CPython {sys.version.split()[0]}, torch {torch.__version__}")')"
  pybuild=$build-python
  stage=$pybuild/stage
  if cmake -S "$root" -B "$pybuild" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DDYNAFUSE_ENABLE_LLVM=OFF -DDYNAFUSE_ENABLE_PYTHON=ON \
        -DDYNAFUSE_ENABLE_CUDA=ON -DDYNAFUSE_BUILD_TESTS=OFF \
        -DPython_EXECUTABLE="$python" >/dev/null &&
      cmake --build "$pybuild" -j "$jobs" --target _C; then
    rm -rf "$stage" && mkdir -p "$stage"
    cp -r "$root/python/dynafuse" "$stage/"
    cp "$pybuild"/python/_C*.so "$stage/dynafuse/"
    # The GPU tests skip without a device: here that is a failure.
    "$python" -c "import torch; assert torch.cuda.is_available()" ||
      { echo "check.sh: torch sees no CUDA device"; status=1; }
    (cd "$root/test/python" && PYTHONPATH="$stage" timeout 400 "$python" -m pytest -q \
      -p no:cacheprovider test_backends.py test_cuda_models.py \
      test_capture_devices.py -rs) || status=1
    echo "== whole models: eager, Dynafuse (cuda) and torch.compile (benchmarks/gpu/models.py)"
    PYTHONPATH="$stage" timeout 420 "$python" "$root/benchmarks/gpu/models.py" ||
      echo "models.py: a model failed, or it did not finish"
  else
    echo "check.sh: building the Python extension failed"; status=1
  fi
  if [ $python_only = 1 ]; then
    echo "== check.sh (Python part): $([ $status = 0 ] && echo PASSED || echo FAILED)"
    exit $status
  fi
fi

# GoogleTest and lit/FileCheck may be missing on a GPU machine (the lent one
# has neither): their steps are then reported as not run, and the device is
# checked by the runner over the suite and by the Python tests above.
have_gtest=OFF
for header in /usr/include/gtest/gtest.h /usr/local/include/gtest/gtest.h \
    "$carry/include/gtest/gtest.h"; do
  [ -e "$header" ] && have_gtest=ON
done
lit=$(command -v lit || echo "$root/.venv/bin/lit")
have_lit=OFF
if command -v FileCheck >/dev/null || [ -x /usr/lib/llvm-16/bin/FileCheck ]; then
  [ -x "$lit" ] && have_lit=ON
fi
echo "== configure and build (CUDA on, LLVM and Python off; GoogleTest $have_gtest, lit $have_lit)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDYNAFUSE_ENABLE_LLVM=OFF -DDYNAFUSE_ENABLE_PYTHON=OFF \
  -DDYNAFUSE_BUILD_TESTS=$have_gtest -DDYNAFUSE_LIT_TESTS=$have_lit \
  -DCMAKE_PREFIX_PATH="$carry" \
  -DDYNAFUSE_ENABLE_CUDA=ON >/dev/null || { echo "== check.sh: FAILED"; exit 1; }
cmake --build "$build" -j "$jobs" || { echo "== check.sh: FAILED"; exit 1; }

if [ $prepare = 1 ]; then
  echo "== prepare $arch cubins into $DYNAFUSE_CACHE_DIR"
  "$build/test/dynafuse-unittests" --gtest_filter='NVRTC*' | tail -3
  for file in "$root"/benchmarks/gpu/suite/*.graph "$root"/benchmarks/gpu/suite/*.loop \
      "$root"/benchmarks/gpu/bench/*.graph; do
    [ -e "$file" ] || continue
    "$build/tools/dynafuse-run/dynafuse-run" "$file" --prepare=$arch || status=1
  done
  du -sh "$DYNAFUSE_CACHE_DIR"
  exit $status
fi

command -v nvidia-smi >/dev/null && nvidia-smi -L

echo "== GoogleTest: CUDA*, NVRTC*"
if [ $have_gtest = ON ]; then
  out=$("$build/test/dynafuse-unittests" --gtest_filter='CUDA*:NVRTC*' 2>&1)
  echo "$out" | tail -25
  if echo "$out" | grep -q "FAILED"; then status=1; fi
  # NVRTC* may skip (no NVRTC here); a skipped device run is a failure.
  if echo "$out" | grep -q "SKIPPED \] CUDABackend"; then
    echo "check.sh: device tests were skipped (no device, or no NVRTC and no prepared cubins)"; status=1
  fi
else
  echo "not run: no GoogleTest on this machine"
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
if [ $have_gtest = ON ] && [ $have_lit = ON ]; then
  "$lit" -sv "$build/test/lit" --filter cuda || status=1
else
  echo "not run: no lit (or no test build) on this machine"
fi

echo "== bandwidth: Dynafuse's kernels (dynafuse-run --bench)"
for file in "$root"/benchmarks/gpu/bench/*.graph; do
  "$build/tools/dynafuse-run/dynafuse-run" "$file" --backend=cuda --bench=50
done
echo "== bandwidth: eager torch and torch.compile"
python=$(command -v python3 || command -v python)
timeout 300 "$python" "$root/benchmarks/gpu/torch_bandwidth.py" --iterations 50 ||
  echo "torch_bandwidth.py did not finish (timeout or error)"

echo "== check.sh: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status
