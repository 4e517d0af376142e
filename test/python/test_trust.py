"""Trust regressions (issue 40): values after size changes, reductions of
bools and empty dims, rounding and signs of zero, and inputs eager refuses,
which the compiled function must refuse with eager's exception type. Each
case was a wrong result, a crash or a silently accepted input before its
fix (test_trust_storage.py has the storage relations,
test_trust_gradients.py the gradients)."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def storage(tensor):
    return tensor.untyped_storage().data_ptr()


@pytest.mark.parametrize("fn", [
    lambda x: (torch.zeros(2, 8), torch.zeros(2, 8)),
    lambda x: (x * 2, x * 2),
    lambda x: (torch.full_like(x, 3.0), torch.full_like(x, 3.0), x.sin()),
], ids=["factories", "same_expression", "three"])
def test_equal_outputs_made_twice_are_two_tensors(fn):
    """Two equal tensors made in one frame are two tensors, as in eager: a
    write into one (a static KV cache's keys) must not show in the other."""
    x = torch.randn(2, 8)
    expected = fn(x)
    actual = dynafuse.compile(fn)(x)
    assert_outputs_close(actual, expected)
    assert_compiled()
    assert len({storage(t) for t in actual}) == len(actual)
    actual[0].add_(1)
    assert_outputs_close(actual[1], expected[1])


def test_a_tensor_returned_twice_is_one_object():
    def f(x):
        y = x * 2
        return y, y

    first, second = dynafuse.compile(f)(torch.randn(3))
    assert first is second
    assert_compiled()


@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 0), (3, None), (-5, None),
                                         ((1, -1), (0, 1))])
def test_roll_after_a_size_change(shifts, dims):
    def f(a):
        return a.roll(shifts, dims)

    compiled = dynafuse.compile(f)
    for rows in (3, 3, 7, 5, 2):
        a = torch.randn(rows, 4)
        assert_outputs_close(compiled(a), f(a))
    assert dynafuse.stats()["symbolic_captures"] >= 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_full_reductions_keep_their_dtype_after_a_size_change(dtype):
    def f(a):
        return a.mean(), a.std(), a.var(), a.mean(0)

    compiled = dynafuse.compile(f)
    for size in (16, 16, 33, 20):
        a = torch.randn(size, size, dtype=dtype)
        assert_outputs_close(compiled(a), f(a), atol=2e-2, rtol=2e-2)
    assert dynafuse.stats()["symbolic_captures"] >= 1


def test_cat_of_zero_dim_tensors_raises_as_eager():
    def f(a):
        v = a.max(0).values
        return torch.cat([v, v, v], 0)

    a = torch.randn(5)
    with pytest.raises(RuntimeError, match="zero-dimensional"):
        f(a)
    with pytest.raises(RuntimeError, match="zero-dimensional"):
        dynafuse.compile(f)(a)


def test_max_and_min_of_bools_compile():
    def f(a):
        return a.amax(0), a.amin(), a.max(1).values, a.min(1).indices, a.amax((0, 1))

    for shape in ((4, 5), (1, 3), (6, 1)):
        dynafuse.reset()
        a = torch.rand(shape) > 0.5
        assert_outputs_close(dynafuse.compile(f)(a), f(a))
        assert_compiled()


def test_argmax_of_bools_raises_as_eager():
    a = torch.rand(4, 5) > 0.5
    with pytest.raises(RuntimeError):
        dynafuse.compile(lambda t: t.argmax())(a)


@pytest.mark.parametrize("fn", [
    lambda a: a.sin(),
    lambda a: a.flip(0),
    lambda a: a.narrow(1, 1, 2),
    lambda a: a.roll(1, 0),
], ids=["sin", "flip", "narrow", "roll"])
def test_size_zero_dims_after_a_size_change(fn):
    compiled = dynafuse.compile(fn)
    for rows in (3, 5, 0, 4):
        a = torch.randn(rows, 4)
        assert_outputs_close(compiled(a), fn(a))
    assert dynafuse.stats()["compile_failures"] == 0


