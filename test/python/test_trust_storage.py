"""Trust regressions in storage (issue 40): which results share memory with
the inputs and with each other, as eager's do, through views, reshapes,
unflatten, contiguous copies, gathers and in-place updates through
transposes, for every input layout and after size changes. Each case was a
result whose storage differed from eager's before its fix (test_trust.py
has the other cases)."""
import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def storage(tensor):
    return tensor.untyped_storage().data_ptr()


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


def _updated_input_layouts():
    """Inputs whose layout decides whether a reshape views them: contiguous,
    strided with a size-1 last dim (a view after all), strided (a copy) and
    transposed (a copy)."""
    return {"contiguous": lambda: torch.randn(2, 2, 1),
            "strided_unit_dim": lambda: torch.randn(2, 2, 3)[..., 1::2],
            "strided": lambda: torch.randn(2, 2, 5)[..., 1::2],
            "transposed": lambda: torch.randn(2, 3).t()}


@pytest.mark.parametrize("layout", list(_updated_input_layouts()))
@pytest.mark.parametrize("f", [
    lambda x: (torch.relu_(x), x.reshape(-1))[1],
    lambda x: (x.add_(1), x.reshape(x.shape[0], -1))[1],
    lambda x: (x.mul_(2), x.view(-1))[1]],
    ids=["relu_reshape", "add_reshape", "mul_view"])
def test_reshapes_of_an_input_updated_in_place_follow_its_strides(layout, f):
    """After an in-place update, an input's latest value is the input's
    memory: a reshape of it is a view where the input's strides allow one
    (it was a copy of a strided input's new values), and view() raises where
    they do not, as eager does (it returned a copy)."""
    make = _updated_input_layouts()[layout]
    torch.manual_seed(1)
    x_eager = make()
    torch.manual_seed(1)
    x_compiled = make()
    try:
        expected = f(x_eager)
    except RuntimeError as error:
        with pytest.raises(RuntimeError):
            dynafuse.compile(f)(x_compiled)
        return
    actual = dynafuse.compile(f)(x_compiled)
    assert_outputs_close(actual, expected)
    assert torch.equal(x_compiled, x_eager)
    assert_compiled()
    _same_storage_relations([actual], [expected], [x_compiled], [x_eager])


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_views_of_an_updated_input_with_symbolic_sizes_keep_every_step(layout):
    """Fuzzer seed 8 program 561: after an in-place update, a reshape of the
    input whose view-or-copy capture cannot decide (symbolic sizes) was
    dropped from the output's view chain, so x.reshape(-1).squeeze(0) came
    back with the input's shape. Sizes 1x1 twice, then larger ones (the
    third call is the symbolic graph), each against eager: values, shape,
    the input's new values and the storage relations."""
    def f(x):
        x.copy_(x * 1)
        return x.reshape(-1).squeeze(0)

    make = {"contiguous": lambda n: torch.randn(n, n),
            "transposed": lambda n: torch.randn(n, n).t(),
            "strided": lambda n: torch.randn(n, 2 * n)[:, ::2]}[layout]
    compiled = dynafuse.compile(f)
    for n in (1, 1, 2, 3):
        torch.manual_seed(n)
        x_eager = make(n)
        x_compiled = x_eager.clone() if layout == "contiguous" else make(n)
        if layout != "contiguous":
            x_compiled.copy_(x_eager)
        expected = f(x_eager)
        actual = compiled(x_compiled)
        assert actual.shape == expected.shape
        assert_outputs_close(actual, expected)
        assert torch.equal(x_compiled, x_eager)
        _same_storage_relations([actual], [expected], [x_compiled], [x_eager])
    # A graph for the 1x1 calls, then one with symbolic sizes (the strided
    # input's strides may ask for one more); every call compiled.
    captures = dynafuse.stats()["captures"]
    assert captures in (2, 3)
    assert_compiled(captures=captures)
