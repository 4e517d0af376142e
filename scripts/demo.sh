#!/usr/bin/env bash
# Builds Dynafuse and runs the demo: compile a torchvision ResNet-18 and a
# GPT-2 block, check them against eager, time them beside eager and
# torch.compile (also through torch.compile(backend="dynafuse")), with cold
# compile times, and dump every kernel (benchmarks/demo.py --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DYNAFUSE_VENV:-$root/.venv}
"$root/scripts/setup.sh"
exec "$venv/bin/python" "$root/benchmarks/demo.py" "$@"
