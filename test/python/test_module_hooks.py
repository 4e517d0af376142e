"""Forward pre-hooks and forward hooks of submodules, traced as
Module._call_impl runs them (pre-hooks replace the arguments, forward hooks
the result, None keeps them; hooks taking kwargs get and give them), in
registration order with prepend honoured; hooks that record into a list the
caller owns repeat that store; adding or removing a hook recompiles
(guarded); backward hooks still run the call eagerly."""
import pytest
import torch
from torch import nn

import dynafuse
from conftest import assert_compiled, assert_outputs_close

INPUTS = [torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(1, 6)]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 6)
        self.second = nn.Linear(6, 6)

    def forward(self, x, scale=1.0):
        return self.second(torch.relu(self.first(x)) * scale)


def hooked_block():
    torch.manual_seed(0)
    block = Block()
    block.first.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    block.first.register_forward_hook(lambda module, args, out: out + args[0].sum())
    block.second.register_forward_hook(lambda module, args, out: None)  # keeps out
    block.second.register_forward_hook(lambda module, args, out: out * 3, prepend=True)
    return block


@pytest.mark.parametrize("x", INPUTS)
def test_pre_hooks_and_forward_hooks_run_in_the_graph(x):
    block = hooked_block()
    actual = dynafuse.compile(block, fullgraph=True)(x)
    assert_outputs_close(actual, block(x))
    assert_compiled()


def test_hooks_with_kwargs_see_and_replace_keywords():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x, scale=0.5)

    torch.manual_seed(0)
    outer = Outer()

    def pre(module, args, kwargs):
        return (args[0] + 1,), {"scale": kwargs["scale"] * 4}

    def post(module, args, kwargs, out):
        return out - kwargs["scale"]

    outer.block.register_forward_pre_hook(pre, with_kwargs=True)
    outer.block.register_forward_hook(post, with_kwargs=True)
    x = torch.randn(3, 6)
    actual = dynafuse.compile(outer, fullgraph=True)(x)
    assert_outputs_close(actual, outer(x))
    assert_compiled()


def test_hooks_recording_outputs_into_a_list_the_caller_owns():
    torch.manual_seed(0)
    block = Block()
    recorded = []
    block.first.register_forward_hook(lambda module, args, out: recorded.append(out))
    x = torch.randn(2, 6)
    compiled = dynafuse.compile(block)
    actual = compiled(x)
    assert_outputs_close(actual, block(x))
    assert len(recorded) == 2
    assert_outputs_close(recorded[0], recorded[1])


def test_adding_and_removing_hooks_recompiles():
    torch.manual_seed(0)
    block = Block()
    compiled = dynafuse.compile(block, fullgraph=True)
    x = torch.randn(2, 6)
    assert_outputs_close(compiled(x), block(x))
    handle = block.second.register_forward_hook(lambda module, args, out: out * -1)
    assert_outputs_close(compiled(x), block(x))
    handle.remove()
    assert_outputs_close(compiled(x), block(x))
    other = block.second.register_forward_hook(lambda module, args, out: out + 5)
    assert_outputs_close(compiled(x), block(x))
    other.remove()
    assert dynafuse.stats()["captures"] >= 3


def test_backward_hooks_still_run_the_call_eagerly():
    torch.manual_seed(0)
    block = Block()
    block.first.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    x = torch.randn(2, 6)
    assert_outputs_close(dynafuse.compile(block)(x), block(x))
    assert any("_backward_hooks" in r for r in dynafuse._C.break_reasons())