def test_linear_of_a_flattened_slice_with_an_empty_batch():
    def f(a, w):
        return F.linear(a[:, 1:].flatten(1), w)

    compiled = dynafuse.compile(f)
    w = torch.randn(5, 6)
    for rows in (3, 5, 0):
        a = torch.randn(rows, 4, 2)
        assert_outputs_close(compiled(a, w), f(a, w))
    assert dynafuse.stats()["compile_failures"] == 0


def eager_and_compiled_raise(fn, *calls):
    """Each call's args: eager raises for the last and compiled raises the
    same exception type; the calls before it match eager."""
    compiled = dynafuse.compile(fn)
    for args in calls[:-1]:
        assert_outputs_close(compiled(*args), fn(*args))
    with pytest.raises(Exception) as eager:
        fn(*calls[-1])
    with pytest.raises(type(eager.value)):
        compiled(*calls[-1])


@pytest.mark.parametrize("norm", [F.layer_norm, F.rms_norm], ids=["layer_norm", "rms_norm"])
def test_normalized_shape_is_checked_when_the_dim_becomes_symbolic(norm):
    eager_and_compiled_raise(lambda a: norm(a, (4,)),
                             (torch.randn(3, 4),), (torch.randn(5, 4),),
                             (torch.randn(3, 5),))


def test_norm_weight_of_another_shape_raises():
    eager_and_compiled_raise(lambda a, w: F.layer_norm(a, (4,), w),
                             (torch.randn(3, 4), torch.randn(4)),
                             (torch.randn(3, 4), torch.randn(1)))


def test_linear_bias_that_would_widen_the_product_raises():
    """Eager expands the bias to the product's shape (addmm): a [2] bias on
    a [1] product raises there, even when the result is never used."""
    def f(x, w, b):
        unused = F.linear(x, w, b)  # noqa: F841
        return x * 2

    eager_and_compiled_raise(f, (torch.randn(2, 3), torch.randn(4, 3), torch.randn(4)),
                             (torch.randn(2, 3), torch.randn(1, 3), torch.randn(1)),
                             (torch.randn(2), torch.randn(1, 2), torch.randn(2)))


@pytest.mark.parametrize("fn", [
    lambda a: torch.minimum(a, 3.0),
    lambda a: torch.maximum(a, 2),
    lambda a: a.maximum(1.5),
    lambda a: torch.max(a, 1.0),
    lambda a: torch.logical_or(a, 1),
    lambda a: a.logical_and(True),
    lambda a: torch.eq(1, a),
], ids=["minimum", "maximum", "method", "max_overload", "logical_or", "logical_and",
        "scalar_first"])
def test_python_numbers_where_eager_needs_tensors_raise_type_error(fn):
    a = torch.randn(3)
    with pytest.raises(TypeError):
        fn(a)
    with pytest.raises(TypeError):
        dynafuse.compile(fn)(a)


def test_narrow_out_of_range_after_a_size_change_raises():
    def f(a):
        unused = a.narrow(0, 2, 3)  # noqa: F841 - eager checks it all the same
        return a * 2

    eager_and_compiled_raise(f, (torch.randn(6),), (torch.randn(7),), (torch.randn(4),))


def test_in_place_update_overlapping_its_source_raises_as_eager():
    def f(v):
        v[None].add_(v)
        return v

    v = torch.randn(3)
    try:
        expected = f(v.clone())
    except RuntimeError:
        with pytest.raises(RuntimeError):
            dynafuse.compile(f)(v.clone())
        return
    assert_outputs_close(dynafuse.compile(f)(v.clone()), expected)


def test_t_reverses_every_dim_and_is_a_view():
    """.T of a 3-d tensor reverses all dims (it transposed the last two);
    of fewer than 2 dims it is a view, not the tensor itself."""
    def f(x, v, s):
        return x.T, x.mT, v.T, s.T, s.transpose(0, 0)

    args = (torch.randn(2, 3, 4), torch.randn(5), torch.tensor(2.0))
    actual = dynafuse.compile(f)(*args)
    assert_outputs_close(actual, f(*args))
    assert_compiled()
    for out, base in zip(actual[2:], args[1:] + args[2:]):
        assert out is not base and storage(out) == storage(base)


@pytest.mark.parametrize("fn", [torch.tanh, torch.erf, torch.expm1, torch.log1p, torch.sin])
def test_odd_functions_keep_the_sign_of_zero(fn):
    x = torch.tensor([-0.0, 0.0, 0.5, -3.0])
    assert_outputs_close(dynafuse.compile(lambda a: 1 / fn(a))(x), 1 / fn(x))
    assert_compiled()


