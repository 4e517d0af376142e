"""Trust regressions (issue 40): results whose storage must follow eager's,
values after size changes, reductions of bools and empty dims, and inputs
eager refuses, which the compiled function must refuse with eager's
exception type. Each case was a wrong result, a crash or a silently
accepted input before its fix."""
import itertools

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


def _same_storage_relations(actual, expected, args_actual, args_expected):
    """Which outputs are one object or share memory, with each other and
    with the inputs, is the same in both runs."""
    def relations(outputs, args):
        items = list(outputs) + list(args)
        found = set()
        for i in range(len(outputs)):
            for j in range(i + 1, len(items)):
                if items[i] is items[j]:
                    found.add((i, j, "is"))
                elif items[i].numel() and items[j].numel() and storage(items[i]) == storage(items[j]):
                    found.add((i, j, "shares"))
        return found
    assert relations(actual, args_actual) == relations(expected, args_expected)


def _compiled_with_eagers_storage(f, x):
    """f compiled gives eager's values, compiled whole, and the same outputs
    are one object or share memory with each other and with x."""
    actual = dynafuse.compile(f)(x)
    expected = f(x)
    assert_outputs_close(actual, expected)
    assert_compiled()
    _same_storage_relations(actual, expected, [x], [x])


def _layouts(shape):
    """The same values laid out contiguous, transposed and strided."""
    base = torch.randn(shape)
    wide = torch.randn(*shape[:-1], 2 * shape[-1])
    return [base, base.mT.contiguous().mT, wide[..., ::2].copy_(base)]


@pytest.mark.parametrize("dim,sizes", [(0, (2, -1)), (1, (3, 2)), (-1, (1, -1)),
                                       (1, (6,)), (0, (-1, 1, 2))])
def test_unflatten_is_a_view_of_any_layout(dim, sizes):
    """unflatten splits one dim: a view whatever the strides (it was a torch
    call whose result the graph copied)."""
    def f(x):
        return (x.unflatten(dim, sizes),)

    for x in _layouts((4, 6)):
        dynafuse.reset()
        (actual,) = dynafuse.compile(f)(x)
        (expected,) = f(x)
        assert_outputs_close(actual, expected)
        assert_compiled()
        assert storage(actual) == storage(x) and actual.stride() == expected.stride()
        actual.fill_(7.0)
        assert bool((x == 7.0).all())


@pytest.mark.parametrize("dim,sizes", [(0, (2, -1)), (0, (-1, -1)), (1, ()), (2, (1, -1)),
                                       (0, (5, -1)), (1, (4, 2))])
def test_unflatten_raises_as_eager(dim, sizes):
    def f(x):
        return x.unflatten(dim, sizes) + 1

    for shape in [(4, 6), (3, 6), (0, 6)]:
        x = torch.randn(shape)
        try:
            expected = f(x)
        except Exception as error:
            with pytest.raises(type(error)):
                dynafuse.compile(f)(x)
        else:
            assert_outputs_close(dynafuse.compile(f)(x), expected)


@pytest.mark.parametrize("fn", [
    lambda x: (x.unflatten(0, (1, -1)),),
    lambda x: (x.view(1, -1, x.shape[1]),),
    lambda x: (x.reshape(x.shape[0], 1, x.shape[1]),),
], ids=["unflatten", "view", "reshape"])
def test_splitting_reshapes_of_transposed_inputs_view_them_after_size_changes(fn):
    """A reshape that only splits dims views any layout, with symbolic sizes
    too (the strided form was worked out for constant sizes only)."""
    compiled = dynafuse.compile(fn)
    for rows in (3, 5, 7, 2):
        x = torch.randn(4, rows).t()
        (actual,) = compiled(x)
        (expected,) = fn(x)
        assert_outputs_close(actual, expected)
        assert storage(actual) == storage(x) and actual.stride() == expected.stride()
    stats = dynafuse.stats()
    assert stats["symbolic_captures"] >= 1 and stats["graph_breaks"] == 0, stats


