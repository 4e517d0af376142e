"""In-place updates through views (TracerAliases.cpp): views of inputs, views
of views, several views of one base, and views of computed tensors compile
instead of breaking, and every alias sees the update as in eager. What eager
refuses (overlapping memory, expanded tensors, unsafe casts) raises eager's
error; what capture cannot follow breaks the graph."""
import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def clones(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def check(fn, *args, captures=1):
    """fn compiled against eager: the results, and the inputs after the
    call (in-place updates are written back), and the compiled path ran."""
    eager_args, compiled_args = clones(args), clones(args)
    expected = fn(*eager_args)
    actual = dynafuse.compile(fn)(*compiled_args)
    assert_outputs_close(actual, expected)
    assert_outputs_close(compiled_args, eager_args, "inputs after the call")
    assert_compiled(captures)
    return actual, compiled_args


def view_of_view_of_input(c):
    v0 = c[::3]
    v1 = v0[1::2]
    v1.sigmoid_()
    return v0


def slice_of_computed(x):
    y = x * 2
    y[1:3].add_(1)
    return y


def two_views_of_one_base(x):
    y = x * 2
    row, column = y[0], y[:, 1]
    row.mul_(3)
    return y, column


def transpose_of_input(x):
    x.t()[0].zero_()
    return x


def view_of_input(x):
    x.view(2, -1).add_(1)
    return x


def chunk_pieces(x):
    y = x + 0
    first, second = y.chunk(2)
    second.neg_()
    return y, first


def setitem_through_unsqueeze(x):
    x.unsqueeze(0)[0, 1] = 5.0
    return x


def reshape_of_contiguous(x):
    y = x * 1
    y.reshape(-1).add_(1)
    return y


def contiguous_is_itself(x):
    x.contiguous().add_(1)
    return x


def strided_view_of_input(x):
    v = x[::2]
    v.mul_(2)
    return x[1] * 1, v


def view_read_after_base_update(x):
    row = x[0]
    x.add_(1)
    return row * 1


def select_negative_index(x):
    y = torch.tanh(x)
    y[-1].fill_(2.0)
    y.select(1, -2).sub_(1)
    return y


def permuted_views(x):
    y = x.permute(2, 0, 1)
    y[1].mul_(-1)
    return x


CASES = [
    (view_of_view_of_input, (12, 4)),
    (slice_of_computed, (5, 4)),
    (two_views_of_one_base, (5, 4)),
    (transpose_of_input, (5, 4)),
    (view_of_input, (4, 4)),
    (chunk_pieces, (4, 3)),
    (setitem_through_unsqueeze, (4, 3)),
    (reshape_of_contiguous, (3, 4)),
    (contiguous_is_itself, (3, 4)),
    (strided_view_of_input, (6, 3)),
    (view_read_after_base_update, (3, 4)),
    (select_negative_index, (4, 5)),
    (permuted_views, (3, 4, 5)),
]


@pytest.mark.parametrize("fn,shape", CASES, ids=[c[0].__name__ for c in CASES])
def test_update_through_views_matches_eager(fn, shape):
    check(fn, torch.randn(shape))


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_update_through_views_of_non_contiguous_inputs(layout):
    base = torch.randn(8, 6)
    x = base.t() if layout == "transposed" else base[::2]
    check(view_of_view_of_input if layout == "strided" else transpose_of_input, x)


def test_returned_view_of_an_updated_input_shares_its_memory():
    def f(x):
        row = x[0]
        x.add_(1)
        return row

    check(f, torch.randn(3, 4))
    x = torch.randn(3, 4)
    row = dynafuse.compile(f)(x)
    assert row.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    row.fill_(7.0)
    assert torch.equal(x[0], torch.full((4,), 7.0))


def test_updates_through_views_with_symbolic_sizes():
    def f(x):
        y = x * 2
        y[1:].add_(y[0] * 0 + 1)
        return y

    compiled = dynafuse.compile(f)
    for rows in (3, 5, 9):
        x = torch.randn(rows, 4)
        assert_outputs_close(compiled(x.clone()), f(x.clone()))
    assert dynafuse.stats()["graph_breaks"] == 0


@pytest.mark.parametrize("fn,shape", [
    (lambda x: x[1:].add_(x[:-1]), (4,)),           # partial overlap
    (lambda x: x.expand(3, 4).add_(1), (1, 4)),     # expanded
    (lambda x: x.int().add_(1.5), (2, 3)),          # float into int
], ids=["overlap", "expanded", "unsafe_cast"])
def test_what_eager_refuses_raises_eagers_error(fn, shape):
    x = torch.randn(shape)
    with pytest.raises(RuntimeError) as eager:
        fn(x.clone())
    with pytest.raises(RuntimeError) as compiled:
        dynafuse.compile(fn)(x.clone())
    assert str(compiled.value) == str(eager.value)


def test_reshape_whose_aliasing_depends_on_strides_breaks_rather_than_guess():
    def f(x):
        y = x.t().reshape(-1)
        y.add_(1)
        return x, y

    x = torch.randn(3, 4)
    expected = f(x.clone())
    actual = dynafuse.compile(f)(x.clone())
    assert_outputs_close(actual, expected)
    assert dynafuse.stats()["graph_breaks"] == 1


def test_in_place_casts_to_the_tensors_dtype():
    def f(x):
        x.add_(x.double() * 2)
        y = x.int()
        y.mul_(3)
        return x, y

    check(f, torch.randn(3, 4))


def test_a_view_read_after_its_base_took_an_update_through_it():
    """The base's new value is computed from its old views (the update
    scattered back); asking whether a later view is contiguous walked
    round that cycle and overflowed the stack (a fuzzer crash)."""
    def f(x):
        head = x.narrow(0, 0, 2)
        head += head
        picked = torch.where(head > 1, head, 2).select(-1, -1)
        return picked.view(-1), x

    expected = f(torch.arange(7)[::2])
    strided = torch.arange(7)[::2]  # not cloned: the strides are the case
    actual = dynafuse.compile(f)(strided)
    assert_outputs_close(actual, expected)
    assert_compiled()



def interleaved_sections(freq, sections):
    # Qwen3-VL's rotary recomposition: strided slices of one row of freq
    # overwritten, in a loop, from disjoint rows of the same memory
    freqs_thw = freq[0]
    for dim, offset in enumerate((1, 2), start=1):
        idx = slice(offset, sections[dim] * 3, 3)
        freqs_thw[..., idx] = freq[dim, ..., idx]
    return torch.cat((freqs_thw, freqs_thw), dim=-1)


def rotary_sections(position_ids, inv_freq):
    position_ids = position_ids.expand(3, -1, -1)
    freqs = position_ids[..., None].float() * inv_freq  # contiguous in eager
    product = (inv_freq[:, None] @ position_ids[..., None, :].float()).mT  # a transposed view
    return (interleaved_sections(freqs.sin() * 2.0, (2, 3, 3)),
            interleaved_sections(product, (2, 3, 3)))


@pytest.mark.parametrize("positions, fullgraph", [
    (torch.arange(10)[None].expand(2, -1), True),
    (torch.arange(20).reshape(2, 10), True),
    # a cast of a transposed broadcast: eager writes it contiguous, which
    # capture does not model (it refuses the assignment: eager runs it)
    (torch.arange(20).reshape(10, 2).t(), False)])
def test_strided_slices_overwritten_from_disjoint_rows_of_one_buffer(positions, fullgraph):
    inv_freq = torch.rand(9)
    actual = dynafuse.compile(rotary_sections, fullgraph=fullgraph)(positions, inv_freq)
    assert_outputs_close(actual, rotary_sections(positions, inv_freq))
    if fullgraph:
        assert_compiled()


def overlapping_rows(x):
    x[1:] = x[:-1]  # partial overlap: eager raises
    return x


def test_partially_overlapping_assignment_raises_as_eager_raises():
    with pytest.raises(RuntimeError, match="single memory location"):
        overlapping_rows(torch.arange(6.))
    with pytest.raises(RuntimeError, match="single memory location"):
        dynafuse.compile(overlapping_rows)(torch.arange(6.))
