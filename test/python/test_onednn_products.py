"""Products of two computed tensors through oneDNN's matmul where the GEMM
library is oneDNN (lib/Torch/TorchOneDnnMatmul.cpp; DYNAFUSE_GEMM_LIBRARY,
auto on non-Intel CPUs): attention scores and weighted values, bmm, mm and
broadcasting matmul against eager on random data, over transposed,
expanded, sliced and size-1 operands; dynafuse.stats()["onednn_products"]
proves the oneDNN path ran. What ATen runs: small products (under 2^22
multiply-adds), matrix-vector ones, empty ones, and every product where the
library is MKL. The in-process tests run this CPU's library;
test_forced_onednn_runs_attention forces oneDNN in a subprocess, so an
Intel machine runs that path too."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import (GEMM_LIBRARY, assert_close, assert_compiled, cpu_runs_onednn_matmul,
                      run_python)

TOLERANCE = dict(rtol=1e-4, atol=1e-4)
# ATen's mkldnn_matmul refuses float32 on x86 CPUs without AVX-512 or
# AVX-NE-CONVERT: ATen runs every product there.
ONEDNN = GEMM_LIBRARY == "onednn" and cpu_runs_onednn_matmul()


def run_compiled(fn, *inputs):
    """Two compiled calls checked against eager; returns the oneDNN
    products run."""
    compiled = dynafuse.compile(fn)
    expected = fn(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for _ in range(2):
        results = compiled(*inputs)
        results = results if isinstance(results, tuple) else (results,)
        for result, wanted in zip(results, expected, strict=True):
            assert_close(result, wanted, **TOLERANCE)
    assert_compiled()
    return dynafuse.stats()["onednn_products"]


def attention(x, heads):
    """softmax(q @ k^T / sqrt(d)) @ v of one [b, t, 3 * h * d] tensor."""
    b, t, width = x.shape
    q, k, v = (x * 0.5).split(width // 3, dim=-1)
    q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    return (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, -1)


@pytest.mark.parametrize("batch,tokens,heads", [(2, 128, 4), (1, 197, 3), (3, 64, 8)])
def test_attention_products(batch, tokens, heads):
    x = torch.randn(batch, tokens, 3 * heads * 64)
    ran = run_compiled(lambda x: attention(x, heads), x)
    assert ran == (2 * 2 if ONEDNN else 0)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_bmm_and_mm(layout):
    a, b = torch.randn(6, 96, 128), torch.randn(6, 128, 80)
    if layout == "transposed":
        b = torch.randn(6, 80, 128).transpose(1, 2)
    if layout == "sliced":
        a = torch.randn(6, 96, 256)[:, :, ::2]

    def f(a, b):
        return torch.bmm(a.tanh(), b * 2), torch.mm(a[0].exp(), b[1] + 1)

    # bmm: 6 x 96 x 128 x 80 multiply-adds; mm is a sixth of that, under
    # the bound.
    assert run_compiled(f, a, b) == (2 if ONEDNN else 0)


def test_broadcast_batch():
    a, b = torch.randn(4, 1, 64, 96), torch.randn(1, 5, 96, 128)
    assert run_compiled(lambda a, b: (a + 1) @ (b * 2), a, b) == (2 if ONEDNN else 0)


def test_expanded_operand():
    a, b = torch.randn(1, 128, 96).expand(4, 128, 96), torch.randn(4, 96, 128)
    assert run_compiled(lambda a, b: (a * 2) @ (b - 1), a, b) == (2 if ONEDNN else 0)


def test_rows_against_a_computed_matrix():
    a, w = torch.randn(3, 50, 256), torch.randn(256, 192)
    assert run_compiled(lambda a, w: a.sin() @ (w * 0.1), a, w) == (2 if ONEDNN else 0)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 16, 32), (2, 32, 16)),      # 16k multiply-adds: ATen's
    ((8, 1, 512), (8, 512, 512)),    # a row per batch: matrix-vector
    ((8, 512, 512), (8, 512, 1)),    # a column per batch
    ((4, 0, 64), (4, 64, 64)),       # empty
    ((4, 64, 0), (4, 0, 64)),        # K = 0: zeros
])
def test_products_aten_runs(a_shape, b_shape):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    assert run_compiled(lambda a, b: (a * 2) @ (b + 1), a, b) == 0


FORCED = """
import torch, torch.nn.functional as F, dynafuse
torch.manual_seed(0)
def attention(x):
    b, t, width = x.shape
    q, k, v = (x * 0.5).split(width // 3, dim=-1)
    q, k, v = (y.reshape(b, t, 4, -1).transpose(1, 2) for y in (q, k, v))
    p = F.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1)
    return (p @ v).transpose(1, 2).reshape(b, t, -1)
c = dynafuse.compile(attention)
for x in (torch.randn(2, 128, 768), torch.randn(2, 768, 128).transpose(1, 2)):
    torch.testing.assert_close(c(x), attention(x), rtol=1e-4, atol=1e-4)
print(dynafuse.stats()["onednn_products"])
"""


def test_forced_onednn_runs_attention():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("ATen built without oneDNN")
    # Two inputs (two compiled entries: their strides differ), two products.
    expected = "4" if cpu_runs_onednn_matmul() else "0"
    assert run_python(FORCED, DYNAFUSE_GEMM_LIBRARY="onednn") == expected
    assert run_python(FORCED, DYNAFUSE_GEMM_LIBRARY="mkl") == "0"