@pytest.mark.parametrize("reduce", [
    lambda x: x.sum(0, keepdim=True), lambda x: x.amax(1), lambda x: x.argmax(0, keepdim=True),
    lambda x: x.std(1), lambda x: x.logsumexp(0), lambda x: x.tril(),
    lambda x: x.mean(1, keepdim=True)],
    ids=["sum", "amax", "argmax", "std", "logsumexp", "tril", "mean"])
def test_contiguous_of_a_reduction_of_a_transposed_input_is_itself(reduce):
    """Eager writes reductions and triangles row-major whatever the
    operand's layout: their contiguous() is the tensor itself."""
    def f(x):
        y = reduce(x)
        return y, y.contiguous(), y.reshape(-1)

    x = torch.randn(6, 5).t()
    _compiled_with_eagers_storage(f, x)


def test_contiguous_copy_of_a_strided_input_is_shared_by_its_views():
    """x.contiguous() of a non-contiguous input is certainly a copy (the
    input's strides are known): views of it returned beside it share it."""
    def f(x):
        y = x.contiguous()
        return y.permute(1, 0), y, y[1:]

    x = torch.randn(5, 4).t()
    _compiled_with_eagers_storage(f, x)


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


@pytest.mark.parametrize("make", [
    lambda: torch.randn(2, 1, 3).expand(2, 4, 3),
    lambda: torch.randn(4, 7)[:, ::2],
    lambda: torch.randn(3, 4).t(),
], ids=["expanded", "strided", "transposed"])
def test_pointwise_results_of_sparse_inputs_are_row_major_as_in_eager(make):
    """TensorIterator writes a fresh row-major result for operands whose
    strides keep the dims in order, however sparse (a broadcast or strided
    input): their flatten is a view there (it was a copy), a transposed
    one's is not."""
    def f(x):
        y = (x >= 0) | (x < -1)
        z = x * 2
        return y.flatten(), y, z.flatten(), z

    x = make()
    _compiled_with_eagers_storage(f, x)


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


