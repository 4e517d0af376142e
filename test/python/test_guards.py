"""Guards, the cache on the code object, recompiles and the recompile limit."""
import torch

import dynafuse
from conftest import assert_close

SCALE = 2.0


def scaled(x):
    return torch.tanh(x) * SCALE


def test_second_call_hits_the_cache():
    f = dynafuse.compile(lambda x, y: x * y + 1)
    x, y = torch.randn(8, 3), torch.randn(3)
    f(x, y)
    assert_close(f(x, y), x * y + 1)
    assert_close(f(torch.randn(8, 3), torch.randn(3)).shape and f(x, y), x * y + 1)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["cache_hits"] == 3, stats


def test_new_shape_dtype_or_strides_recompile():
    f = dynafuse.compile(lambda x: x.sigmoid() - x)
    inputs = [torch.randn(4, 5), torch.randn(6, 5), torch.randn(4, 5).double(),
              torch.randn(5, 4).t()]
    for x in inputs:
        assert_close(f(x), x.sigmoid() - x)
    assert dynafuse.stats()["captures"] == len(inputs)
    for x in inputs:
        assert_close(f(x), x.sigmoid() - x)
    stats = dynafuse.stats()
    assert stats["captures"] == len(inputs) and stats["cache_hits"] == len(inputs), stats


def test_global_value_is_guarded():
    global SCALE
    f = dynafuse.compile(scaled)
    x = torch.randn(10)
    try:
        assert_close(f(x), torch.tanh(x) * 2.0)
        SCALE = 3.0
        assert_close(f(x), torch.tanh(x) * 3.0)
    finally:
        SCALE = 2.0
    assert dynafuse.stats()["captures"] == 2


def test_constant_argument_is_guarded():
    f = dynafuse.compile(lambda x, alpha: x * alpha)
    x = torch.randn(5)
    assert_close(f(x, 2), x * 2)
    assert_close(f(x, 3), x * 3)
    assert_close(f(x, 2.5), x * 2.5)
    assert dynafuse.stats()["captures"] == 3


def test_requires_grad_runs_eagerly_until_training_is_supported():
    f = dynafuse.compile(lambda x: torch.exp(x) * 2)
    x = torch.randn(4, requires_grad=True)
    out = f(x)
    assert out.requires_grad
    out.sum().backward()
    assert_close(x.grad, torch.exp(x.detach()) * 2)
    assert dynafuse.stats()["captures"] == 0
    with torch.no_grad():
        assert_close(f(x), torch.exp(x) * 2)
    assert dynafuse.stats()["graph_breaks"] == 1


def test_grad_mode_is_guarded():
    f = dynafuse.compile(lambda x: x + 1)
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        assert not f(x).requires_grad
    assert dynafuse.stats()["captures"] == 1
    out = f(x)
    assert out.requires_grad


def test_recompile_limit_then_eager():
    dynafuse.config.recompile_limit = 2
    f = dynafuse.compile(lambda x: x * 3)
    for n in range(1, 6):
        x = torch.randn(n)
        assert_close(f(x), x * 3)
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["recompile_limit_hits"] == 1, stats


def test_recompile_log_names_the_failed_guard(capfd):
    dynafuse.config.log = "recompiles"
    f = dynafuse.compile(lambda x: x - 1)
    f(torch.randn(2, 2))
    f(torch.randn(3, 2))
    err = capfd.readouterr().err
    assert "guard failed" in err and "size [2, 2]" in err, err


def test_hook_is_inactive_outside_compiled_calls():
    f = dynafuse.compile(lambda x: x + 1)
    f(torch.randn(2))

    def plain(x):
        return x * 2

    before = dynafuse.stats()
    plain(torch.randn(2))
    assert dynafuse.stats() == before


def test_backend_is_part_of_the_cache_key():
    def f(x):
        return x.exp() + 1

    x = torch.randn(5)
    dynafuse.compile(f, backend="llvm")(x)
    assert_close(dynafuse.compile(f, backend="interp")(x), f(x))
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["cache_hits"] == 0, stats


OFFSET = 2.0


def test_globals_read_in_a_comprehension_of_the_frame_are_guarded():
    # The generator body is code made during capture and inlined from the
    # frame itself: its globals are the frame's (this used to build a guard
    # source with no parent and crash on the first cache hit).
    def f(x):
        return x * sum(abs(v) + OFFSET for v in (1, -2))

    compiled = dynafuse.compile(f, fullgraph=True)
    x = torch.randn(3)
    assert_close(compiled(x), f(x))
    assert_close(compiled(x), f(x))
    assert dynafuse.stats()["cache_hits"] == 1
    global OFFSET
    OFFSET = 3.0
    try:
        assert_close(compiled(x), f(x))
        assert dynafuse.stats()["captures"] == 2
    finally:
        OFFSET = 2.0
