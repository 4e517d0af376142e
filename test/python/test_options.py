"""Options: every DYNAFUSE_* variable is read once, at import, by the core;
dynafuse.config starts from it; the variables are documented in one table,
the same in README.md, config.py and the core."""
import os
import re
import subprocess
import sys

import pytest
import torch

import dynafuse

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def run_python(code, **env):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", **env})
    assert result.returncode == 0, result.stderr
    return result


def test_config_starts_from_the_environment(tmp_path):
    result = run_python(
        "import dynafuse; c = dynafuse.config\n"
        "print(c.dump_dir, c.recompile_limit, c.log)",
        DYNAFUSE_DUMP_DIR=str(tmp_path), DYNAFUSE_RECOMPILE_LIMIT="3",
        DYNAFUSE_LOG="compile")
    assert result.stdout.split() == [str(tmp_path), "3", "compile"]


def test_defaults_without_variables():
    result = run_python("import dynafuse; c = dynafuse.config\n"
                        "print(repr(c.dump_dir), c.recompile_limit, repr(c.log))")
    assert result.stdout.split() == ["''", "8", "''"]


def test_malformed_recompile_limit_keeps_the_default():
    result = run_python("import dynafuse; print(dynafuse.config.recompile_limit)",
                        DYNAFUSE_RECOMPILE_LIMIT="many")
    assert result.stdout.split() == ["8"]


def test_log_variable_reaches_the_core():
    result = run_python(
        "import torch, dynafuse\n"
        "dynafuse.compile(lambda x: x + 1)(torch.randn(3))\n",
        DYNAFUSE_LOG="compile")
    assert "[dynafuse:compile] compiled" in result.stderr, result.stderr


def documented(path, pattern):
    with open(path) as file:
        return sorted(set(re.findall(pattern, file.read(), re.M)))


def test_every_variable_is_documented_once_everywhere():
    names = sorted(name for name, _, _ in dynafuse.config.variables())
    assert len(names) == len(set(names)) and all(n.startswith("DYNAFUSE_") for n in names)
    readme = documented(os.path.join(ROOT, "README.md"), r"^\| `(DYNAFUSE_[A-Z_]+)`")
    config = documented(dynafuse.config.__file__, r"^(DYNAFUSE_[A-Z_]+) ")
    assert readme == names
    assert config == names


def test_defaults_agree_with_the_readme():
    with open(os.path.join(ROOT, "README.md")) as file:
        rows = dict(re.findall(r"^\| `(DYNAFUSE_[A-Z_]+)` \| ([^|]+) \|", file.read(), re.M))
    for name, default, _ in dynafuse.config.variables():
        cell = rows[name].strip()
        if default.startswith("$"):
            continue  # the cache folder's default is a path, written out in words
        assert cell == (f"`{default}`" if default else "(none)"), (name, cell, default)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError):
        dynafuse.compile(lambda x: x, backend="tpu")


def test_backend_choices_come_from_the_core():
    assert set(dynafuse._C.backend_choices()) == {"auto", "cpu", "llvm", "interp", "cuda", "mlir"}
    f = dynafuse.compile(lambda x: x * 2, backend="interp")
    x = torch.randn(4)
    assert torch.equal(f(x), x * 2)
    assert dynafuse.stats()["captures"] == 1