@pytest.mark.parametrize("fn", [
    lambda x: torch.cat([x * 0.25, x], 0),
    lambda x: torch.cat([x, x, x.sin()], 0).sum(0),
    lambda x: torch.stack([x, x * 2]).flatten(),
    lambda x: torch.remainder(x.flatten(), 2.0),
], ids=["cat", "cat3", "stack", "flatten"])
def test_backward_after_a_size_change_binds_the_forwards_sizes(fn):
    """A backward whose inputs give a size symbol only in an expression (the
    gradient of a concatenation: 2*s0; of a flatten: s0*s1) takes it from
    the forward's inputs (it raised 'unbound symbol' out of backward())."""
    compiled = dynafuse.compile(fn)
    for rows in (1, 1, 2, 3, 5):
        x = torch.randn(rows, 3, rows + 1, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        weights = torch.randn(fn(x2).shape)
        (fn(x2) * weights).sum().backward()
        (compiled(x) * weights).sum().backward()
        assert_outputs_close(x.grad, x2.grad)
    stats = dynafuse.stats()
    assert stats["symbolic_captures"] >= 1 and stats["graph_breaks"] == 0, stats


def expanded_leaf_grads(fn, base):
    """The compiled and the eager gradient of a leaf that expands base
    [1, n] to [2, n] (its elements overlap), under random output weights."""
    x = base.expand(2, 3).detach().requires_grad_()
    x_compiled = base.expand(2, 3).detach().requires_grad_()
    weights = torch.randn(fn(x).shape)
    (fn(x) * weights).sum().backward()
    (dynafuse.compile(fn)(x_compiled) * weights).sum().backward()
    return x_compiled.grad, x.grad


@pytest.mark.parametrize("fn", [
    lambda x: x.select(-1, 1), lambda x: x.transpose(0, 1), lambda x: x * 3],
    ids=["select", "transpose", "product"])
def test_gradients_of_an_expanded_leaf_are_eagers(fn):
    """A leaf whose elements overlap (expanded) runs eagerly: outputs viewing
    an input are strided views of it, whose as_strided backward shares the
    gradient among the overlapping elements ([0.32, 0.32] for [0, 0.64])."""
    assert_outputs_close(*expanded_leaf_grads(fn, torch.randn(1, 3)))


def test_relu_gradient_passes_nan_as_eager():
    def f(x):
        return F.relu(torch.log1p(x))

    x = torch.tensor([0.5, -0.3, 2.0, -2.0], requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    f(x).sum().backward()
    dynafuse.compile(f)(x_compiled).sum().backward()
    assert_outputs_close(x_compiled.grad, x.grad)
    assert_compiled()


def every_order_of(count):
    """count tensors whose elements run through every order of 1, 2, 3 and
    NaN among count operands (ties and NaNs included)."""
    nan = float("nan")
    rows = list(itertools.product([1.0, 2.0, 3.0, nan], repeat=count))
    return [torch.tensor(column) for column in zip(*rows)]


@pytest.mark.parametrize("fn,count", [
    (lambda x, low, high: torch.clamp(x, low, high) * 3, 3),
    (lambda x, low: x.clamp(min=low) * 3, 2),
    (lambda x, high: torch.clamp(x, max=high) * 3, 2),
    (lambda x, high: x.clamp_max(high) * 3, 2),
    (lambda x, y: torch.maximum(x, y) * 3, 2),
    (lambda x, y: torch.minimum(x, y) * 3, 2)],
    ids=["clamp", "clamp_min", "clamp_max", "clamp_max_method", "maximum", "minimum"])
def test_gradients_of_tensor_bounds_are_eagers_at_ties_and_nan(fn, count):
    """Every order of x and its tensor bounds, ties and NaNs included: eager
    splits ties with one bound in half, gives a NaN's gradient to both
    operands of maximum/minimum and one-bound clamp, and gives max all of it
    when max < min (equal bounds gave min nothing; NaNs were lost)."""
    def grads(run):
        leaves = [t.clone().requires_grad_() for t in every_order_of(count)]
        (run(*leaves) * torch.arange(1.0, leaves[0].numel() + 1)).sum().backward()
        return [leaf.grad for leaf in leaves]

    for got, want in zip(grads(dynafuse.compile(fn)), grads(fn)):
        assert torch.equal(got, want), (got, want)
    assert_compiled()


@pytest.mark.parametrize("fn", [
    lambda x: x.clamp(0.0, 1.5), lambda x: x.clamp(min=0.0), lambda x: x.clamp(max=1.5),
    lambda x: F.relu6(x), lambda x: F.hardtanh(x, 0.0, 1.5)],
    ids=["clamp", "clamp_min", "clamp_max", "relu6", "hardtanh"])
def test_gradients_of_number_bounds_at_ties_and_nan_are_eagers(fn):
    """clamp with number bounds passes the gradient strictly inside them
    (not at a bound, not at NaN); hardtanh's backward zeroes it only at or
    beyond its bounds (a NaN passes)."""
    def grad(run):
        x = torch.tensor([0.0, 1.5, 0.7, float("nan"), -3.0, 9.0, 6.0], requires_grad=True)
        (run(x) * torch.arange(1.0, 8.0)).sum().backward()
        return x.grad

    assert torch.equal(grad(dynafuse.compile(fn)), grad(fn))
    assert_compiled()


@pytest.mark.parametrize("make", [lambda: torch.randn(1, 3), lambda: torch.ones(2, 3),
                                  lambda: torch.randn(4, 3)], ids=["one_row", "constant", "random"])
def test_std_gradient_at_zero_spread_is_eagers(make):
    """std over elements that do not vary has gradient 0 in eager (it masks
    g / (2 * std)); through sqrt's rule it was NaN."""
    def f(x):
        return x.std(0, unbiased=False) * 2 + x.std(0, keepdim=True).sum()

    x = make().requires_grad_()
    x_compiled = x.detach().clone().requires_grad_()
    f(x).sum().backward()
    dynafuse.compile(f)(x_compiled).sum().backward()
    assert_outputs_close(x_compiled.grad, x.grad)
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


def test_training_views_of_expanded_inputs_run_eagerly_and_the_rest_compiles():
    def view(x):
        return x.select(-1, 1)

    def product(x):
        return x * 3

    base = torch.randn(1, 3)
    for fn, breaks in ((view, 1), (product, 0)):
        dynafuse.reset()
        assert_outputs_close(*expanded_leaf_grads(fn, base))
        assert dynafuse.stats()["graph_breaks"] == breaks


def compiled_and_eager_grads(fn, make_inputs, loss_of):
    """Gradients of fn's inputs in eager and compiled, with loss_of picking
    what of the outputs the loss uses."""
    def grads(run):
        leaves = [t.detach().clone().requires_grad_() for t in make_inputs()]
        loss_of(run(*leaves)).backward()
        return [leaf.grad for leaf in leaves]

    return grads(dynafuse.compile(fn)), grads(fn)


@pytest.mark.parametrize("values", [[2.0, 1.0, float("inf")], [float("nan"), 0.0, 3.0],
                                    [0.5, -1.0, 2.0]], ids=["inf", "nan", "finite"])
def test_an_output_the_loss_did_not_use_adds_nothing_to_gradients(values):
    """The loss uses one output; the other's gradient never arrives. Eager
    skips it; fed as zeros, 0 * exp(inf) made NaN gradients (the backward
    now runs a variant with that tangent a symbolic zero)."""
    def f(x, w):
        h = x * w
        big = torch.exp(h * 3)
        return h.sum(), big

    make = lambda: [torch.tensor(values), torch.tensor([1.5, -0.5, 2.0])]
    for loss_of in (lambda out: out[0], lambda out: out[0] + out[1].sum()):
        got, want = compiled_and_eager_grads(f, make, loss_of)
        for g, w in zip(got, want):
            assert_outputs_close(g, w)
        assert_compiled()


def test_gradients_of_several_outputs_arriving_in_turn_are_eagers():
    """Each subset of three outputs in the loss (the variant for each is
    compiled once) gives eager's gradients, None where eager's is."""
    def f(x, y):
        return x.sin() * y, (x * 2).exp(), y.square()

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    make = lambda: [x, y]
    for used in [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2), (1,)]:
        got, want = compiled_and_eager_grads(
            f, make, lambda out: sum(out[k].sum() * (k + 1) for k in used))
        for g, w in zip(got, want):
            assert (g is None) == (w is None), used
            if w is not None:
                assert_outputs_close(g, w)


@pytest.mark.parametrize("fn", [lambda x: torch.amax(x), lambda x: x.amin(0),
                                lambda x: torch.amax(x.sqrt().exp(), 0),
                                lambda x: torch.min(x), lambda x: x.max() * 2],
                         ids=["amax", "amin_dim", "amax_of_exp", "min", "max"])
def test_extreme_gradient_of_a_nan_extreme_is_eagers(fn):
    """Nothing equals a NaN extreme: amax's (g / count) * mask is NaN over
    the slice, where a masked where gave 0; max()/min() of the whole tensor
    share it among the NaNs (eager's evenly_distribute_backward)."""
    for row in ([1.0, float("nan"), 2.0], [1.0, 2.0, float("inf")], [3.0, 3.0, 1.0]):
        make = lambda: [torch.tensor([row, [0.5, 0.25, 4.0]]).t().contiguous()]
        got, want = compiled_and_eager_grads(fn, make, lambda out: (out * 2).sum())
        assert_outputs_close(got[0], want[0])
        assert_compiled()


@pytest.mark.parametrize("fn", [lambda x: x.var(correction=0), lambda x: x.var(0),
                                lambda x: x.std(1, keepdim=True)], ids=["var", "var_dim", "std"])
def test_variance_gradient_with_an_infinite_element_is_eagers(fn):
    """var and std have eager's rule, 2 / (N - c) * g * (x - mean): through
    the decomposition the mean's own term (zero in exact arithmetic) made
    every element NaN."""
    make = lambda: [torch.tensor([[1.0, 2.0], [float("-inf"), 0.5], [3.0, float("inf")]])]
    got, want = compiled_and_eager_grads(fn, make, lambda out: (out * 3).sum())
    assert_outputs_close(got[0], want[0])
    assert_compiled()


@pytest.mark.parametrize("overwrite", [lambda t: t.zero_(), lambda t: t.fill_(2.5)],
                         ids=["zero_", "fill_"])
def test_overwriting_a_tensor_that_requires_grad_keeps_its_history(overwrite):
    """x.zero_() / x.fill_(v) of a tensor with history: the result still
    requires grad, and what came before gets zeros (eager's fill_ rule),
    not None; its backward formulas run on them (0 * silu'(inf) is NaN)."""
    def f(x, y):
        h = F.silu(x * y)
        overwrite(h)
        return h * 2

    make = lambda: [torch.tensor([1.0, float("inf"), -2.0]), torch.tensor([0.5, 1.0, 2.0])]
    out = dynafuse.compile(f)(*[t.requires_grad_() for t in make()])
    assert out.requires_grad
    got, want = compiled_and_eager_grads(f, make, lambda out: out.sum())
    for g, w in zip(got, want):
        assert w is not None and g is not None
        assert_outputs_close(g, w)
    assert_compiled()


def _transposed_output(x):
    y = torch.minimum(x, x) * 2
    return y, y.transpose(1, 2)


def _selected_and_flattened_outputs(x):
    y = x.exp()
    return y, y[0], y.flatten()


def _view_chain_outputs(x):
    y = x.sin()
    z = y.unsqueeze(0).select(0, 0)
    return z, y, z[:, 1:]


@pytest.mark.parametrize("f", [_transposed_output, _selected_and_flattened_outputs,
                               _view_chain_outputs])
def test_training_outputs_viewing_outputs_share_memory_and_gradients(f):
    """In training too, outputs that are views of another output in eager
    are views of it (made from it after the backward node is attached, so
    autograd routes their gradients through it; they were copies), and
    gradients are eager's with any subset of them in the loss."""
    x = torch.randn(2, 3, 4)
    out = dynafuse.compile(f)(x.clone().requires_grad_())
    eager = f(x.clone().requires_grad_())
    for a, b in zip(out, eager):
        assert_outputs_close(a, b)
    assert_compiled()
    storage = lambda t: t.untyped_storage().data_ptr()
    assert [storage(o) == storage(out[0]) for o in out] == [True] * len(out)
    for used in [(0,), (1,), (0, 1), tuple(range(len(eager)))]:
        weights = [torch.randn(o.shape) for o in eager]
        loss_of = lambda outs: sum((outs[k] * weights[k]).sum() for k in used)
        got, want = compiled_and_eager_grads(f, lambda: [x], loss_of)
        assert_outputs_close(got[0], want[0])


@pytest.mark.parametrize("f", [
    lambda x: (x.transpose(0, 1).index_select(-2, torch.arange(0, x.shape[1], 2)),
               x.transpose(0, 1)),
    lambda x: (torch.gather(x.narrow(0, 0, x.shape[0]), 1,
                            torch.zeros(x.shape, dtype=torch.long)), x.narrow(0, 0, x.shape[0])),
    lambda x: (x.permute(1, 0)[torch.arange(x.shape[1]) % 2], x.permute(1, 0))],
    ids=["index_select", "gather", "indexing"])
def test_gathered_views_of_inputs_stay_views(f):
    """A view of an input that a gather also reads is returned as a view of
    the input, as eager's (lowering had copied it into a buffer for the
    gather, and returned the copy)."""
    compiled = dynafuse.compile(f)
    for shape in [(3, 4), (1, 2), (5, 2)]:
        x = torch.randn(shape)
        got, want = compiled(x), f(x)
        for a, b in zip(got, want):
            assert_outputs_close(a, b)
        assert got[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert got[1].stride() == want[1].stride()
    stats = dynafuse.stats()
    assert stats["captures"] >= 1 and stats["graph_breaks"] == 0, stats
    assert not stats["compile_failures"] and not stats["run_failures"], stats


def _fill_through_transpose(x):
    flat = x.flatten()
    x.mT.fill_(1e-3)
    return (flat,)


def _setitem_through_transpose(x):
    x.T[..., :1] = 2.0
    return x, x.reshape(-1)


def _setitem_then_reshape(x):
    v = x.transpose(1, -2)
    v[None, :1] = -2.0
    return v, x.reshape(-1)


@pytest.mark.parametrize("g", [_fill_through_transpose, _setitem_through_transpose,
                               _setitem_then_reshape])
def test_reshapes_of_an_input_updated_through_a_transpose_are_views(g):
    """An input's latest value is the input's memory, however the update
    computed it (scattered back through a transpose): reshapes of it are
    views of the input, as eager's (they were copies with the new values)."""
    for shape in [(2, 2), (3, 5)]:
        x = torch.randn(shape)
        y = x.clone()
        got, want = dynafuse.compile(g)(x), g(y)
        assert_outputs_close(x, y)
        for a, b in zip(got, want):
            assert_outputs_close(a, b)
            assert (a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
                (b.untyped_storage().data_ptr() == y.untyped_storage().data_ptr())
    stats = dynafuse.stats()
    assert stats["captures"] >= 1 and stats["graph_breaks"] == 0, dynafuse._C.break_reasons()


def _clone_then_flatten(x):
    copy = torch.clone(x)
    return copy, copy.flatten(0)


def _select_then_contiguous(x):
    row = x.select(1, 0)
    return row.contiguous(), row


@pytest.mark.parametrize("make", [
    lambda: torch.randn(2, 3).t(), lambda: torch.randn(3, 4),
    lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    lambda: torch.randn(4, 6)[:, ::2]], ids=["transposed", "contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("f", [_clone_then_flatten, _select_then_contiguous])
def test_storage_relations_follow_the_inputs_strides(make, f):
    """clone() of a densely permuted input keeps its layout as eager's does
    (a flatten of it copies, where it had viewed a row-major clone), and a
    select of a transposed input that is contiguous by its strides is its
    own contiguous() (it was copied)."""
    x = make()
    got, want = dynafuse.compile(f)(x), f(x)
    for a, b in zip(got, want):
        assert_outputs_close(a, b)
    ptr = lambda t: t.untyped_storage().data_ptr()
    relations = lambda outs: [(ptr(o) == ptr(outs[0]), o is outs[0], ptr(o) == ptr(x)) for o in outs]
    assert relations(got) == relations(want)
    assert_compiled()


def test_an_unused_copy_or_view_leaves_outputs_linked():
    """A flatten of an expanded output that nothing returns (a copy or a
    view capture cannot tell) no longer keeps the expand, returned too,
    from being a view of its base as eager's is."""
    def f(x):
        base = 2 ** x
        wide = base.expand(3, *base.shape)
        torch.flatten(wide, 0, 3)
        return base, wide

    x = torch.randn(1, 1, 2)
    got, want = dynafuse.compile(f)(x), f(x)
    for a, b in zip(got, want):
        assert_outputs_close(a, b)
    assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
    assert got[1].stride() == want[1].stride()
    assert_compiled()


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
