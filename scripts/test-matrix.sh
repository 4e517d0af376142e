#!/usr/bin/env bash
# Builds Dynafuse against other CPython and torch releases and runs the full
# pytest suite on each, one virtual environment per interpreter:
#
#   scripts/test-matrix.sh               # 3.12 and 3.13
#   scripts/test-matrix.sh 3.12 3.13 3.11
#   scripts/test-matrix.sh 3.13+torch2.15  # another torch release, in its own
#                                          # .venv-3.13-torch2.15 (no torchvision)
#
# Interpreter: pyenv's (/root/.pyenv/versions/X.Y.*) or pythonX.Y on PATH.
# Virtual environment: .venv-X.Y (created, then reused; a fast no-op when
# its packages are there). Torch, from the package index (a CUDA build of a
# few GB the first time), by default:
#   3.11 -> torch 2.14.1 (what CI runs, through scripts/test.sh)
#   3.12 -> torch 2.11   (what the lent GPU machine has)
#   3.13 -> torch 2.14.1
# or set DYNAFUSE_TORCH_3_12="torch==2.15.* torchvision==0.30.*" (any
# release from 2.11 on). The extension builds into build-pyX.Y through
# `pip install -e .` (without the C++ tests: CI's build runs those). Prints one summary line per interpreter and exits
# non-zero when any build or test failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
versions=("$@")
((${#versions[@]})) || versions=(3.12 3.13)

default_torch() {
  case "$1" in
  3.12) echo "torch==2.11.* torchvision==0.26.*" ;;
  *) echo "torch==2.14.1 torchvision==0.29.1" ;;
  esac
}

find_python() {
  local version=$1 candidate
  for candidate in /root/.pyenv/versions/"$version".*/bin/python"$version"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  command -v "python$version" || true
}

summary=()
status=0
for entry in "${versions[@]}"; do
  version=${entry%%+*}
  echo "== CPython $entry"
  python=$(find_python "$version")
  if [ -z "$python" ]; then
    summary+=("$entry: no python$version found"); status=1; continue
  fi
  venv=$root/.venv-$version
  key=DYNAFUSE_TORCH_${version//./_}
  torch_spec=${!key:-$(default_torch "$version")}
  if [ "$entry" != "$version" ]; then # X.Y+torchA.B
    venv=$root/.venv-$version-${entry#*+}
    torch_spec="torch==${entry#*+torch}.*"
  fi
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" || {
    summary+=("$entry: cannot create $venv"); status=1; continue; }
  # Installs only what is missing or does not match the requested torch.
  if ! "$venv/bin/python" - "$torch_spec" <<'PY' 2>/dev/null; then
import sys, importlib.metadata as m
from packaging.requirements import Requirement
for spec in sys.argv[1].split():
    requirement = Requirement(spec)
    assert requirement.specifier.contains(m.version(requirement.name), prereleases=True)
for name in ("pytest", "scikit-build-core", "cmake", "ninja", "expecttest", "pybind11"):
    m.version(name)
PY
    echo "test-matrix: installing $torch_spec and the test tools into $venv"
    # shellcheck disable=SC2086 # the spec is a list of requirements
    "$venv/bin/pip" install -q $torch_spec pytest lit scikit-build-core cmake \
      ninja expecttest matplotlib pybind11 packaging || {
      summary+=("$entry: installing $torch_spec failed"); status=1; continue; }
  fi
  torch_version=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
  echo "test-matrix: CPython $version, torch $torch_version: pip install -e ."
  if ! PATH="$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation \
      --no-deps -e "$root" -Cbuild-dir="$root/build-py${entry/+/-}" \
      -Ccmake.define.DYNAFUSE_BUILD_TESTS=OFF; then
    summary+=("$entry (torch $torch_version): build FAILED"); status=1; continue
  fi
  log=$root/build-py${entry/+/-}/pytest.log
  (cd "$root/test/python" && "$venv/bin/python" -m pytest -q -p no:cacheprovider) 2>&1 |
    tee "$log" | tail -3
  pytest_status=${PIPESTATUS[0]}
  result=$(grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$log" | tail -1)
  if [ "$pytest_status" != 0 ] || ! grep -qE "passed" <<<"$result" ||
      grep -qE "[0-9]+ (failed|errors?)\b" <<<"$result"; then
    status=1
    summary+=("$entry (torch $torch_version): FAILED: ${result:-no summary}")
  else
    summary+=("$entry (torch $torch_version): ${result}")
  fi
done

echo "== test-matrix summary"
printf '  %s\n' "${summary[@]}"
exit $status
