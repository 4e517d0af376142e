"""Python ints that change between calls become size symbols (automatic
dynamic, as torch.compile's): an argument, an item of one, or an attribute
of a plain object reached from one (a static KV cache's length). Ints on
modules stay constants. Each test compares with eager on every value and
counts the captures that prove a symbolic graph served the new values."""
import pytest
import torch

import dynafuse
from conftest import assert_close


def stats():
    return dynafuse.stats()


def assert_all_close(got, want):
    for a, b in zip(got, want, strict=True):
        assert_close(a, b)


def padded(x, length):
    # A buffer of an argument's length made in the graph, filled in place.
    out = torch.zeros(x.shape[0], length, x.shape[1])
    out[:, : x.shape[0]] = 0  # a slice bounded by a size
    out = out + x.unsqueeze(1) * 2
    return out.sum(1) / length, out[:, length - 1]


def test_an_int_argument_that_changes_becomes_a_symbol(capfd):
    f = dynafuse.compile(padded)
    x = torch.randn(3, 5)
    lengths = [4, 6, 9, 13, 2, 31]
    for length in lengths:
        assert_all_close(f(x, length), padded(x, length))
    s = stats()
    assert s["captures"] == 2 and s["symbolic_captures"] == 1, s
    assert s["cache_hits"] == len(lengths) - 2, s
    # 0 and 1 are specialized, as sizes are.
    for length in (1, 1, 17):
        assert_all_close(f(x, length), padded(x, length))
    assert stats()["captures"] == 3


def test_the_int_symbol_is_guarded_by_type_and_range(capfd):
    f = dynafuse.compile(padded)
    x = torch.randn(2, 3)
    for length in (4, 5, 6):
        f(x, length)
    captures = stats()["captures"]
    assert captures == 2
    # A bool or a float where the int was is not the int's entry.
    with pytest.raises(Exception):
        padded(x, 2.5)
    assert_all_close(f(x, True), padded(x, True))
    assert stats()["captures"] == captures + 1


class StaticCache:
    # The shape of transformers' StaticLayer: a length set per request and
    # a buffer made lazily at that length.
    def __init__(self, length):
        self.length = length
        self.keys = None


def step(x, cache):
    if cache.keys is None:
        cache.keys = torch.zeros(x.shape[0], cache.length)
    cache.keys[:, : x.shape[1]] = x
    return cache.keys.sum(1), cache.keys * 3


def test_an_attribute_of_a_plain_object_is_a_symbol():
    f = dynafuse.compile(step)
    for length in (8, 12, 20, 9, 40):
        x = torch.randn(2, 5)
        got, want = StaticCache(length), StaticCache(length)
        assert_all_close(f(x, got), step(x, want))
        assert torch.equal(got.keys, want.keys)
    s = stats()
    assert s["captures"] == 2 and s["symbolic_captures"] == 1, s


class Scaled(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width

    def forward(self, x):
        return torch.zeros(x.shape[0], self.width) + x[:, :1]


def test_ints_on_modules_stay_constants(capfd):
    m = Scaled(4)
    f = dynafuse.compile(m)
    x = torch.randn(3, 6)
    for width in (4, 5, 7):
        m.width = width
        assert_close(f(x), m(x))
    # one static graph per width: module ints are the program's, not the
    # call's
    assert stats()["captures"] == 3 and stats()["symbolic_captures"] == 0


def reduce_over(x, dim):
    return x.sum(dim) * 2


def test_an_int_an_op_needs_constant_is_specialized(capfd):
    f = dynafuse.compile(reduce_over)
    for dim, rows in ((0, 3), (1, 5), (2, 7), (1, 4)):
        x = torch.randn(rows, 6, 4)
        assert_close(f(x, dim), reduce_over(x, dim))
    s = stats()
    assert s["graph_breaks"] == 0 and s["eager_frames"] == 0, s
    # The tensor's changing dim stays symbolic once the int is a constant.
    assert s["symbolic_captures"] >= 1, s


def repeat_rows(x, times):
    return (x.repeat(times, 1) * torch.arange(times * x.shape[0]).unsqueeze(1)).sum()


def test_gradients_through_an_int_symbol():
    f = dynafuse.compile(repeat_rows)
    for times in (2, 3, 5, 7):
        x = torch.randn(4, 3, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        got, want = f(x, times), repeat_rows(y, times)
        got.backward()
        want.backward()
        assert_close(got, want)
        assert_close(x.grad, y.grad)
    s = stats()
    assert s["captures"] == 2 and s["symbolic_captures"] == 1, s


def loop_count(x, n):
    for _ in range(n):
        x = x * 2 + 1
    return x


def test_an_int_in_range_keeps_the_static_path():
    f = dynafuse.compile(loop_count)
    for n in (2, 3, 4):
        x = torch.randn(5)
        assert_close(f(x, n), loop_count(x, n))
    assert stats()["graph_breaks"] == 0 and stats()["eager_frames"] == 0


TABLE = [torch.randn(4) for _ in range(6)]


def scaled_window(x, length, row):
    # `length` stays a size; `row` indexes a Python list, which needs its
    # value: that one int is specialized (guarded == its value).
    out = torch.zeros(length, x.shape[0]) + x * TABLE[row]
    return out[: length - 1].sum(0) / length


def test_an_int_a_list_index_needs_is_specialized_alone(capfd):
    f = dynafuse.compile(scaled_window)
    calls = [(length, 2 + length % 2) for length in (4, 5, 6, 7, 9, 12, 15, 20, 31)]
    for length, row in calls:
        x = torch.randn(4)
        assert_close(f(x, length, row), scaled_window(x, length, row))
    s = stats()
    # The first call's constants, then one symbolic entry per row value:
    # every later length is served by them.
    assert s["captures"] == 3 and s["symbolic_captures"] == 2, s
    assert s["cache_hits"] == len(calls) - s["captures"], s
    assert s["settled_frames"] == 0 and s["eager_frames"] == 0, s


def reduce_by_parity(x, n):
    return x.sum(n % 2) * n


def test_a_size_expression_an_op_needs_constant_is_guarded_as_an_expression():
    f = dynafuse.compile(reduce_by_parity)
    for n in range(2, 14):
        x = torch.randn(3, 5)
        assert_close(f(x, n), reduce_by_parity(x, n))
    s = stats()
    # n == 2 (constant), then `n % 2 == 1` and `n % 2 == 0` entries with
    # n a symbol: the values after them all hit.
    assert s["captures"] == 3 and s["symbolic_captures"] == 2, s
    assert s["cache_hits"] == 12 - 3, s


def float_of(x, n):
    return x[:n] * (n / 2) + len(range(n))


def test_an_int_needed_as_its_value_on_every_call_settles(capfd):
    f = dynafuse.compile(float_of)
    values = list(range(2, 12))
    for n in values:
        x = torch.randn(16, 3)
        assert_close(f(x, n), float_of(x, n))
    s = stats()
    # Specialized anew per value: after three calls that missed in a row
    # the code runs eagerly (not a capture per call up to the limit).
    assert s["captures"] == 3 and s["settled_frames"] == 1, s
    assert s["recompile_limit_hits"] == 0, s
