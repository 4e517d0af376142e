"""Linear layers run by the GEMM library with their weight kept packed
(the torch bridge's lib/Torch/TorchPackedGemms.cpp): MKL's packed sgemm
on Intel CPUs, oneDNN's inner product elsewhere (DYNAFUSE_GEMM_LIBRARY).
Compiled results against eager on random data, over input ranks, layouts,
biases and HuggingFace's Conv1D (addmm); dynafuse.stats()["packed_gemms"]
proves the library's path ran, and ["linear_prepacks"] that a weight is
packed once per parameter version: an in-place update or an optimizer step
is seen. What ATen runs: rows outside the library's range (MKL 4..1024,
oneDNN 2 and up; oneDNN reads the weight unpacked above 1024), a weight the
graph computes, addmm scaled by beta or alpha, training, and
DYNAFUSE_PREPACK_WEIGHTS=0. The in-process tests run the library this CPU
gets; test_each_library_runs_linear_layers forces each in a subprocess."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import (GEMM_LIBRARY, assert_close, assert_compiled,
                      infer_between_training_steps, linear_packed as packed,
                      linear_routed as routed, run_python)

TOLERANCE = dict(rtol=1e-4, atol=1e-4)

LIBRARY = GEMM_LIBRARY
if LIBRARY is None:
    pytest.skip("ATen built without MKL and oneDNN", allow_module_level=True)



class TwoLayers(nn.Module):
    def __init__(self, features=512, hidden=1024, out=512, bias=True):
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


@pytest.mark.parametrize("shape", [(4, 512), (37, 512), (2, 16, 512), (3, 5, 7, 512), (1024, 512)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_layers_run_packed(shape, layout, bias):
    model = TwoLayers(bias=bias).eval()
    assert run_compiled(model, inputs(shape, layout)) == 2 * 2
    # Each weight packed once, the second call reused it.
    assert dynafuse.stats()["linear_prepacks"] == 2


@pytest.mark.parametrize("shape", [(1, 512), (2, 512), (3, 512), (1, 2, 512), (0, 512),
                                   (2, 0, 512), (1025, 512), (2, 700, 512)])
def test_rows_outside_the_library_range_run_with_aten(shape):
    model = TwoLayers().eval()
    rows = shape[0] * (shape[1] if len(shape) == 3 else 1)
    assert run_compiled(model, torch.randn(shape)) == (4 if routed(rows) else 0)
    assert dynafuse.stats()["linear_prepacks"] == (2 if packed(rows) else 0)


@pytest.mark.skipif(LIBRARY != "onednn", reason="MKL packs for static rows only")
def test_symbolic_rows_run_through_onednn():
    model = TwoLayers().eval()
    compiled = dynafuse.compile(model, dynamic=True)
    with torch.no_grad():
        for rows in (5, 9, 9, 13, 7, 1500, 6):
            x = torch.randn(2, rows, 512)
            assert_close(compiled(x), model(x), **TOLERANCE)
    assert_compiled()
    assert dynafuse.stats()["captures"] == 1
    # Two layers on 10, 18, 18, 26, 14, 3000 and 12 rows: packed for 10
    # rows, then, once the rows varied, once for any rows (not again for
    # each new size: a server's stream would repack on every request).
    assert dynafuse.stats()["packed_gemms"] == 14
    assert dynafuse.stats()["linear_prepacks"] == 4



EACH_LIBRARY = """
import torch, torch.nn as nn, torch.nn.functional as F, dynafuse
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).eval()
c = dynafuse.compile(m, dynamic=False)
with torch.no_grad():
    for shape in [(4, 512), (3, 5, 512), (1100, 512)]:
        for x in (torch.randn(shape), torch.randn(shape[::-1]).t() if len(shape) == 2 else
                  torch.randn(shape).transpose(0, 1).contiguous().transpose(0, 1)):
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
s = dynafuse.stats()
print(f"{s['packed_gemms']}/{s['linear_prepacks']}")
"""


@pytest.mark.parametrize("library", ["mkl", "onednn"])
def test_each_library_runs_linear_layers(library):
    if library == "mkl" and not torch.backends.mkl.is_available():
        pytest.skip("ATen built without MKL")
    if library == "onednn" and not torch.backends.mkldnn.is_available():
        pytest.skip("ATen built without oneDNN")
    # Three static shapes, two layouts each (six compiled entries, each
    # packing its own copies), two layers: MKL runs 4 and 15 rows packed (8
    # runs, 8 packings); oneDNN all three (12 runs), the 1100 rows with the
    # weight as it is.
    expected = "8/8" if library == "mkl" else "12/8"
    assert run_python(EACH_LIBRARY, DYNAFUSE_GEMM_LIBRARY=library) == expected


@pytest.mark.parametrize("shape", [(8, 512), (2, 12, 512)])
def test_huggingface_conv1d_addmm_runs_packed_with_its_bias(shape):
    model = Conv1D(512, 1024).eval()
    assert run_compiled(model, torch.randn(shape)) == 2


def test_scaled_addmm_runs_unpacked():
    class Scaled(Conv1D):
        def forward(self, x):
            return torch.addmm(self.bias, x, self.weight, beta=0.5, alpha=2.0)

    assert run_compiled(Scaled(512, 1024).eval(), torch.randn(16, 512)) == 0


def test_weight_computed_in_the_graph_runs_unpacked():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(1024, 512) * 0.05)

        def forward(self, x):
            return F.linear(x, self.weight * 2) + F.linear(x, self.weight)

    # The second linear reads the parameter itself: that one is packed.
    assert run_compiled(Scaled().eval(), torch.randn(16, 512)) == 2


def test_an_updated_weight_is_packed_again():
    model = TwoLayers().eval()
    x = torch.randn(16, 512)
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x), model(x), **TOLERANCE)
        model.up.weight.mul_(-0.5)  # in place: same tensor, new version
        assert_close(compiled(x), model(x), **TOLERANCE)
        model.down.weight = nn.Parameter(torch.randn(512, 1024) * 0.03)  # a new tensor
        assert_close(compiled(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["linear_prepacks"] == 4


def test_optimizer_steps_between_inference_calls_are_seen():
    model = TwoLayers()
    infer_between_training_steps(model, dynafuse.compile(model), torch.randn(16, 512),
                                 **TOLERANCE)
    assert dynafuse.stats()["packed_gemms"] > 0


def test_two_instances_of_one_model_keep_their_own_packed_weights():
    first, second = TwoLayers().eval(), TwoLayers().eval()
    x = torch.randn(16, 512)
    compiled = [dynafuse.compile(first), dynafuse.compile(second)]
    with torch.no_grad():
        for _ in range(3):
            for model, call in zip((first, second), compiled):
                assert_close(call(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["linear_prepacks"] == 4


def test_tied_weights_are_packed_per_reader():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(1024, 1024)

        def forward(self, x):
            return self.layer(torch.relu(self.layer(x)))

    assert run_compiled(Tied().eval(), torch.randn(2, 8, 1024)) == 4


def test_training_graphs_run_unpacked():
    model = TwoLayers()
    x = torch.randn(16, 512, requires_grad=True)
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
            "m = torch.nn.Linear(512, 512).eval()\n"
            "c = dynafuse.compile(m)\n"
            "x = torch.randn(16, 512)\n"
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
