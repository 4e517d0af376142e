"""The build refuses a CPython the frame hook and the bytecode tracer do not
support (before 3.11, from 3.14 on), naming it and the supported versions,
instead of building an extension that would misread frames. Runs CMake's
configure step against such an interpreter where the machine has one
(pyenv's, or pythonX.Y on PATH)."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def unsupported_interpreters():
    found = []
    for version in ("3.10", "3.14"):
        candidates = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
        on_path = shutil.which(f"python{version}")
        found += candidates[:1] or ([on_path] if on_path else [])
    return found


@pytest.mark.parametrize("python", unsupported_interpreters() or
                         [pytest.param(None, marks=pytest.mark.skip(
                             reason="no CPython before 3.11 or from 3.14 on this machine"))])
def test_configure_refuses_an_unsupported_cpython(python, tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake on PATH")
    result = subprocess.run(
        [cmake, "-S", ROOT, "-B", str(tmp_path), "-DDYNAFUSE_ENABLE_LLVM=OFF",
         "-DDYNAFUSE_ENABLE_CUDA=OFF", "-DDYNAFUSE_BUILD_TESTS=OFF",
         f"-DPython_EXECUTABLE={python}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stdout
    message = " ".join(result.stderr.split())
    assert "support CPython 3.11, 3.12 and 3.13" in message, message
    assert python in message, message