@pytest.mark.parametrize("fn", [
    F.relu, F.relu6, lambda a: a.clamp_min(0), lambda a: a.clamp(0, 1),
    lambda a: a.clamp(max=0), lambda a: F.relu(a.clone(), inplace=True),
], ids=["relu", "relu6", "clamp_min", "clamp", "clamp_max", "relu_inplace"])
def test_clamps_keep_the_input_at_a_tie_with_a_bound(fn):
    """Eager's clamps keep x where it equals a bound (relu(-0.0) is -0.0,
    on its scalar and vector paths alike); 1 / x shows the sign."""
    x = torch.tensor([-0.0, 0.0, 0.5, -3.0, float("nan"), 2.0] * 3)
    assert_outputs_close(dynafuse.compile(lambda a: 1 / fn(a))(x), 1 / fn(x))
    assert_compiled()


def test_integer_modulo_by_zero_raises_as_eager():
    def f(a, b):
        return torch.fmod(a, b) + torch.remainder(a, b)

    a, b = torch.tensor([3, 4, 5]), torch.tensor([1, 0, 2])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        dynafuse.compile(f)(a, b)
    assert_outputs_close(dynafuse.compile(f)(a, b + 3), f(a, b + 3))


def test_explicit_half_casts_round_before_their_readers():
    def f(x):
        h = x.half()
        return h, torch.fmod(h, 1e-3), h > 0.1

    x = torch.randn(64) * 0.2
    assert_outputs_close(dynafuse.compile(f)(x), f(x))
    assert_compiled()


def test_outputs_that_view_other_outputs_share_their_memory():
    """y and views of y returned together share y's memory as in eager: a
    write into y shows through them (they were separate copies)."""
    def f(x):
        y = x * 2
        first, second = y.chunk(2)
        return y, y[1:], y.t(), y.view(-1), y.unsqueeze(0), second

    x = torch.randn(4, 6)
    actual = dynafuse.compile(f)(x)
    assert_outputs_close(actual, f(x))
    assert_compiled()
    assert all(storage(view) == storage(actual[0]) for view in actual[1:])
    actual[0].fill_(1.0)
    assert all(bool((view == 1.0).all()) for view in actual[1:])


def test_views_of_zero_dim_inputs_share_their_memory():
    def f(s):
        return s.squeeze(), s.unsqueeze(0), s.T, s[...]

    s = torch.tensor(3.0)
    actual = dynafuse.compile(f)(s)
    assert_outputs_close(actual, f(s))
    assert all(out is not s and storage(out) == storage(s) for out in actual)


def test_in_place_torch_methods_outside_the_op_table_compile():
    """x.copy_(src) (broadcast and cast) and x.op_(...) through the
    out-of-place op, on views too (they were graph breaks)."""
    def f(x, s, index):
        y = x * 1
        y[0].copy_(s)
        y.index_add_(0, index, x)
        x.copy_(s.double())
        return y, x

    args = (torch.randn(3, 4), torch.randn(4), torch.tensor([0, 2, 2]))
    eager_args = [a.clone() for a in args]
    expected = f(*eager_args)
    compiled_args = [a.clone() for a in args]
    assert_outputs_close(dynafuse.compile(f)(*compiled_args), expected)
    assert_outputs_close(compiled_args, eager_args)
    assert_compiled()


def test_tensor_exponents_compile():
    def f(x, y):
        return x ** y, torch.pow(x.abs(), y), 2 ** y, torch.pow(2.5, y)

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    assert_outputs_close(dynafuse.compile(f)(x, y), f(x, y))
    assert_compiled()


def _compare_with_eager(fn, *args):
    """Eager's values and dtype (or its exception type), compiled without a
    graph break."""
    try:
        expected = fn(*args)
    except Exception as error:
        with pytest.raises(type(error)):
            dynafuse.compile(fn)(*args)
        return
    actual = dynafuse.compile(fn)(*args)
    assert_outputs_close(actual, expected)
    assert dynafuse.stats()["graph_breaks"] == 0, dynafuse._C.break_reasons()


