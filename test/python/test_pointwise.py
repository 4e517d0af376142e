"""End-to-end numerics of pointwise graphs against eager PyTorch: random
data, several shapes, broadcasting, non-contiguous inputs, size-1 and empty
dims, type promotion, 16-bit storage types."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, assert_outputs_close

SHAPES = [(4, 8), (1,), (3, 1, 5), (0, 4), (7,), (2, 3, 4, 5), ()]

UNARY = {
    "exp": lambda x: torch.exp(x), "tanh": lambda x: torch.tanh(x),
    "sigmoid": lambda x: torch.sigmoid(x), "relu": lambda x: torch.relu(x),
    "abs": lambda x: x.abs(), "neg": lambda x: torch.neg(x),
    "gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "log_abs": lambda x: torch.log(x.abs() + 0.5),
    "sqrt_abs": lambda x: torch.sqrt(x.abs()),
    "rsqrt_abs": lambda x: torch.rsqrt(x.abs() + 0.1),
    "method_chain": lambda x: x.exp().tanh().sigmoid(),
}


def run_both(fn, *args, backend="auto"):
    """Compiles fn afresh, runs it and eager, and proves that the compiled
    path ran (one graph captured and compiled, no break, no failure)."""
    dynafuse.reset()
    actual = dynafuse.compile(fn, backend=backend)(*args)
    assert_compiled()
    return actual, fn(*args)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, shape):
    fn = UNARY[name]
    x = torch.randn(shape)
    actual, expected = run_both(fn, x)
    assert_close(actual, expected, rtol=2e-6, atol=2e-6)


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "maximum": lambda a, b: torch.maximum(a, b),
    "minimum": lambda a, b: torch.minimum(a, b),
    "where_gt": lambda a, b: torch.where(a > b, a, b),
    "add_fn": lambda a, b: torch.add(a, b), "mul_method": lambda a, b: a.mul(b),
}

BROADCASTS = [((4, 8), (4, 8)), ((4, 1, 8), (8,)), ((1, 8), (5, 1)), ((3, 4), ()),
              ((0, 3), (1, 3)), ((2, 1, 1), (1, 3, 1))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(name, shapes):
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    actual, expected = run_both(BINARY[name], a, b)
    assert_close(actual, expected)


def test_gelu_chain_matches_eager():
    def f(x, w, b):
        return F.gelu(x * w + b)

    x, w, b = torch.randn(64, 257), torch.randn(257), torch.randn(257)
    actual, expected = run_both(f, x, w, b)
    assert_close(actual, expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(8, 6).t(),
    lambda: torch.randn(5, 12)[:, ::3],
    lambda: torch.randn(4, 6, 5).permute(2, 0, 1),
    lambda: torch.randn(1, 7).expand(4, 7),
    lambda: torch.randn(10)[2:9],
], ids=["transposed", "strided", "permuted", "expanded", "offset"])
def test_non_contiguous_inputs(make):
    x = make()
    assert not x.is_contiguous() or x.storage_offset() > 0
    actual, expected = run_both(lambda t: torch.sigmoid(t) * 2 - t, x)
    assert_close(actual, expected)


def test_scalar_operands_and_operators():
    def f(x):
        return (2 * x + 1.5) / 3 - x ** 2 + (1 - x) * -x + x ** 0.5 * 0

    x = torch.rand(6, 7) + 0.1
    actual, expected = run_both(f, x)
    assert_close(actual, expected)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 1.7, -0.5])
def test_pow_scalar_exponent(exponent):
    x = torch.rand(33) + 0.5
    actual, expected = run_both(lambda t: torch.pow(t, exponent), x)
    assert_close(actual, expected)


def test_comparisons_produce_bool():
    def f(a, b):
        return a < b, a <= b, a == b, a != b, a > 0, torch.ge(a, b)

    a, b = torch.randn(5, 6), torch.randn(5, 6)
    b[0] = a[0]
    assert_outputs_close(*run_both(f, a, b))


def test_nan_propagates_like_torch():
    a = torch.tensor([1.0, float("nan"), -2.0, float("nan")])
    b = torch.tensor([float("nan"), 3.0, -1.0, float("nan")])
    for fn in (lambda x, y: torch.maximum(x, y), lambda x, y: torch.minimum(x, y),
               lambda x, y: torch.relu(x) + y,
               lambda x, y: x != y):
        actual, expected = run_both(fn, a, b)
        assert_close(actual, expected)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_promotion(dtype):
    x = torch.randint(-20, 20, (4, 5), dtype=dtype)
    y = torch.randint(1, 9, (5,), dtype=dtype)
    cases = [lambda a, b: a + b * 3, lambda a, b: a / b, lambda a, b: a * 2.5,
             lambda a, b: torch.maximum(a, b) - 1, lambda a, b: torch.exp(a.float() / 10),
             lambda a, b: (a > b).int() + a.abs(), lambda a, b: a.double() / b]
    for fn in cases:
        actual, expected = run_both(fn, x, y)
        assert_close(actual, expected)


def test_mixed_float_precision_promotes():
    a = torch.randn(4, 4, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float32)
    actual, expected = run_both(lambda x, y: x * y + 1, a, b)
    assert_close(actual, expected)


def test_zero_dim_tensor_does_not_promote_dims():
    x = torch.randn(3, 4)
    s = torch.tensor(2.5, dtype=torch.float64)
    actual, expected = run_both(lambda a, b: a * b, x, s)
    assert_close(actual, expected)


def test_bool_logic():
    a = torch.rand(9) > 0.5
    b = torch.rand(9) > 0.5
    actual, expected = run_both(lambda x, y: (x + y, x * y, torch.where(x, 1.0, 0.5)), a, b)
    assert_outputs_close(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_storage_types(dtype):
    x = torch.randn(16, 33).to(dtype)
    w = torch.randn(33).to(dtype)
    actual, expected = run_both(lambda a, b: F.gelu(a * b) + 1, x, w)
    assert actual.dtype == dtype
    # Dynafuse computes the chain in f32 and rounds once; eager rounds each op.
    assert_close(actual.float(), expected.float(), rtol=2e-2, atol=2e-2)
    assert_close(actual.float(), F.gelu(x.float() * w.float()).add(1).to(dtype).float(),
                 rtol=1e-2, atol=1e-2)


def test_casts():
    x = torch.randn(5, 6) * 10
    actual, expected = run_both(lambda t: (t.int(), t.long() * 2, t.double() + 1,
                                           t.to(torch.float16), t.bool(), (t > 0).float()), x)
    assert_outputs_close(actual, expected)


def test_multiple_outputs_share_kernel_and_return_structure():
    def f(x, y):
        s = x + y
        return s, (s * 2, x - y), 3

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    actual, expected = run_both(f, x, y)
    assert actual[2] == 3
    assert_outputs_close(actual, expected)


def test_returning_an_input_returns_the_same_object():
    def f(x, y):
        return x, x + y

    x, y = torch.randn(3), torch.randn(3)
    (out, total), _ = run_both(f, x, y)
    assert out is x
    assert_close(total, x + y)


@pytest.mark.parametrize("backend", ["llvm", "interp"] + (["mlir"] if "mlir" in dynafuse._C.backends() else []))
def test_backends_agree_with_eager(backend):
    x = torch.randn(3, 17)
    actual, expected = run_both(lambda t: torch.tanh(t) * t.sigmoid(), x, backend=backend)
    assert_close(actual, expected, rtol=2e-6, atol=2e-6)
