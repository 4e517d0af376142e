"""torch's associative_scan (a higher-order op; transformers' Mamba models
scan their state with it when compiled) is traced through
dynafuse.polyfills.associative_scan: a chain of the combine function's
calls on one element at a time, stacked. Each test compares with eager's
own associative_scan on random data and checks the scan ran compiled, in
one graph."""
import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import dynafuse
from conftest import assert_close


def linear_recurrence(left, right):
    # h_t = a_t * h_{t-1} + b_t, as selective state spaces scan it.
    return left[0] * right[0], right[0] * left[1] + right[1]


def state_scan(a, b, c):
    _, states = associative_scan(linear_recurrence, (a, b), dim=2, combine_mode="generic")
    return torch.matmul(states.transpose(1, 2), c.unsqueeze(-1)).squeeze(-1)


def assert_one_graph():
    s = dynafuse.stats()
    assert s["captures"] == 1 and s["graph_breaks"] == 0 and s["eager_frames"] == 0, s


@pytest.mark.parametrize("length", [1, 2, 7, 64])
def test_a_linear_recurrence_scanned_over_a_tuple(length):
    a = torch.rand(2, 6, length, 4)
    b = torch.randn(2, 6, length, 4)
    c = torch.randn(2, length, 4)
    assert_close(dynafuse.compile(state_scan)(a, b, c), state_scan(a, b, c))
    assert_one_graph()


def cumulative_max_reversed(x):
    return associative_scan(torch.maximum, x, dim=-1, reverse=True) * 2


def test_a_reversed_scan_of_a_non_contiguous_tensor():
    x = torch.randn(9, 5).t()  # [5, 9], scanned along its strided dim
    assert_close(dynafuse.compile(cumulative_max_reversed)(x), cumulative_max_reversed(x))
    assert_one_graph()


def pair_sums(xs):
    first, second = associative_scan(lambda l, r: [l[0] + r[0], l[1] * r[1]], xs,
                                     dim=0, combine_mode="generic")
    return first - second


def test_a_list_of_leaves_with_broadcast_rows():
    xs = [torch.randn(5, 3), torch.rand(1, 3).expand(5, 3)]
    assert_close(dynafuse.compile(pair_sums)(xs), pair_sums(list(xs)))
    assert_one_graph()


def long_cumsum(x):
    return associative_scan(lambda l, r: l + r, x, dim=0) + 1


def test_a_scan_too_long_to_unroll_runs_eagerly():
    x = torch.randn(600, 2)
    assert_close(dynafuse.compile(long_cumsum)(x), long_cumsum(x))
    assert dynafuse.stats()["captures"] == 0
