"""Pools and small depthwise convolutions as fused window taps
(lib/Graph/WindowOps.cpp) against eager PyTorch: every kernel, stride,
padding, dilation and ceil_mode form, channels-last, non-contiguous, empty
and size-1 inputs, NaN and -inf. Each test proves the compiled path ran and
whether the op left its extern call or kept it."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, assert_outputs_close


def run_compiled(fn, *args, externs, **tolerances):
    """fn compiled and eager on args: equal results, the compiled path ran,
    and the graph has `externs` extern calls."""
    dynafuse.reset()
    compiled = dynafuse.compile(fn)
    with torch.no_grad():
        actual, expected = compiled(*args), fn(*args)
    assert_outputs_close(actual, expected, **tolerances)
    assert_compiled()
    (graph,) = dynafuse.compiled_graphs()
    assert graph["extern_calls"] == externs, graph


def nchw(*shape):
    return torch.randn(*shape)


def channels_last(*shape):
    return torch.randn(*shape).contiguous(memory_format=torch.channels_last)


def transposed(*shape):
    n, c, h, w = shape
    return torch.randn(n, c, w, h).transpose(2, 3)


LAYOUTS = {"nchw": nchw, "channels_last": channels_last, "transposed": transposed}

MAX_POOLS = {
    # kernel, stride, padding, dilation, ceil_mode
    "k2": (2, None, 0, 1, False),
    "k3_s2_p1": (3, 2, 1, 1, False),
    "k3_s2_ceil": (3, 2, 0, 1, True),
    "k3_s1_p1": (3, 1, 1, 1, False),
    "k2x3_s1x2": ((2, 3), (1, 2), (1, 0), 1, False),
    "dilated": (3, 1, 1, 2, False),
    "ceil_padded": (3, 2, 1, 1, True),
    "k1": (1, 1, 0, 1, False),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(MAX_POOLS))
def test_max_pool(name, layout):
    k, s, p, d, ceil = MAX_POOLS[name]
    x = LAYOUTS[layout](2, 5, 9, 11)
    run_compiled(lambda t: F.max_pool2d(torch.relu(t) * 2, k, s, p, d, ceil_mode=ceil) - 1,
                 x, externs=0, rtol=0, atol=0)


def test_max_pool_propagates_nan_and_infinities():
    x = torch.randn(1, 3, 6, 6)
    x[0, 0, 2, 3] = float("nan")
    x[0, 1] = float("-inf")
    x[0, 2, 0, 0] = float("inf")
    run_compiled(lambda t: F.max_pool2d(t + 0, 3, 2, 1), x, externs=0, rtol=0, atol=0)


@pytest.mark.parametrize("shape,kernel", [((0, 4, 6, 6), 2), ((3, 2, 1, 1), 1), ((1, 1, 2, 9), (1, 2))])
def test_max_pool_empty_and_size_one(shape, kernel):
    run_compiled(lambda t: F.max_pool2d(t * 3, kernel), torch.randn(*shape), externs=0, rtol=0, atol=0)


def test_max_pool_module_in_a_network():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(2, 3, 16, 16)
    run_compiled(net, x, externs=2, rtol=1e-4, atol=1e-5)


AVG_POOLS = {
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override; decomposed
    "k2": (2, None, 0, False, True, None, True),
    "k3_s1_p1": (3, 1, 1, False, True, None, True),
    "override": (3, 2, 1, False, True, 5, True),
    "excluding_pad": (3, 1, 1, False, False, None, False),
    "excluding_no_pad": (2, 2, 0, False, False, None, True),
    "ceil_partial": (2, 2, 0, True, True, None, False),
    "ceil_exact": (3, 2, 0, True, True, None, True),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(AVG_POOLS))
def test_avg_pool(name, layout):
    k, s, p, ceil, include, divisor, decomposed = AVG_POOLS[name]
    x = LAYOUTS[layout](2, 4, 9, 9)
    run_compiled(lambda t: F.avg_pool2d(t.exp(), k, s, p, ceil, include, divisor) + 1,
                 x, externs=0 if decomposed else 1, rtol=1e-5, atol=1e-6)


DEPTHWISE = {
    # channels, kernel, stride, padding, dilation, bias
    "k3": (8, 3, 1, 1, 1, True),
    "k3_s2": (6, 3, 2, 1, 1, False),
    "k5_s2": (4, 5, 2, 2, 1, True),
    "k7": (3, 7, 1, 3, 1, True),
    "k3_dilated": (5, 3, 1, 2, 2, True),
    "k2x3_unpadded": (4, (2, 3), (2, 1), 0, 1, False),
    "k1": (7, 1, 1, 0, 1, True),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(DEPTHWISE))
def test_depthwise_convolution(name, layout):
    c, k, s, p, d, bias = DEPTHWISE[name]
    conv = nn.Conv2d(c, c, k, s, p, d, groups=c, bias=bias).eval()
    bn = nn.BatchNorm2d(c).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    x = LAYOUTS[layout](2, c, 10, 12)
    run_compiled(lambda t: F.relu6(bn(conv(torch.relu(t) - 0.5))), x, externs=0,
                 rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 3])
def test_depthwise_tap_weights_follow_weight_updates(batch):
    """efficientnet_b0's late depthwise layers: 5x5 over many channels at a
    4x4 output, channels-last. The taps read the weight through a copy with
    the channel innermost, made on every call (decision 89): an in-place
    update of the weight between calls is seen."""
    conv = nn.Conv2d(96, 96, 5, padding=2, groups=96, bias=False).eval()

    def block(t):
        return F.silu(conv(torch.relu(t) - 0.5))

    dynafuse.reset()
    compiled = dynafuse.compile(block)
    with torch.no_grad():
        for _ in range(3):
            x = channels_last(batch, 96, 4, 4)
            assert_close(compiled(x), block(x), rtol=1e-4, atol=1e-5)
            conv.weight.mul_(-1.5).add_(0.25)
    assert_compiled()
    (graph,) = dynafuse.compiled_graphs()
    assert graph["extern_calls"] == 0, graph
    assert dynafuse.stats()["cache_hits"] >= 2, dynafuse.stats()


@pytest.mark.parametrize("batch", [0, 1, 3])
def test_depthwise_batches(batch):
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4).eval()
    run_compiled(lambda t: conv(t) * 2, torch.randn(batch, 4, 5, 5), externs=0, rtol=1e-5, atol=1e-6)


def test_channels_last_typed_result_stays_extern():
    """A convolution of a channels-last graph input whose result is returned
    keeps ATen's op, and with it eager's output layout."""
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4).eval()
    x = channels_last(1, 4, 6, 6)
    run_compiled(conv, x, externs=1, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert dynafuse.compile(conv)(x).is_contiguous(memory_format=torch.channels_last)


def test_large_depthwise_and_grouped_stay_extern():
    """Past 2^19 multiply-adds oneDNN's depthwise kernel is faster; grouped
    convolutions with several channels per group are not depthwise."""
    large = nn.Conv2d(256, 256, 3, padding=1, groups=256).eval()
    run_compiled(lambda t: large(t).relu(), torch.randn(1, 256, 16, 16), externs=1,
                 rtol=1e-4, atol=1e-5)
    grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4).eval()
    run_compiled(lambda t: grouped(t).relu(), torch.randn(1, 8, 6, 6), externs=1,
                 rtol=1e-4, atol=1e-5)
    multiplier = nn.Conv2d(4, 8, 3, padding=1, groups=4).eval()
    run_compiled(lambda t: multiplier(t).relu(), torch.randn(1, 4, 6, 6), externs=1,
                 rtol=1e-4, atol=1e-5)


def test_squeeze_excitation_after_depthwise():
    """The depthwise result feeds a squeeze-excitation's mean and its
    scaling (mobilenet_v3, efficientnet): stored once, read by both."""
    dw = nn.Conv2d(16, 16, 5, padding=2, groups=16).eval()
    fc1, fc2 = nn.Conv2d(16, 4, 1).eval(), nn.Conv2d(4, 16, 1).eval()

    def block(x):
        y = F.hardswish(dw(x))
        s = torch.sigmoid(fc2(F.relu(fc1(F.adaptive_avg_pool2d(y, 1)))))
        return (y * s).mean((2, 3))

    run_compiled(block, nchw(2, 16, 8, 8), externs=2, rtol=1e-4, atol=1e-5)


def test_depthwise_training_gradients():
    """In a training graph the forward's depthwise convolution runs as taps;
    the gradients (ATen's convolution backward) match eager's."""
    conv = nn.Conv2d(6, 6, 3, padding=1, groups=6)
    x = torch.randn(2, 6, 7, 7, requires_grad=True)
    dynafuse.reset()
    compiled = dynafuse.compile(lambda t: (conv(t).relu() * 2).sum())
    loss = compiled(x)
    grads = torch.autograd.grad(loss, [x, conv.weight, conv.bias])
    expected_loss = (conv(x).relu() * 2).sum()
    expected = torch.autograd.grad(expected_loss, [x, conv.weight, conv.bias])
    assert_close(loss, expected_loss, rtol=1e-5, atol=1e-4)
    for g, e in zip(grads, expected):
        assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert_compiled()
