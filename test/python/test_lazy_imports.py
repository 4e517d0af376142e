"""Imports a compiled frame makes (issue 41): a module not imported yet is
imported at capture, as the frame's run would import it, and the frame stays
one graph; relative imports resolve against the code's package; the import
machinery and the module bodies it runs are never captured frame by frame;
an import that raises falls back and raises as eager."""
import sys
import textwrap

import pytest
import torch

import dynafuse
from conftest import assert_compiled


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh package `lazypkg` with a helper module and a module whose
    functions import lazily (absolutely and relatively)."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helpers.py").write_text(textwrap.dedent("""
        import torch
        LOADS = []
        LOADS.append("helpers")

        def scale(x):
            return x * 3

        def build_table():
            # called by the module body: a capture of it would break at eval
            return {i: eval("i * i", {"i": i}) for i in range(50)}

        TABLE = build_table()
    """))
    (root / "user.py").write_text(textwrap.dedent("""
        import torch

        def absolute(x):
            y = x + 1
            from lazypkg.helpers import scale
            return scale(y).sin()

        def relative(x):
            from . import helpers
            from .helpers import scale
            return scale(x) + helpers.TABLE[3]

        def missing(x):
            import lazypkg.not_there
            return x
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in list(sys.modules):
        if name.startswith("lazypkg"):
            del sys.modules[name]


@pytest.mark.parametrize("name", ["absolute", "relative"])
def test_a_lazy_import_is_made_at_capture_and_the_frame_is_one_graph(package, name):
    import lazypkg.user as user
    assert "lazypkg.helpers" not in sys.modules
    function = getattr(user, name)
    x = torch.randn(4, 5)
    actual = dynafuse.compile(function, fullgraph=True)(x)
    assert "lazypkg.helpers" in sys.modules
    assert sys.modules["lazypkg.helpers"].LOADS == ["helpers"]  # imported once
    torch.testing.assert_close(actual, function(x))
    assert_compiled()
    # Later calls hit the entry: the import is guarded, not repeated.
    dynafuse.compile(function)(x)
    assert dynafuse.stats()["cache_hits"] == 1


def test_an_import_that_raises_falls_back_and_raises(package):
    import lazypkg.user as user
    with pytest.raises(ModuleNotFoundError):
        dynafuse.compile(user.missing)(torch.randn(2))
    assert any("lazypkg.not_there" in reason for reason in dynafuse._C.break_reasons())


def test_the_import_machinery_runs_unhooked(package):
    """An eager frame's import runs the module body and what it calls
    without the hook: nothing there is captured or counted (before, each
    function a lazy import ran was captured and broke)."""
    def f(x):
        try:
            y = x.sum().item()  # a break inside a try block: the frame runs eagerly
        except ValueError:
            y = 0.0
        import lazypkg.helpers  # noqa: F401
        return x + y

    x = torch.randn(3)
    torch.testing.assert_close(dynafuse.compile(f)(x), x + x.sum().item())
    assert "lazypkg.helpers" in sys.modules
    reasons = dynafuse._C.break_reasons()
    assert not any("build_table" in reason or "<frozen" in reason for reason in reasons), reasons
