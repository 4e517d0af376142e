"""End-to-end numerics of the pointwise op set (math, rounding, sign, clamp,
fmod/remainder, bitwise and logical ops, activations, masked_fill) against
eager PyTorch: result dtypes, NaN/inf and integer edge cases, shapes with
size-1 and empty dims, broadcasting, non-contiguous inputs, scalar and 0-dim
operands, 16-bit storage types, and PyTorch's own OpInfo samples.

Each case compiles afresh (dynafuse.reset()) and proves the compiled path ran.
Unary ops at NaN and +-inf inputs compare with eager's scalar path in float64
(unary_reference): eager's vectorized kernels differ there between CPUs.
Every test runs on the interpreter, on LLVM (skipped when LLVM is not
built; see LLVM_PENDING for ops LLVM cannot compile yet) and on the MLIR
backend when it is built.
"""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled

NAN, INF = float("nan"), float("inf")
FLOATS = [torch.float32, torch.float64]
HALVES = [torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64]
BOOL = [torch.bool]
ALL = FLOATS + HALVES + INTS + BOOL
NUMERIC = FLOATS + HALVES + INTS
# The MLIR backend (loop IR through MLIR's own passes) runs the suite too,
# as an independent check of the LLVM backend, when it is built.
BACKENDS = ["interp", "llvm"] + (["mlir"] if "mlir" in dynafuse._C.backends() else [])

# Ops whose lowering needs scalar instructions the LLVM backend does not emit
# yet: their LLVM cases are expected failures (not strict). Empty since the
# LLVM backend gained exp2, log1p, expm1, sin, cos, rounding, fmod,
# remainder, the bit ops and xor.
LLVM_PENDING = set()


def use_backend(request, backend, *ops):
    """Skips LLVM or MLIR cases when that backend is not built; marks the
    LLVM cases of pending ops."""
    if backend == "mlir" and "mlir" not in dynafuse._C.backends():
        pytest.skip("built without MLIR")
    if backend == "llvm":
        if "llvm" not in dynafuse._C.backends():
            pytest.skip("built without LLVM")
        pending = sorted(LLVM_PENDING.intersection(ops))
        if pending:
            request.applymarker(pytest.mark.xfail(
                reason=f"LLVM lacks the scalar ops of {pending}", strict=False))
    return backend


def tolerances(dtype):
    if dtype in HALVES:
        return {"rtol": 1e-2, "atol": 1e-2}
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    return {}


def check(fn, *args, backend, what="", expected=None, **tol):
    """Compiles fn, compares every output with eager (or with `expected`)
    and checks one capture."""
    dynafuse.reset()
    actual = dynafuse.compile(fn, backend=backend)(*args)
    if expected is None:
        expected = fn(*args)
    if not isinstance(expected, tuple):
        actual, expected = (actual,), (expected,)
    assert isinstance(actual, tuple) and len(actual) == len(expected), (what, actual)
    for index, (got, want) in enumerate(zip(actual, expected)):
        try:
            assert_close(got, want, **tol)
        except AssertionError as error:
            raise AssertionError(f"{what} output {index}: {error}") from None
    assert_compiled()


GLOBALS = {"torch": torch, "F": F, "NAN": NAN, "INF": INF}


def expr_fn(template, count=1, arity=1):
    """A function of count * arity tensors evaluating template ("{x}" and
    "{y}" name the operands) on each group: many shapes in one capture, with
    the torch call written in the captured frame itself."""
    names = [f"a{i}" for i in range(count * arity)]
    calls = [template.format(**dict(zip("xy", names[i:i + arity])))
             for i in range(0, len(names), arity)]
    return eval(f"lambda {', '.join(names)}: ({', '.join(calls)},)", GLOBALS)


SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 20.0, -20.0,
            1e-8, 3.0, -3.0, 6.0]