@pytest.mark.parametrize("fn", [
    lambda x: torch.softmax(x, 1, dtype=torch.float64),
    lambda x: F.log_softmax(x, dim=0, dtype=torch.float32),
    lambda x: x.softmax(-1, dtype=torch.float16),
    lambda x: x.log_softmax(-1, torch.float64),
], ids=["torch", "functional", "method", "positional"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_softmax_with_a_dtype_casts_first(fn, dtype):
    x = (torch.randn(3, 5) * 4).to(dtype)
    _compare_with_eager(fn, x)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (2, 3)])
def test_softmax_and_logsumexp_over_empty_dims(shape):
    """An empty softmax is empty and logsumexp over nothing is -inf, as in
    eager (their max shift broke the graph: amax has no identity)."""
    def f(x):
        return x.logsumexp(1), x.log_softmax(1), x.softmax(0), x.logsumexp(0, keepdim=True)

    _compare_with_eager(f, torch.randn(shape))


@pytest.mark.parametrize("fn", [
    lambda b, c: torch.add(b, c, alpha=2), lambda b, c: torch.add(b, c, alpha=0),
    lambda b, c: torch.add(b, True, alpha=2), lambda b, c: torch.add(b, True, alpha=0),
    lambda b, c: torch.add(-1, c, alpha=2), lambda b, c: torch.add(b, 3, alpha=2),
    lambda b, c: b.clone().add_(c, alpha=3), lambda b, c: torch.sub(b, c, alpha=2),
], ids=["alpha2", "alpha0", "true_alpha2", "true_alpha0", "int_first", "int_other",
        "in_place", "sub"])
def test_bool_addition_with_alpha(fn):
    _compare_with_eager(fn, *_bool_pair())


@pytest.mark.parametrize("fn", [
    lambda b, c: b.clamp(max=c), lambda b, c: b.clamp(min=c), lambda b, c: b.clamp(0, 1),
    lambda b, c: b.clamp(-2, 1), lambda b, c: b.clamp(0.5),
    lambda b, c: b.clamp(max=torch.arange(4)), lambda b, c: torch.clamp(b, c, c),
    lambda b, c: b.clamp(min=False), lambda b, c: b.clamp(max=True),
], ids=["max_tensor", "min_tensor", "ints", "negative", "float", "int_tensor", "both_bools",
        "bool_scalar_min", "bool_scalar_max"])
def test_clamp_of_bools(fn):
    _compare_with_eager(fn, *_bool_pair())


def _bool_pair():
    """Two bool tensors with every pairing of values."""
    return torch.tensor([True, False, True, False]), torch.tensor([False, False, True, True])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("norm,weight_size", [
    (lambda x, w: F.layer_norm(x, x.shape[-2:]), 5),
    (lambda x, w: F.layer_norm(x, x.shape[-1:], w, w), 5),
    (lambda x, w: F.rms_norm(x, x.shape[-1:], w), 5),
    (lambda x, w: F.group_norm(x, 2, w, w), 4),
], ids=["layer_norm", "layer_norm_affine", "rms_norm", "group_norm"])
def test_low_precision_norms_compute_in_float(norm, weight_size, dtype):
    """f16/bf16 norms accumulate and normalize in f32 and round once, as
    ATen's do (channels-last inputs split them into kernels whose buffers
    were f16: 0.01 off)."""
    x = torch.randn(2, 4, 3, 5).to(dtype).contiguous(memory_format=torch.channels_last)
    x[0, 0] += 20
    w = torch.randn(weight_size).to(dtype)
    expected = norm(x, w)
    actual = dynafuse.compile(norm)(x, w)
    reference = norm(x.float(), w.float()).to(dtype)
    assert actual.dtype == expected.dtype
    # Within one rounding of the f32 result, as eager is.
    torch.testing.assert_close(actual.float(), reference.float(), rtol=2 ** -7, atol=2 ** -7)
    assert_compiled()


def test_layer_norm_with_a_weight_and_no_bias_keeps_eagers_zero_signs():
    def f(x, w):
        return 1 / F.layer_norm(x, (3,), w)

    x = torch.tensor([[1.0, 1.0, 1.0], [2.0, -2.0, 0.0]])
    w = torch.tensor([-1.0, 2.0, -3.0])
    assert torch.equal(dynafuse.compile(f)(x, w), f(x, w))
    assert_compiled()


