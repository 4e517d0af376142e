"""Gradients of torch callables kept in a training graph (call_torch: ops
outside the op table, such as F.interpolate's nearest upsampling, sort,
cdist, grid_sample): the compiled backward differentiates them with torch's
autograd on a recomputation of the saved operands (TorchCallGradients.cpp),
so a training frame that calls them stays one graph. Callables that draw
random numbers (a recomputation would draw others) break the graph with the
reason. Compiled against eager on random data: losses, every gradient, one
capture and no break, and the gradient steps counted."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled

OPS = {
    # (by 3: powers of two are views, test_nearest_upsampling.py)
    "upsample_nearest": lambda a, b: F.interpolate(a + b, scale_factor=3, mode="nearest"),
    "sort_values": lambda a, b: torch.sort(a, dim=-1)[0] * b,
    "cummax_values": lambda a, b: torch.cummax(a, dim=-1)[0] + b,
    "cdist": lambda a, b: torch.cdist(a.flatten(2), b.flatten(2)),
    # an identity's gradient: autograd hands back the incoming gradient,
    # which the step copies (the executor frees that buffer after it)
    "view_copy": lambda a, b: torch.view_copy(a, (-1,)).view(a.shape) * b,
    "logcumsumexp": lambda a, b: torch.logcumsumexp(a, dim=-2) * b,
    "grid_sample": lambda a, b: F.grid_sample(
        a, torch.stack((b[:, 0], b[:, -1]), -1).tanh(), align_corners=False),
}


def gradients(fn, *args):
    for arg in args:
        arg.grad = None
    loss = fn(*args)
    loss.backward()
    return loss.detach(), [arg.grad.clone() for arg in args]


def assert_same_training(actual_loss, actual, expected_loss, expected, rtol, atol):
    assert_close(actual_loss, expected_loss, rtol=rtol, atol=atol)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert_close(got, want, rtol=rtol, atol=atol)


def leaves(*shapes, **like):
    return [torch.randn(*shape, **like).requires_grad_() for shape in shapes]


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 6, 1)])
def test_a_torch_call_in_a_training_graph_gets_eagers_gradients(name, shape):
    def step(a, b):
        return (OPS[name](a * 1.5, b - 0.5).sin() * 2).sum()

    a, b = leaves(shape, shape)
    assert_same_training(*gradients(dynafuse.compile(step), a, b),
                         *gradients(step, a, b), rtol=1e-4, atol=1e-5)
    assert_compiled(1)
    assert dynafuse.stats()["torch_call_gradients"] >= 1


def test_a_transposed_operand_and_gradients_reaching_one_result():
    """sort's values get a gradient, its indices are integers used to
    gather: the gradient step gets the values' gradient alone."""
    def step(x, w):
        values, indices = torch.sort(x.transpose(0, 1), dim=0, descending=True)
        picked = torch.gather(w, 0, indices)
        return (values * picked).sum()

    x, w = leaves((5, 4), (4, 5))
    assert_same_training(*gradients(dynafuse.compile(step), x, w),
                         *gradients(step, x, w), rtol=1e-5, atol=1e-5)
    assert_compiled(1)
    assert dynafuse.stats()["torch_call_gradients"] == 1


@pytest.mark.parametrize("factor,torch_calls", [(3, 2), (2, 0)])
def test_a_module_with_an_upsampling_trains_as_eager(factor, torch_calls):
    """By 3 the upsampling is ATen's call, differentiated by torch's
    autograd; by 2 it is views of its input (test_nearest_upsampling.py)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                                torch.nn.Upsample(scale_factor=factor),
                                torch.nn.Conv2d(4, 2, 3, padding=1))
    reference = torch.nn.Sequential(*[layer for layer in model])  # same parameters
    x = torch.randn(2, 3, 6, 6)

    def step(net):
        net.zero_grad(set_to_none=True)
        loss = net(x).square().mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in net.parameters()]

    expected_loss, expected = step(reference)
    compiled = dynafuse.compile(model)
    for _ in range(2):
        assert_same_training(*step(compiled), expected_loss, expected, rtol=1e-4, atol=1e-6)
    assert_compiled(1)
    assert dynafuse.stats()["torch_call_gradients"] == torch_calls


def test_symbolic_sizes_recompute_at_each_runs_sizes():
    def step(a, b):
        return (torch.cdist(a, b) ** 2).sum()

    compiled = dynafuse.compile(step, dynamic=True)
    for rows in (3, 7, 11):
        a, b = leaves((rows, 4), (5, 4))
        assert_same_training(*gradients(compiled, a, b), *gradients(step, a, b),
                             rtol=1e-4, atol=1e-4)
    assert dynafuse.stats()["captures"] == 1
    assert dynafuse.stats()["torch_call_gradients"] == 3


def test_a_random_torch_call_breaks_with_the_reason():
    def step(x):
        return F.rrelu(x * 2, training=True).sum()

    x, = leaves((4, 6))
    torch.manual_seed(3)
    expected_loss, expected = gradients(step, x)
    torch.manual_seed(3)
    loss, actual = gradients(dynafuse.compile(step), x)
    assert_close(loss, expected_loss)
    assert_close(actual[0], expected[0])
    reasons = " ".join(dynafuse._C.break_reasons())
    assert "draws random numbers" in reasons, reasons
    assert dynafuse.stats()["torch_call_gradients"] == 0


def test_under_no_grad_the_call_needs_no_gradient():
    def infer(a):
        with torch.no_grad():
            return F.interpolate(a, scale_factor=3, mode="nearest") * 2

    a, = leaves((1, 2, 3, 3))
    actual = dynafuse.compile(infer)(a)
    assert_close(actual, infer(a))
    assert not actual.requires_grad
    assert_compiled(1)