def make(shape, dtype, low=-20, high=20, specials=True):
    """Random data: floats with NaN, infinities, signed zeros, rounding ties
    and activation breakpoints first; integers in [low, high); bools."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(low, high, shape, dtype=dtype)
    x = torch.randn(shape, dtype=torch.float64) * 4
    if specials:
        flat = x.view(-1)
        count = min(flat.numel(), len(SPECIALS))
        flat[:count] = torch.tensor(SPECIALS[:count], dtype=torch.float64)
    return x.to(dtype)


SHAPES = [(4, 8), (1,), (3, 1, 5), (0, 4), (7,), (2, 3, 4, 5), ()]


def shape_inputs(dtype):
    """One tensor per shape, plus a transposed and a strided one."""
    inputs = [make(shape, dtype) for shape in SHAPES]
    inputs.append(make((8, 6), dtype).t())
    inputs.append(make((5, 12), dtype)[:, ::3])
    assert not inputs[-1].is_contiguous() and not inputs[-2].is_contiguous()
    return inputs


#===------------------------------------------------------------------------===#
# Unary ops: name -> (function, dtypes torch accepts)
#===------------------------------------------------------------------------===#

UNARY = {
    "erf": ("torch.erf({x})", ALL), "exp2": ("torch.exp2({x})", ALL),
    "log1p": ("torch.log1p({x})", ALL), "expm1": ("torch.expm1({x})", ALL),
    "sin": ("torch.sin({x})", ALL), "cos": ("torch.cos({x})", ALL),
    "reciprocal": ("torch.reciprocal({x})", ALL), "log2": ("torch.log2({x})", ALL),
    "log10": ("torch.log10({x})", ALL),
    "floor": ("torch.floor({x})", NUMERIC), "ceil": ("torch.ceil({x})", NUMERIC),
    "round": ("torch.round({x})", NUMERIC), "trunc": ("torch.trunc({x})", NUMERIC),
    "sign": ("torch.sign({x})", ALL), "square": ("torch.square({x})", ALL),
    "bitwise_not": ("torch.bitwise_not({x})", INTS + BOOL),
    "logical_not": ("torch.logical_not({x})", ALL),
    "relu6": ("F.relu6({x})", NUMERIC),
    "hardtanh": ("F.hardtanh({x}, -2.0, 3.0)", NUMERIC),
    "clamp": ("torch.clamp({x}, -1.5, 2)", NUMERIC),
    "clamp_min_only": ("{x}.clamp(min=0.5)", NUMERIC),
    "clamp_max_only": ("torch.clamp({x}, max=-1)", NUMERIC),
    "leaky_relu": ("F.leaky_relu({x}, 0.2)", FLOATS + HALVES),
    "elu": ("F.elu({x}, alpha=0.7)", FLOATS + HALVES),
    "silu": ("F.silu({x})", FLOATS + HALVES),
    "hardswish": ("F.hardswish({x})", FLOATS + HALVES),
    "hardsigmoid": ("F.hardsigmoid({x})", FLOATS + HALVES),
    "mish": ("F.mish({x})", FLOATS + HALVES),
    "softplus": ("F.softplus({x}, beta=2, threshold=5)", FLOATS + HALVES),
    "gelu": ("F.gelu({x})", FLOATS + HALVES),
    "gelu_tanh": ("F.gelu({x}, approximate='tanh')", FLOATS + HALVES),
}


def unary_reference(template, x):
    """Eager's result of the unary op, except at NaN and +-inf inputs: there
    the value comes from eager in float64 on a one-element tensor (its
    scalar path), cast to the result dtype. Eager's vectorized kernels are
    not consistent at non-finite inputs across CPUs: float16 F.gelu(inf) is
    NaN with AVX-512 and inf with AVX2, and float32 F.gelu(inf) has been NaN
    on the vector path but inf on the scalar tail. A test that compares with
    eager must not depend on which path the CPU's eager kernel took."""
    single = expr_fn(template)
    (expected,) = single(x)
    if not x.dtype.is_floating_point or bool(torch.isfinite(x).all()):
        return expected
    expected = expected.clone()
    for value in (NAN, INF, -INF):
        at = torch.isnan(x) if value != value else x == value
        if bool(at.any()):
            (scalar,) = single(torch.tensor([value], dtype=torch.float64))
            expected[at] = scalar.to(expected.dtype)
    return expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_shapes(request, name, backend):
    fn, dtypes = UNARY[name]
    dtype = torch.float32 if torch.float32 in dtypes else dtypes[0]
    inputs = shape_inputs(dtype)
    expected = tuple(unary_reference(fn, x) for x in inputs)
    check(expr_fn(fn, len(inputs)), *inputs, expected=expected,
          backend=use_backend(request, backend, name), what=name,
          **tolerances(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_dtypes(request, name, backend):
    fn, dtypes = UNARY[name]
    use_backend(request, backend, name)
    for dtype in dtypes:
        x = make((5, 7), dtype)
        check(expr_fn(fn), x, expected=(unary_reference(fn, x),), backend=backend,
              what=f"{name} {dtype}", **tolerances(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_half_types_compute_in_float32(dtype):
    """16-bit chains are computed in f32 and rounded once at the store."""
    def f(x):
        return F.mish(torch.clamp(x, -3, 3)) + torch.log1p(x.abs()) * torch.sin(x)

    x = make((6, 33), dtype, specials=False)
    dynafuse.reset()
    actual = dynafuse.compile(f, backend="interp")(x)
    assert actual.dtype == dtype
    once = f(x.float()).to(dtype)
    assert_close(actual.float(), once.float(), rtol=1e-2, atol=1e-2)
    assert_close(actual.float(), f(x).float(), rtol=3e-2, atol=3e-2)
    assert_compiled()


#===------------------------------------------------------------------------===#
# Binary ops: broadcasting, dtype mixes, scalars and 0-dim tensors
#===------------------------------------------------------------------------===#

def nonzero_ints(shape, dtype):
    """Integer divisors: nonzero (integer division by zero raises in torch)."""
    magnitude = torch.randint(1, 9, shape, dtype=dtype)
    return torch.where(torch.rand(shape) > 0.5, magnitude, -magnitude)


BINARY = {
    # name: (function, dtypes, second operand maker, Python scalars to try)
    "fmod": ("torch.fmod({x}, {y})", NUMERIC, nonzero_ints, [3, -2.5]),
    "remainder": ("torch.remainder({x}, {y})", NUMERIC, nonzero_ints, [3, -2.5]),
    "bitwise_and": ("torch.bitwise_and({x}, {y})", INTS + BOOL, None, [6, True]),
    "bitwise_or": ("{x}.bitwise_or({y})", INTS + BOOL, None, [-6, False]),
    "bitwise_xor": ("torch.bitwise_xor({x}, {y})", INTS + BOOL, None, [5, True]),
    "logical_and": ("torch.logical_and({x}, {y})", ALL, None, []),
    "logical_or": ("{x}.logical_or({y})", ALL, None, []),
    "logical_xor": ("torch.logical_xor({x}, {y})", ALL, None, []),
    "clamp_tensors": ("torch.clamp({x}, {y}, {y} + 2)", NUMERIC, None, [1]),
    "clamp_min": ("torch.clamp_min({x}, {y})", NUMERIC, None, [0, 0.5]),
    "clamp_max": ("{x}.clamp_max({y})", NUMERIC, None, [0, -0.5]),
}

BROADCASTS = [((4, 8), (4, 8)), ((4, 1, 8), (8,)), ((1, 8), (5, 1)), ((3, 4), ()),
              ((0, 3), (1, 3)), ((2, 1, 1), (1, 3, 1))]


def second_operand(name, shape, dtype):
    maker = BINARY[name][2]
    if maker is not None and not dtype.is_floating_point:
        return maker(shape, dtype)
    if dtype.is_floating_point and name in ("fmod", "remainder"):
        # Finite, nonzero divisors of both signs, and some infinite ones.
        y = make(shape, dtype, specials=False)
        y = torch.where(y.abs() < 0.25, torch.full_like(y, 0.75), y)
        flat = y.view(-1)
        flat[: min(2, flat.numel())] = INF
        return y
    return make(shape, dtype)


def dtype_mixes(dtypes):
    """(lhs, rhs) dtype pairs: each dtype with itself, and promotions."""
    pairs = [(dtype, dtype) for dtype in dtypes]
    for lhs, rhs in [(torch.int32, torch.int64), (torch.float32, torch.float64),
                     (torch.int64, torch.float32), (torch.bool, torch.int32),
                     (torch.float16, torch.float32), (torch.bfloat16, torch.int32)]:
        if lhs in dtypes and rhs in dtypes:
            pairs.append((lhs, rhs))
    return pairs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(request, name, backend):
    fn, dtypes = BINARY[name][:2]
    dtype = torch.float32 if torch.float32 in dtypes else torch.int64
    args = []
    for lhs, rhs in BROADCASTS:
        args += [make(lhs, dtype), second_operand(name, rhs, dtype)]
    args += [make((6, 8), dtype).t(), second_operand(name, (8, 1), dtype)]
    check(expr_fn(fn, len(args) // 2, arity=2), *args,
          backend=use_backend(request, backend, name), what=name,
          **tolerances(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_dtypes(request, name, backend):
    fn, dtypes = BINARY[name][:2]
    use_backend(request, backend, name)
    for lhs, rhs in dtype_mixes(dtypes):
        x, y = make((5, 7), lhs), second_operand(name, (5, 7), rhs)
        check(expr_fn(fn, arity=2), x, y, backend=backend, what=f"{name} {lhs} {rhs}",
              **tolerances(torch.promote_types(lhs, rhs)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_scalars_and_zero_dim(request, name, backend):
    """Python numbers promote weakly, 0-dim tensors only by category."""
    fn, dtypes, _, scalars = BINARY[name]
    use_backend(request, backend, name)
    for dtype in [d for d in (torch.float32, torch.int32, torch.bool) if d in dtypes]:
        x = make((4, 6), dtype)
        for scalar in scalars:
            check(expr_fn(fn.replace("{y}", repr(scalar))), x, backend=backend,
                  what=f"{name} {dtype} with {scalar!r}", **tolerances(dtype))
        for other in [d for d in (torch.float64, torch.int64, torch.bool) if d in dtypes]:
            zero_dim = second_operand(name, (), other)
            check(expr_fn(fn, arity=2), x, zero_dim, backend=backend,
                  what=f"{name} {dtype} with 0-dim {other}", **tolerances(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_edge_cases(request, dtype, backend):
    """Signs follow the dividend (fmod) or the divisor (remainder); the most
    negative value modulo -1 is 0."""
    use_backend(request, backend, "fmod", "remainder")
    low = torch.iinfo(dtype).min
    a = torch.tensor([low, low, 7, -7, 7, -7, low + 1, 0], dtype=dtype)
    b = torch.tensor([-1, 3, -3, 3, 3, -3, -1, -5], dtype=dtype)
    check(lambda x, y: (torch.fmod(x, y), torch.remainder(x, y), x.remainder(-4)),
          a, b, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bitwise_extremes(request, backend):
    use_backend(request, backend, "bitwise_and", "bitwise_or", "bitwise_xor",
                "bitwise_not")
    for dtype in INTS:
        info = torch.iinfo(dtype)
        x = torch.tensor([info.min, info.max, -1, 0, 1, 12345, -98765], dtype=dtype)
        y = torch.randint(info.min, info.max, (7,), dtype=dtype)
        check(lambda a, b: (torch.bitwise_and(a, b), a.bitwise_or(b), torch.bitwise_xor(a, b),
                            torch.bitwise_not(a), a.bitwise_not()),
              x, y, backend=backend, what=str(dtype))


#===------------------------------------------------------------------------===#
# Op-specific semantics
#===------------------------------------------------------------------------===#

@pytest.mark.parametrize("backend", BACKENDS)
def test_clamp_forms(request, backend):
    """Optional bounds (None), tensor bounds, NaN inputs and bounds, min > max,
    integer inputs with float bounds (promotion), and every spelling."""
    use_backend(request, backend)
    x = make((5, 6), torch.float32)
    lo, hi, s = torch.randn(6), torch.randn(5, 1), torch.tensor(0.25)
    cases = {
        "both": lambda x, lo, hi, s: torch.clamp(x, lo, hi),
        "min_none": lambda x, lo, hi, s: torch.clamp(x, None, hi),
        "max_none_kw": lambda x, lo, hi, s: x.clamp(min=lo, max=None),
        "method_max": lambda x, lo, hi, s: x.clamp(max=hi),
        "clip": lambda x, lo, hi, s: torch.clip(x, lo, hi + 0.5),
        "clip_method": lambda x, lo, hi, s: x.clip(-0.5),
        "min_gt_max": lambda x, lo, hi, s: torch.clamp(x, 2.0, -1.0),
        "clamp_min_method": lambda x, lo, hi, s: x.clamp_min(lo),
        "clamp_max_fn": lambda x, lo, hi, s: torch.clamp_max(x, 0),
        "0dim": lambda x, lo, hi, s: torch.clamp(x, min=s),
        "0dim_f64": lambda x, lo, hi, s: torch.clamp(x, s.double(), hi),
        "nan_bound": lambda x, lo, hi, s: torch.clamp(x, min=lo * NAN),
        "nan_max": lambda x, lo, hi, s: torch.clamp(x, max=s * NAN),
    }
    for what, fn in cases.items():
        check(fn, x, lo, hi, s, backend=backend, what=what)
    nan_bound = torch.tensor([NAN, 0.0, 1.0, -1.0, 2.0, 0.5])
    check(lambda x, b: torch.clamp(x, b, None), x, nan_bound, backend=backend)
    i = make((5, 6), torch.int32)
    for fn in (lambda t, s, l: t.clamp(max=1.5), lambda t, s, l: torch.clamp(t, -2, 3),
               lambda t, s, l: torch.clamp(t, s), lambda t, s, l: torch.clamp_min(t, l),
               lambda t, s, l: torch.clamp(t, l, s.long())):
        check(fn, i, s, torch.ones(6, dtype=torch.int64), backend=backend, what="int")


def test_clamp_without_bounds_runs_eagerly():
    """torch.clamp(x) raises; dynafuse breaks the graph and torch raises."""
    compiled = dynafuse.compile(lambda t: torch.clamp(t) + 1, backend="interp")
    with pytest.raises(RuntimeError, match="min.*max"):
        compiled(torch.randn(3))
    assert dynafuse.stats()["captures"] == 0


@pytest.mark.parametrize("name,fn,x", [
    ("bitwise_and float", lambda t: torch.bitwise_and(t, t), torch.randn(4)),
    ("bitwise_not float", lambda t: t.bitwise_not(), torch.randn(4)),
    ("floor bool", lambda t: torch.floor(t), torch.rand(4) > 0.5),
    ("fmod bool", lambda t: torch.fmod(t, t), torch.rand(4) > 0.5),
    ("clamp bool", lambda t: t.clamp(min=False), torch.rand(4) > 0.5),
    ("silu int", lambda t: F.silu(t), torch.arange(4)),
    ("relu6 bool", lambda t: F.relu6(t), torch.rand(4) > 0.5),
    ("hardtanh min>max", lambda t: F.hardtanh(t, 2.0, 1.0), torch.randn(4)),
    ("masked_fill int mask", lambda t: t.masked_fill(t.int(), 1.0), torch.randn(4)),
])
def test_unsupported_dtypes_break_to_eager(name, fn, x):
    """What torch rejects is rejected by the type rules: the graph breaks and
    eager raises torch's own error (from the break, after any graph before
    it)."""
    compiled = dynafuse.compile(fn, backend="interp")
    errors = (RuntimeError, NotImplementedError, TypeError, ValueError)
    with pytest.raises(errors):
        fn(x)
    with pytest.raises(errors):
        compiled(x)
    stats = dynafuse.stats()
    assert stats["graph_breaks"] >= 1 and not stats["compile_failures"], stats


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_fill(request, backend):
    """The result keeps the input's dtype (the value is cast, truncating for
    integers); the mask broadcasts; the value may be a 0-dim tensor."""
    use_backend(request, backend)
    x = make((4, 5), torch.float32)
    mask = torch.rand(4, 5) > 0.5
    row, value = torch.rand(5) > 0.5, torch.tensor(-1.25)
    ints, longs = make((4, 5), torch.int32), make((4, 5), torch.int64)
    cases = [
        (lambda t, m, v: t.masked_fill(m, 3.5), x, mask, value),
        (lambda t, m, v: torch.masked_fill(t, m, NAN), x, mask, value),
        (lambda t, m, v: t.masked_fill(m, -INF), x, mask, value),
        (lambda t, m, v: t.masked_fill(m, v), x, row, value),
        (lambda t, m, v: t.masked_fill(m, 1.0), row.float(), mask, value),
        (lambda t, m, v: t.masked_fill(m, v.double()), x, mask, value),
        (lambda t, m, v: t.masked_fill(m, v), x, mask, value),
        (lambda t, m, v: t.masked_fill(m, -2.7), ints, mask, value),
        (lambda t, m, v: t.masked_fill(m, v * -3.1), longs, mask, value),
        (lambda t, m, v: t.masked_fill(m, 0), x > 0, mask, value),
        (lambda t, m, v: t.masked_fill(m, 1.5), x.half(), mask, value),
        (lambda t, m, v: t.masked_fill(m, v), x.bfloat16(), mask, value),
        (lambda t, m, v: t.masked_fill(m, -1.0), x.t(), mask.t(), value),
        (lambda t, m, v: t.masked_fill(m, 1.0), make((0, 5), torch.float32),
         torch.zeros(0, 5, dtype=torch.bool), value),
        (lambda t, m, v: t.masked_fill(m, 5), value, torch.tensor(True), value),
    ]
    for index, (fn, *args) in enumerate(cases):
        check(fn, *args, backend=backend, what=f"case {index}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_softplus_threshold_and_beta(request, backend):
    """Above threshold / beta softplus is x itself; beta scales both the
    input and the result; beta may be negative."""
    use_backend(request, backend, "softplus")
    x = torch.tensor([-30.0, -1.0, 0.0, 2.4, 2.5, 2.6, 9.9, 10.0, 10.1, 25.0, NAN, INF, -INF])
    for beta, threshold in [(1, 20), (2, 5), (0.5, 5), (-1, 20), (3, 0.2)]:
        check(lambda t: F.softplus(t, beta, threshold), x, backend=backend,
              what=f"beta={beta} threshold={threshold}", rtol=1e-5, atol=1e-6)
    check(lambda t: F.softplus(t, threshold=10.0), x.double(), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_activation_attributes(request, backend):
    use_backend(request, backend, "elu")
    x = make((3, 17), torch.float32)
    for fn in (lambda t: F.leaky_relu(t), lambda t: F.leaky_relu(t, negative_slope=-1.5),
               lambda t: F.leaky_relu(t, 3, False), lambda t: F.elu(t),
               lambda t: F.elu(t, 2.5), lambda t: F.elu(t, alpha=0),
               lambda t: F.hardtanh(t, min_val=-0.25), lambda t: F.relu6(t, inplace=False),
               lambda t: F.hardtanh(t, -3, 3)):
        check(fn, x, backend=backend, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda t: F.relu6(t * 4, inplace=True),
    lambda t: F.leaky_relu(t * 2, 0.3, True),
    lambda t: F.elu(t + 1, inplace=True),
    lambda t: F.hardtanh(t - 0.5, -0.25, 0.75, inplace=True),
    lambda t: F.silu(t * 1, inplace=True),
], ids=["relu6", "leaky_relu", "elu", "hardtanh", "silu"])
def test_inplace_activation_on_an_intermediate(fn):
    check(fn, make((4, 5), torch.float32), backend="interp", rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sin_and_cos_of_one_value(request, dtype, backend):
    """LLVM combines them into a sincos call, which the JIT must resolve."""
    use_backend(request, backend, "sin", "cos")
    check(lambda t: torch.sin(t) + torch.cos(t), make((64,), dtype),
          backend=backend, **tolerances(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_spellings(request, backend):
    """torch functions, Tensor methods, torch.special and F all map."""
    use_backend(request, backend, *LLVM_PENDING)
    x = make((3, 5), torch.float32)
    y = torch.randn(3, 5)
    i = make((3, 5), torch.int64)
    j = nonzero_ints((3, 5), torch.int64)
    check(lambda t: (t.erf(), torch.special.erf(t), t.exp2(), torch.special.exp2(t),
                     t.log1p(), torch.special.log1p(t), t.expm1(), torch.special.expm1(t),
                     t.sin(), t.cos(), t.floor(), t.ceil(), t.round(), t.round(decimals=0),
                     t.trunc(), torch.fix(t), t.fix(), t.sign(), torch.sgn(t), t.sgn(),
                     t.square(), t.reciprocal(), t.log2(), t.log10(), t.logical_not()),
          x, backend=backend, rtol=1e-5, atol=1e-6)
    check(lambda a, b, m, n: (a.fmod(b), a.remainder(b), m.bitwise_and(n), m.bitwise_or(n),
                              m.bitwise_xor(n), a.logical_and(m), a.logical_or(b),
                              a.logical_xor(m), torch.remainder(5, n), m.fmod(n)),
          x, y, i, j, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_chain_is_one_kernel(request, backend):
    """A chain of the new ops is one kernel and matches eager."""
    use_backend(request, backend, *LLVM_PENDING)

    def f(x, y, m):
        z = F.silu(x).clamp(min=-0.5) + torch.remainder(y, 1.5) * F.softplus(x, 2)
        z = torch.where(torch.logical_xor(x > 0, m), F.hardswish(z), F.mish(z))
        return z.masked_fill(m, 0.25).sign() * torch.erf(z).abs() + torch.exp2(-z.square())

    x, y = make((6, 9), torch.float32), torch.randn(9)
    m = torch.rand(6, 1) > 0.5
    check(f, x, y, m, backend=backend, rtol=1e-5, atol=1e-5)


#===------------------------------------------------------------------------===#
# PyTorch's OpInfo samples
#===------------------------------------------------------------------------===#

# OpInfo name -> (our callable, keyword arguments we bind as attributes).
OPINFO = {
    "erf": (torch.erf, ()), "exp2": (torch.exp2, ()), "log1p": (torch.log1p, ()),
    "expm1": (torch.expm1, ()), "sin": (torch.sin, ()), "cos": (torch.cos, ()),
    "floor": (torch.floor, ()), "ceil": (torch.ceil, ()), "round": (torch.round, ()),
    "trunc": (torch.trunc, ()), "sign": (torch.sign, ()), "square": (torch.square, ()),
    "reciprocal": (torch.reciprocal, ()), "log2": (torch.log2, ()),
    "log10": (torch.log10, ()), "clamp": (torch.clamp, ()),
    "fmod": (torch.fmod, ()), "remainder": (torch.remainder, ()),
    "bitwise_and": (torch.bitwise_and, ()), "bitwise_or": (torch.bitwise_or, ()),
    "bitwise_xor": (torch.bitwise_xor, ()), "bitwise_not": (torch.bitwise_not, ()),
    "logical_and": (torch.logical_and, ()), "logical_or": (torch.logical_or, ()),
    "logical_xor": (torch.logical_xor, ()), "logical_not": (torch.logical_not, ()),
    "masked_fill": (torch.masked_fill, ()),
    "nn.functional.relu6": (F.relu6, ()),
    "nn.functional.hardtanh": (F.hardtanh, ("min_val", "max_val")),
    "nn.functional.leaky_relu": (F.leaky_relu, ("negative_slope",)),
    "nn.functional.elu": (F.elu, ("alpha",)),
    "nn.functional.silu": (F.silu, ()),
    "nn.functional.hardswish": (F.hardswish, ()),
    "nn.functional.hardsigmoid": (F.hardsigmoid, ()),
    "nn.functional.mish": (F.mish, ()),
    "nn.functional.softplus": (F.softplus, ("beta", "threshold")),
    "nn.functional.gelu": (F.gelu, ("approximate",)),
}
MAX_SAMPLES = {"interp": 8, "llvm": 4, "mlir": 4}  # per dtype; LLVM and MLIR compiles cost more


def opinfo(name):
    pytest.importorskip("expecttest")  # torch.testing._internal needs it
    from torch.testing._internal.common_methods_invocations import op_db
    found = [op for op in op_db if op.name == name and op.variant_test_name == ""]
    assert found, f"no OpInfo named {name}"
    return found[0]


def call_with(op, args, kwargs):
    """A function of the sample's tensors calling op with the sample's
    numbers, Nones and keyword constants written in (one capture)."""
    params, call = [], []
    values = {}
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            params.append(f"a{index}")
            call.append(f"a{index}")
        else:
            values[f"c{index}"] = arg
            call.append(f"c{index}")
    call += [f"{key}={value!r}" for key, value in kwargs.items()]
    source = f"lambda {', '.join(params)}: op({', '.join(call)})"
    return eval(source, {"op": op, **values})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(OPINFO))
def test_opinfo_samples(request, name, backend):
    fn, attribute_kwargs = OPINFO[name]
    info = opinfo(name)
    use_backend(request, backend, name.split(".")[-1])
    checked = 0
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bool):
        if not info.supports_dtype(dtype, "cpu"):
            continue
        for sample in list(info.sample_inputs("cpu", dtype))[:MAX_SAMPLES[backend]]:
            if set(sample.kwargs) - set(attribute_kwargs):
                continue  # e.g. round(decimals=...): not supported here
            if not all(isinstance(v, (bool, int, float, str)) for v in sample.kwargs.values()):
                continue
            args = [sample.input, *sample.args]
            if not all(isinstance(a, (torch.Tensor, bool, int, float, type(None))) for a in args):
                continue
            if name in ("fmod", "remainder") and any(
                    bool((torch.as_tensor(a) == 0).any()) for a in args[1:]):
                continue  # integer division by zero raises in torch
            fn_call = call_with(fn, args, sample.kwargs)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            check(fn_call, *tensors, backend=backend,
                  what=f"{name} {dtype} sample {sample}", **tolerances(dtype))
            checked += 1
    assert checked > 0, f"no usable OpInfo sample for {name}"


@pytest.mark.parametrize("source,target", [
    (torch.float32, torch.float64), (torch.float64, torch.float32),
    (torch.int64, torch.float32), (torch.float32, torch.int32),
    (torch.float32, torch.bfloat16), (torch.float32, torch.float32)])
def test_type_as_casts_in_the_graph(source, target):
    """x.type_as(y) is a cast to y's dtype (decision 91), not a Python call."""
    def f(x, y):
        return (x * 3).type_as(y) + y

    x = (torch.randn(4, 7) * 10).to(source)
    y = torch.ones(7, dtype=target)
    dynafuse.reset()
    actual = dynafuse.compile(f)(x, y)
    assert_close(actual, f(x, y))
    assert_compiled()
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 0


@pytest.mark.parametrize("shapes", [[(3, 1), (1, 4)], [(2, 3, 4), (4,), (3, 1)], [(5,)], [(0, 2), (1, 2)]])
def test_broadcast_tensors_are_expands(shapes):
    """torch.broadcast_tensors (dynafuse.polyfills): each tensor expanded to
    the broadcast shape, values and shapes as eager's, one graph."""
    tensors = [torch.randn(shape) for shape in shapes]

    def f(*ts):
        return [t * 2 for t in torch.broadcast_tensors(*ts)]

    actual = dynafuse.compile(f, fullgraph=True)(*tensors)
    for got, want in zip(actual, f(*tensors)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_bf16_rounding_is_eagers_bit_for_bit():
    """Kernels store, load and round bf16 with inline integer IR (it
    vectorizes): round to nearest even at the high 16 bits, ties included,
    infinities, signed zeros, subnormals, the largest finite values and
    NaN as eager's conversion gives them."""
    bits = torch.randint(-2**31, 2**31 - 1, (4096,), dtype=torch.int64).to(torch.int32)
    ties = (torch.arange(64, dtype=torch.int32) << 16) | 0x8000  # exactly halfway
    x = torch.cat([bits.view(torch.float32), ties.view(torch.float32),
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                                 3.3895e38, -3.3895e38, 1e-40, -1e-45, 1.0 + 2**-8])])

    def f(v):
        stored = (v * 1.0).bfloat16()
        return stored, stored.float() * 2, (v + 0.0).bfloat16().float()

    actual = dynafuse.compile(f, fullgraph=True)(x)
    for got, want in zip(actual, f(x)):
        assert got.dtype == want.dtype
        same = (got.float().view(torch.int32) == want.float().view(torch.int32)) | (
            got.float().isnan() & want.float().isnan())
        assert same.all(), x[~same][:8]