def test_copy_from_a_view_of_the_target_runs_eagerly():
    """x.copy_(src) where src shares x's memory gives what eager's copy
    order gives: the call runs eagerly (it was a functional copy)."""
    def f(x):
        return x.copy_(x.select(1, 0).unsqueeze(1))

    x = torch.randn(2, 3, 4)
    expected = f(x.clone())
    actual = dynafuse.compile(f)(x.clone())
    assert torch.equal(actual, expected)
    assert dynafuse.stats()["graph_breaks"] == 1


@pytest.mark.parametrize("fn", [
    lambda x: (x.mT.view(-1),),
    lambda x: ((x < 0).mT.view(-1),),
    lambda x: ((x * 2).transpose(0, 1).view(4),),
    lambda x: (x.mT.view(2, 1, 2), x.view(-1)),
], ids=["input", "comparison", "product", "allowed"])
def test_view_where_the_strides_allow_none_raises_as_eager(fn):
    """view() of a transposed tensor raises in eager: the reshape capture
    emits marked the tensor's memory uncertain before the check, which
    then could not tell (the compiled view returned a copy)."""
    _compare_with_eager(fn, torch.randn(2, 2))


@pytest.mark.parametrize("fn", [
    lambda x: x - True, lambda x: torch.sub(x, False), lambda x: True - x,
    lambda x: x.sub_(True)], ids=["operator", "function", "reflected", "in_place"])
def test_subtracting_a_python_bool_raises_as_eager(fn):
    with pytest.raises(NotImplementedError):
        fn(torch.randn(3))
    with pytest.raises(NotImplementedError):
        dynafuse.compile(fn)(torch.randn(3))


def test_item_assignment_from_the_targets_own_memory_runs_eagerly():
    def overlapping(x):
        x[::3] = x
        return x

    def shifted(x):
        x[0] = x[1]
        return x

    with pytest.raises(RuntimeError):
        overlapping(torch.ones(4))
    with pytest.raises(RuntimeError):
        dynafuse.compile(overlapping)(torch.ones(4))
    dynafuse.reset()
    x = torch.randn(3, 2)
    # Rows apart in memory, or every element onto itself: the functional
    # copy is eager's, compiled.
    assert torch.equal(dynafuse.compile(shifted)(x.clone()), shifted(x.clone()))
    assert_compiled()

    def onto_itself(x):
        x[None] = x
        x[:] = x
        return x * 2

    dynafuse.reset()
    assert torch.equal(dynafuse.compile(onto_itself)(x.clone()), onto_itself(x.clone()))
    assert_compiled()


def test_view_of_a_transposed_input_raises_after_a_size_change():
    """With symbolic sizes too: no view found is a break, and eager decides
    (the compiled call returned a copy)."""
    def f(x):
        return x.view(x.shape[0], -1) * 2

    compiled = dynafuse.compile(f)
    for rows in (3, 5, 7):
        x = torch.randn(rows, 4)
        assert_outputs_close(compiled(x), f(x))
        transposed = torch.randn(rows, 3, 4).transpose(1, 2)
        with pytest.raises(RuntimeError):
            f(transposed)
        with pytest.raises(RuntimeError):
            compiled(transposed)


@pytest.mark.parametrize("backend", ["interp", "llvm"] + (["mlir"] if "mlir" in dynafuse._C.backends() else []))
def test_half_values_cast_to_other_dtypes_are_rounded_first(backend):
    """Kernels compute f16/bf16 in f32; a half result cast to an integer
    or a wider float is rounded to its type first (round_f16/round_bf16),
    as eager's half op rounds it (an int64 of a bf16 product was truncated
    from the unrounded f32)."""
    def f(x):
        h = x.bfloat16()
        return ((h * 1.01).long(), (x.half() * 1.001).int(), (h * 1.01).float(),
                (x.half() * 1.001).double(), (h.float().exp().bfloat16() * 3).long(),
                (h * 1.01).half())

    x = torch.arange(-400, 400).view(8, 100) * 7
    got, want = dynafuse.compile(f, backend=backend)(x), f(x)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert_compiled()
