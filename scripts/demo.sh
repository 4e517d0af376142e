#!/usr/bin/env bash
# Builds Dynafuse and runs the demo: compile gelu(x * w + b), check it against
# eager, time it beside eager and torch.compile, dump every stage's text.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DYNAFUSE_VENV:-$root/.venv}
"$root/scripts/setup.sh"
exec "$venv/bin/python" "$root/benchmarks/demo.py" "$@"
