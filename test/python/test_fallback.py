"""Fallbacks: a graph break compiles what comes before it and resumes after
it (callees still compile), breaks that cannot resume run the frame eagerly,
fullgraph raises with the user's file:line, user exceptions are eager's
own."""
import subprocess
import sys
import traceback

import pytest
import torch

import dynafuse
from conftest import assert_close, assert_compiled


def inner(x):
    return torch.sigmoid(x) * x


def outer(x):
    y = x[torch.nonzero(x > 0, as_tuple=True)]  # data-dependent shape: a break
    return inner(y)


def test_graph_break_resumes_and_the_rest_compiles():
    x = torch.randn(4, 4)
    f = dynafuse.compile(outer)
    assert_close(f(x), outer(x))
    stats = dynafuse.stats()
    # x > 0 before the break, x[...] and the inlined inner() after it.
    assert stats["graph_breaks"] == 1 and stats["captures"] == 2, stats
    assert stats["eager_frames"] == 0, stats
    assert_close(f(x), outer(x))
    assert dynafuse.stats()["cache_hits"] == 2


def test_fullgraph_names_construct_and_line():
    f = dynafuse.compile(outer, fullgraph=True)
    with pytest.raises(dynafuse.Unsupported) as info:
        f(torch.randn(3, 3))
    message = str(info.value)
    assert "nonzero" in message, message
    assert f"test_fallback.py:{outer.__code__.co_firstlineno + 1}" in message, message


@pytest.mark.parametrize("body", [
    lambda x: float(x.sum().item()) * x,
    lambda x: x if x.sum() > 0 else -x,
    lambda x: print("hello") or x + 1,
], ids=["item", "data_dependent_branch", "print"])
def test_unsupported_constructs_fall_back(body):
    x = torch.randn(5)
    assert_close(dynafuse.compile(body)(x), body(x))
    assert dynafuse.stats()["graph_breaks"] == 1


@pytest.mark.parametrize("dtype", [torch.uint8, torch.complex64, torch.int8])
def test_unsupported_dtype_falls_back(dtype):
    x = torch.ones(4, dtype=dtype) * 3
    f = dynafuse.compile(lambda t: t * 2 + 1)
    assert_close(f(x), x * 2 + 1)
    assert dynafuse.stats()["graph_breaks"] == 1


def test_user_exception_is_eagers_own():
    def bad(x, y):
        return x + y  # shapes do not broadcast

    f = dynafuse.compile(bad)
    with pytest.raises(RuntimeError) as compiled_error:
        f(torch.randn(3), torch.randn(4))
    with pytest.raises(RuntimeError) as eager_error:
        bad(torch.randn(3), torch.randn(4))
    assert str(compiled_error.value) == str(eager_error.value)
    frames = traceback.extract_tb(compiled_error.tb)
    assert any(frame.name == "bad" for frame in frames)


def test_graph_break_reason_logged_once():
    code = (
        "import torch, dynafuse\n"
        "f = dynafuse.compile(lambda x: x.numpy() is None or x + 1)\n"
        "for _ in range(3): f(torch.randn(2))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"DYNAFUSE_LOG": "graph_breaks", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "graph break" in line]
    assert len(lines) == 1 and "Tensor.numpy" in lines[0] and "<string>:2" in lines[0], result.stderr


def test_inplace_operator_on_an_input_has_eager_semantics():
    """Compiled (the update is written back to the input), not a fallback."""
    def f(x):
        x += 1
        return x * 2

    x = torch.randn(3)
    expected = x.clone()
    expected += 1
    out = dynafuse.compile(f)(x)
    assert_close(x, expected)
    assert_close(out, expected * 2)
    assert_compiled()


# ---- never eager for good: a break or failure keys on the call's guards ----

def test_a_break_under_grad_mode_does_not_stop_capture_without_it():
    weight = torch.randn(6, requires_grad=True)

    def f(x):
        return torch.histc(torch.tanh(x * weight), bins=5) + torch.tanh(x * weight).sum()

    compiled = dynafuse.compile(f, options={"resume_after_breaks": False})
    x = torch.randn(4, 6)
    for _ in range(2):  # histc of a tensor that requires grad: no gradient
        out = compiled(x)
        assert out.requires_grad
        assert_close(out, f(x))
    stats = dynafuse.stats()
    # One break: the second call met the negative entry, not a new capture.
    assert stats["graph_breaks"] == 1 and stats["eager_frames"] == 2, stats
    assert "no gradient" in dynafuse._C.break_reasons()[0]
    with torch.no_grad():
        assert_close(compiled(x), f(x))
        assert_close(compiled(x), f(x))
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["cache_hits"] == 1, stats
    assert stats["graph_breaks"] == 1, stats
    assert len(dynafuse.compiled_graphs()) == 1


def shape_dependent(x):
    if x.dim() == 3:
        return x[x > 0].sum() * x  # a mask: data-dependent shape, a break
    return torch.sigmoid(x) * 2


def test_a_break_for_one_kind_of_input_leaves_the_others_whole():
    f = dynafuse.compile(shape_dependent)
    x3, x2 = torch.randn(2, 3, 4), torch.randn(5, 4)
    assert_close(f(x3), shape_dependent(x3))
    assert_close(f(x2), shape_dependent(x2))
    assert_close(f(x3), shape_dependent(x3))
    assert_close(f(x2), shape_dependent(x2))
    stats = dynafuse.stats()
    # 3-d: a graph up to the mask and one after it; 2-d: one whole graph.
    assert stats["captures"] == 3 and stats["graph_breaks"] == 1, stats
    assert stats["cache_hits"] == 3 and stats["eager_frames"] == 0, stats
    before, after, whole = dynafuse.compiled_graphs()
    assert "resumed" not in whole["name"] and "resumed_at_line" in after["name"]
    assert any("size [5, 4]" in guard for guard in whole["guards"]), whole["guards"]


def test_fullgraph_raises_from_an_entry_that_resumes_and_a_negative_one():
    body = lambda x: x if x.sum() > 0 else -x  # noqa: E731
    x = torch.randn(5)
    assert_close(dynafuse.compile(body)(x), body(x))
    with pytest.raises(dynafuse.Unsupported, match="data-dependent branch"):
        dynafuse.compile(body, fullgraph=True)(x)
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 1 and stats["eager_frames"] == 0, stats  # no recapture

    def loops(x):  # a break inside a loop cannot resume: a negative entry
        for _ in range(2):
            x = x + 1 if x.sum() > 0 else x - 1
        return x

    assert_close(dynafuse.compile(loops)(x), loops(x))
    with pytest.raises(dynafuse.Unsupported, match="data-dependent branch"):
        dynafuse.compile(loops, fullgraph=True)(x)
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 2 and stats["eager_frames"] == 1, stats


def test_a_failing_run_raises_eagers_error_and_keeps_the_entry():
    def f(t, i):
        return torch.gather(t, 1, i) + 1

    compiled = dynafuse.compile(f)
    x = torch.randn(3, 4)
    good, bad = torch.tensor([[0, 3], [1, 2], [3, 3]]), torch.tensor([[0, 9], [1, 2], [3, 3]])
    assert_close(compiled(x, good), f(x, good))
    assert_compiled()
    with pytest.raises(RuntimeError) as compiled_error:
        compiled(x, bad)
    with pytest.raises(RuntimeError) as eager_error:
        f(x, bad)
    assert str(compiled_error.value) == str(eager_error.value)
    assert dynafuse.stats()["run_failures"] == 1
    # The entry stays for inputs that work.
    assert_close(compiled(x, good), f(x, good))
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["cache_hits"] == 2, stats
