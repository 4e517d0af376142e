"""Two-process gloo tests (test_ddp.py, test_fsdp.py): a worker script run
in a fresh interpreter on a free port, each rank's JSON report read back."""
import json
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_two_ranks(tmp_path, worker_source, *arguments):
    """Runs worker_source with `arguments`, a free port and a result path
    prefix; it must write `<prefix>.<rank>` for ranks 0 and 1. Returns the
    two reports."""
    script = tmp_path / "worker.py"
    script.write_text(worker_source)
    out = tmp_path / "result"
    result = subprocess.run(
        [sys.executable, str(script), *map(str, arguments), str(free_port()), str(out)],
        capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "DYNAFUSE_DISK_CACHE": "0"})
    assert result.returncode == 0, result.stderr[-12000:]
    return [json.loads((tmp_path / f"result.{rank}").read_text()) for rank in range(2)]
