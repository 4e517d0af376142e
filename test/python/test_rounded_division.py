"""Rounded division and integer powers (issue 40): x // y, torch.div with
rounding_mode "floor" and "trunc", torch.floor_divide, and x ** y on
integers, compiled (they broke the graph) with eager's values on every
dtype, signed zeros, infinities, NaN and zero divisors; an integer division
by zero raises ZeroDivisionError as eager does, even when its result is
unused."""
import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTEGERS = [torch.int32, torch.int64]


def float_operands(dtype, shape=(6, 7)):
    """Dividends of halves (and specials); divisors whose quotients every
    float dtype holds exactly, so no result depends on rounding the
    quotient first (eager's bf16 kernels differ between their vector and
    scalar paths there)."""
    dividend = (torch.randint(-40, 41, shape) * 0.5).to(dtype)
    choices = torch.tensor([1.0, -1.0, 2.0, -2.0, 4.0, -0.5, 0.5, 0.0, -0.0])
    divisor = choices[torch.randint(len(choices), shape)].to(dtype)
    flat = dividend.view(-1)
    flat[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
    return dividend, divisor


def integer_operands(dtype, shape=(6, 7)):
    dividend = torch.randint(-50, 51, shape, dtype=dtype)
    divisor = torch.randint(-7, 8, shape, dtype=dtype)
    divisor[divisor == 0] = 3
    return dividend, divisor


def same_values(actual, expected):
    """Equal, NaN where eager has NaN, and the sign of every zero kept."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    numbers = ~expected.isnan() if expected.is_floating_point() else torch.ones_like(expected, dtype=torch.bool)
    assert torch.equal(actual.signbit()[numbers], expected.signbit()[numbers])


ROUNDED = {
    "floor_operator": lambda a, b: a // b,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "method_trunc": lambda a, b: a.div(b, rounding_mode="trunc"),
    "floor_divide": lambda a, b: torch.floor_divide(a, b),
    "scalar_divisor": lambda a, b: a // 3,
    "scalar_dividend": lambda a, b: 7 // b,
    "float_scalar": lambda a, b: torch.div(a, -2.5, rounding_mode="floor"),
}


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=str)
@pytest.mark.parametrize("name", ROUNDED)
def test_rounded_division_compiles_with_eagers_values(name, dtype):
    fn = ROUNDED[name]
    a, b = (float_operands if dtype.is_floating_point else integer_operands)(dtype)

    def f(a, b):
        return (fn(a, b),)

    actual = dynafuse.compile(f)(a, b)
    same_values(actual[0], f(a, b)[0])
    assert_compiled()


@pytest.mark.parametrize("layout", ["transposed", "broadcast", "strided", "empty", "size1"])
def test_rounded_division_of_any_layout(layout):
    a, b = integer_operands(torch.int64, (5, 8))
    if layout == "transposed":
        a = a.t()
        b = b.t().contiguous()
    elif layout == "broadcast":
        b = b[:1]
    elif layout == "strided":
        a, b = a[:, ::2], b[:, 1::2]
    elif layout == "empty":
        a, b = a[:0], b[:0]
    elif layout == "size1":
        a, b = a[:1, :1], b[:1, :1]

    def f(a, b):
        return a // b, torch.div(a, b, rounding_mode="trunc")

    actual = dynafuse.compile(f)(a, b)
    for got, want in zip(actual, f(a, b)):
        same_values(got, want)
    assert_compiled()


def test_in_place_rounded_division():
    def f(x, y):
        x.div_(y, rounding_mode="floor")
        x //= 2
        return x

    a, b = integer_operands(torch.int32)
    expected = f(a.clone(), b)
    a_compiled = a.clone()
    actual = dynafuse.compile(f)(a_compiled, b)
    same_values(actual, expected)
    same_values(a_compiled, expected)
    assert_compiled()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_division_by_a_broadcast_divisor_is_exact(dtype):
    """A divisor broadcast along the loop (loop-invariant in the kernel)
    divides exactly, as eager does: x / x is 1, never x * (1 / x), which
    is 1 - 1 ulp for some x and floors or truncates to 0 (found by the
    fuzzer, seed 28)."""
    def f(x):
        row = x.squeeze(1)
        return (torch.div(row, x, rounding_mode="trunc"),
                torch.div(row, x, rounding_mode="floor"),
                row / x == 1)

    x = torch.randn(257, 1, dtype=dtype)
    actual = dynafuse.compile(f)(x)
    for got, want in zip(actual, f(x)):
        same_values(got, want)
    assert torch.diagonal(actual[0]).eq(1).all()
    assert_compiled()


@pytest.mark.parametrize("fn,always", [
    (lambda a, b: (a + 1, a // b), False),
    (lambda a, b: (a // b, a + 1)[1:], False),
    (lambda a, b: (a + 1, torch.div(a, b, rounding_mode="trunc").sum() * 0), False),
    (lambda a, b: (torch.remainder(a, b) * 0 + 1, a // 0)[:1], True),
], ids=["used", "unused", "reduced", "constant_zero"])
def test_integer_division_by_zero_raises_even_when_unused(fn, always):
    a = torch.tensor([4, 5, 6])
    good, zero = torch.tensor([2, 1, 3]), torch.tensor([2, 0, 3])
    compiled = dynafuse.compile(fn)
    if not always:
        assert_outputs_close(compiled(a, good), fn(a, good))
    for divisor in (zero, good) if always else (zero,):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(a, divisor)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            compiled(a, divisor)
    assert dynafuse.stats()["graph_breaks"] == 0


def test_a_bad_rounding_mode_raises_as_eager():
    def f(a):
        return torch.div(a, 2, rounding_mode="round")

    a = torch.randn(4)
    with pytest.raises(RuntimeError, match="rounding_mode"):
        f(a)
    with pytest.raises(RuntimeError, match="rounding_mode"):
        dynafuse.compile(f)(a)


def test_rounded_division_of_bools_raises_as_eager():
    def f(a):
        return a // a

    a = torch.tensor([True, False])
    with pytest.raises(NotImplementedError):
        f(a)
    with pytest.raises(NotImplementedError):
        dynafuse.compile(f)(a)


def test_rounded_division_gives_zero_gradients():
    def f(x, y):
        return (torch.div(x, y, rounding_mode="floor") + torch.div(x, y, rounding_mode="trunc")
                + x * 3).sum()

    x, y = torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    f(x, y).backward()
    dynafuse.compile(f)(x2, y2).backward()
    assert_outputs_close(x2.grad, x.grad)
    assert_outputs_close(y2.grad, y.grad)
    assert dynafuse.stats()["graph_breaks"] == 0


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_powers_wrap_as_eager(dtype):
    """Integer powers are exact with wrapping products (they went through a
    double pow), negative tensor exponents included (0, or +-1 for +-1)."""
    def f(a, e):
        return a ** e, a ** 3, 2 ** e, torch.pow(a, 13), a ** 0

    a = torch.randint(-9, 10, (64,), dtype=dtype)
    a[:4] = torch.tensor([1, -1, 0, 3])
    e = torch.randint(-3, 45, (64,), dtype=dtype)
    e[:4] = torch.tensor([-5, -3, -1, 40])
    actual = dynafuse.compile(f)(a, e)
    for got, want in zip(actual, f(a, e)):
        same_values(got, want)
    assert_compiled()


def test_bool_to_a_bool_power_raises_as_eager():
    def f(a):
        return a ** a

    a = torch.tensor([True, False])
    with pytest.raises(NotImplementedError):
        f(a)
    with pytest.raises(NotImplementedError):
        dynafuse.compile(f)(a)


@pytest.mark.parametrize("fn", [lambda x: x // 2, lambda x: torch.floor_divide(x, 2)],
                         ids=["operator", "floor_divide"])
def test_floor_divide_of_a_tensor_requiring_grad_backward_raises_as_eager(fn):
    """Eager has no derivative for floor_divide: the call runs eagerly, so
    its backward raises as eager's does (a zero gradient would hide it)."""
    def f(x):
        return (fn(x) * x).sum()

    x = torch.randn(5, requires_grad=True)
    with pytest.raises(RuntimeError, match="floor_divide"):
        f(x).backward()
    with pytest.raises(RuntimeError, match="floor_divide"):
        dynafuse.compile(f)(x).backward()
    with torch.no_grad():
        assert_outputs_close(dynafuse.compile(f)(x), f(x))


BACKENDS = ["interp", "llvm"] + (["mlir"] if "mlir" in dynafuse._C.backends() else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32], ids=str)
def test_every_cpu_backend_rounds_and_powers_alike(backend, dtype):
    def f(a, b):
        return a // b, torch.div(a, b, rounding_mode="trunc"), a ** b.abs(), a ** (b - 3)

    a = torch.randint(-20, 20, (5, 6)).to(dtype)
    b = (torch.randint(1, 5, (6,)) * torch.tensor([1, -1, 1, -1, 1, -1])).to(dtype)
    actual = dynafuse.compile(f, backend=backend)(a, b)
    for got, want in zip(actual, f(a, b)):
        assert_outputs_close(got, want)
    assert_compiled()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        dynafuse.compile(lambda a: a // torch.tensor([1, 0]), backend=backend)(torch.tensor([4, 5]))
