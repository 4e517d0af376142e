"""Options: every DYNAFUSE_* variable is read once, at import, by the core;
dynafuse.config starts from it; the variables are listed once (Settings.def)
and README.md's table is the one the core's list makes."""
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


def test_every_variable_is_listed_once():
    names = [name for name, _, _ in dynafuse.config.variables()]
    assert len(names) == len(set(names)) and all(n.startswith("DYNAFUSE_") for n in names)
    assert len(names) >= 21


def test_readme_holds_the_table_the_core_lists():
    with open(os.path.join(ROOT, "README.md")) as file:
        readme = file.read()
    table = dynafuse.config.markdown_table()
    assert table in readme, "README.md's Settings table differs from dynafuse.config.markdown_table()"
    for name, default, _ in dynafuse.config.variables():
        assert f"| `{name}` |" in table


def test_run_time_settings_are_the_ones_the_core_names():
    python_names = [row[3] for row in dynafuse._C.option_variables() if row[3]]
    assert sorted(python_names) == sorted(dynafuse.config.SETTINGS)
    assert set(dynafuse.config.SETTINGS) == {"dump_dir", "recompile_limit", "log",
                                             "resume_after_breaks",
                                             "automatic_dynamic_shapes"}
    for name in dynafuse.config.SETTINGS:
        assert hasattr(dynafuse.config, name)


def test_settings_cross_to_the_core_by_name():
    settings = dynafuse._C.environment_options()
    with pytest.raises(KeyError, match="recompile_limit"):
        dynafuse._C.compiler_config({k: v for k, v in settings.items() if k != "recompile_limit"})
    with pytest.raises(TypeError, match="resume_after_breaks"):
        dynafuse._C.compiler_config(dict(settings, resume_after_breaks=1))
    with pytest.raises(ValueError, match="recompile_limit"):
        dynafuse._C.compiler_config(dict(settings, recompile_limit=-1))
    first = dynafuse._C.compiler_config(dict(settings, recompile_limit=3))
    assert first is not None


def test_a_changed_setting_reaches_the_core(tmp_path):
    result = run_python(
        "import torch, dynafuse\n"
        f"dynafuse.config.dump_dir = {str(tmp_path)!r}\n"
        "dynafuse.compile(lambda x: x.sin() + 1)(torch.randn(3))\n")
    assert any(path.name == "kernels.loop" for path in tmp_path.rglob("*")), result.stderr


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError):
        dynafuse.compile(lambda x: x, backend="tpu")


def test_backend_choices_come_from_the_core():
    assert set(dynafuse._C.backend_choices()) == {"auto", "cpu", "llvm", "interp", "cuda", "mlir"}
    f = dynafuse.compile(lambda x: x * 2, backend="interp")
    x = torch.randn(4)
    assert torch.equal(f(x), x * 2)
    assert dynafuse.stats()["captures"] == 1


def test_attributes_take_values_of_their_kind_as_before():
    """An attribute set to 0/1 for a switch, a float for a count or None for
    a text reaches the core converted (compile(options=...) stays strict)."""
    dynafuse.config.recompile_limit = 1.0
    dynafuse.config.resume_after_breaks = 1
    dynafuse.config.log = None
    f = dynafuse.compile(lambda x: x + 1, dynamic=False)
    for size in (2, 3, 4):
        assert torch.equal(f(torch.ones(size)), torch.ones(size) + 1)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["recompile_limit_hits"] >= 1, stats
