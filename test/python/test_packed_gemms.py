"""Linear layers with their weight kept packed for MKL's sgemm (the torch
bridge's lib/Capture/TorchPackedGemms.cpp): compiled results against eager
on random data, over input ranks, layouts, biases and HuggingFace's Conv1D
(addmm); dynafuse.stats()["packed_gemms"] proves the packed path ran, and
["weight_prepacks"] that a weight is packed once per parameter version: an
in-place update or an optimizer step is seen. What runs unpacked: rows
outside 4..1024, a weight the graph computes, addmm scaled by beta or
alpha, training, and DYNAFUSE_PREPACK_WEIGHTS=0."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import (assert_close, assert_compiled, infer_between_training_steps,
                      run_python)

TOLERANCE = dict(rtol=1e-4, atol=1e-4)

if not torch.backends.mkl.is_available():
    pytest.skip("ATen built without MKL", allow_module_level=True)


class TwoLayers(nn.Module):
    def __init__(self, features=64, hidden=96, out=40, bias=True):
        super().__init__()
        self.up = nn.Linear(features, hidden, bias=bias)
        self.down = nn.Linear(hidden, out, bias=bias)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Conv1D(nn.Module):
    """HuggingFace GPT-2's Conv1D: addmm with a [K, N] weight."""

    def __init__(self, features, out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, out) * 0.1)
        self.bias = nn.Parameter(torch.randn(out))

    def forward(self, x):
        rows = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return rows.view(x.shape[:-1] + (self.weight.size(1),))


def run_compiled(model, x, calls=2):
    """Compiled inference calls checked against eager; returns the packed
    GEMMs run."""
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        expected = model(x)
        for _ in range(calls):
            assert_close(compiled(x), expected, **TOLERANCE)
    assert_compiled()
    return dynafuse.stats()["packed_gemms"]


def inputs(shape, layout):
    if layout == "contiguous":
        return torch.randn(shape)
    if layout == "transposed":  # the feature dim not innermost
        return torch.randn(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
    return torch.randn((1,) + shape[1:]).expand(shape)  # broadcast batch


@pytest.mark.parametrize("shape", [(4, 64), (37, 64), (2, 16, 64), (3, 5, 7, 64), (1024, 64)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_layers_run_packed(shape, layout, bias):
    model = TwoLayers(bias=bias).eval()
    assert run_compiled(model, inputs(shape, layout)) == 2 * 2
    # Each weight packed once, the second call reused it.
    assert dynafuse.stats()["weight_prepacks"] == 2


@pytest.mark.parametrize("shape", [(1, 64), (3, 64), (1, 2, 64), (0, 64), (2, 0, 64),
                                   (1025, 64), (2, 700, 64)])
def test_rows_where_packing_does_not_pay_run_unpacked(shape):
    model = TwoLayers().eval()
    assert run_compiled(model, torch.randn(shape)) == 0


@pytest.mark.parametrize("shape", [(8, 48), (2, 12, 48)])
def test_huggingface_conv1d_addmm_runs_packed_with_its_bias(shape):
    model = Conv1D(48, 72).eval()
    assert run_compiled(model, torch.randn(shape)) == 2


def test_scaled_addmm_runs_unpacked():
    class Scaled(Conv1D):
        def forward(self, x):
            return torch.addmm(self.bias, x, self.weight, beta=0.5, alpha=2.0)

    assert run_compiled(Scaled(48, 72).eval(), torch.randn(16, 48)) == 0


def test_weight_computed_in_the_graph_runs_unpacked():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(40, 64))

        def forward(self, x):
            return F.linear(x, self.weight * 2) + F.linear(x, self.weight)

    # The second linear reads the parameter itself: that one is packed.
    assert run_compiled(Scaled().eval(), torch.randn(16, 64)) == 2


def test_an_updated_weight_is_packed_again():
    model = TwoLayers().eval()
    x = torch.randn(16, 64)
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x), model(x), **TOLERANCE)
        model.up.weight.mul_(-0.5)  # in place: same tensor, new version
        assert_close(compiled(x), model(x), **TOLERANCE)
        model.down.weight = nn.Parameter(torch.randn(40, 96))  # a new tensor
        assert_close(compiled(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["weight_prepacks"] == 4


def test_optimizer_steps_between_inference_calls_are_seen():
    model = TwoLayers()
    infer_between_training_steps(model, dynafuse.compile(model), torch.randn(16, 64),
                                 **TOLERANCE)
    assert dynafuse.stats()["packed_gemms"] > 0


def test_two_instances_of_one_model_keep_their_own_packed_weights():
    first, second = TwoLayers().eval(), TwoLayers().eval()
    x = torch.randn(16, 64)
    compiled = [dynafuse.compile(first), dynafuse.compile(second)]
    with torch.no_grad():
        for _ in range(3):
            for model, call in zip((first, second), compiled):
                assert_close(call(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["weight_prepacks"] == 4


def test_tied_weights_are_packed_per_reader():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(64, 64)

        def forward(self, x):
            return self.layer(torch.relu(self.layer(x)))

    assert run_compiled(Tied().eval(), torch.randn(2, 8, 64)) == 4


def test_training_graphs_run_unpacked():
    model = TwoLayers()
    x = torch.randn(16, 64, requires_grad=True)
    compiled = dynafuse.compile(model)
    compiled(x).sum().backward()
    expected_grad = x.grad.clone()
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    assert_close(expected_grad, x.grad, **TOLERANCE)
    assert dynafuse.stats()["packed_gemms"] == 0


def test_prepacking_turned_off_packs_nothing():
    code = ("import torch, dynafuse\n"
            "m = torch.nn.Linear(64, 32).eval()\n"
            "c = dynafuse.compile(m)\n"
            "x = torch.randn(16, 64)\n"
            "with torch.no_grad():\n"
            "    torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)\n"
            "s = dynafuse.stats()\n"
            "print(f\"{s['captures']}/{s['packed_gemms']}\")\n")
    assert run_python(code, DYNAFUSE_PREPACK_WEIGHTS="0") == "1/0"
    assert run_python(code) == "1/1"


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("features,out", [(0, 40), (64, 0)])
def test_empty_weights_run_unpacked(features, out):
    model = nn.Linear(features, out).eval()
    assert run_compiled(model, torch.randn(16, features)) == 0
