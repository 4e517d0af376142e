"""Exceptions raised and caught inside traced code (issue 41): a `raise`
of a builtin exception or a KeyError of a dict whose keys capture knows
goes to the handler the code's exception table names, in the compiled
frame or in a function it inlines (collections.abc.Mapping.__contains__:
try self[key] except KeyError). Each runs with fullgraph=True against
eager; what no handler catches still raises eager's exception."""
import collections.abc

import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


class Registry(collections.abc.Mapping):
    """transformers' AttentionInterface: a Mapping whose __getitem__
    raises KeyError for a missing name."""
    shared = {"sdpa": 1, "flash": 2}

    def __init__(self):
        self.local = {}

    def __getitem__(self, key):
        if key in self.local:
            return self.local[key]
        return self.shared[key]

    def __iter__(self):
        return iter(self.shared)

    def __len__(self):
        return len(self.shared)


REGISTRY = Registry()


def lookup(table, key):
    try:
        return table[key]
    except KeyError:
        return -1


def handled(x):
    found = ("eager" in REGISTRY, "sdpa" in REGISTRY)
    scale = lookup({"p": 3}, "q") + lookup({"p": 3}, "p")
    try:
        raise ValueError("bad input")
    except (TypeError, ValueError) as error:
        message = str(error)
    try:
        y = x * scale
    finally:
        y = y + 1
    kept = []
    for i in range(3):
        try:
            kept.append({"0": x, "2": x * 2}[str(i)])
        except KeyError:
            continue
    return y, torch.stack(kept), found, message


@pytest.mark.parametrize("x", [torch.randn(3), torch.randn(2, 4).t(), torch.randn(0)])
def test_exceptions_caught_in_the_frame_and_its_callees(x):
    actual = dynafuse.compile(handled, fullgraph=True)(x)
    assert_outputs_close(actual, handled(x))
    assert_compiled()


def uncaught(x):
    try:
        return x * {"a": 1}["b"]
    except IndexError:
        return x


def test_an_exception_no_handler_matches_raises_as_eager():
    with pytest.raises(KeyError):
        dynafuse.compile(uncaught)(torch.randn(3))


def effects_before_the_raise(x):
    seen = []
    try:
        seen.append(x + 1)
        seen.append({"k": x}["missing"])
    except KeyError:
        seen.append(x * 3)
    return seen


def test_what_ran_before_the_raise_stays_done():
    x = torch.randn(4)
    actual = dynafuse.compile(effects_before_the_raise, fullgraph=True)(x)
    assert_outputs_close(actual, effects_before_the_raise(x))
    assert len(actual) == 2


def raises_under_no_grad(x):
    with torch.no_grad():
        y = x * 2
        return {"a": y}["missing"]


def catches_a_raise_from_a_with_block(x):
    try:
        return raises_under_no_grad(x)
    except KeyError:
        return x * 3, torch.is_grad_enabled()


def test_a_raise_out_of_a_with_block_keeps_the_grad_mode():
    """The callee's with block never exits during capture: its raise is a
    break, so the caller's handler never runs in the wrong grad mode."""
    x = torch.randn(3, requires_grad=True)
    with torch.enable_grad():
        actual = dynafuse.compile(catches_a_raise_from_a_with_block)(x)
        expected = catches_a_raise_from_a_with_block(x)
    assert_outputs_close(actual, expected)
    assert actual[1] is True and actual[0].requires_grad
