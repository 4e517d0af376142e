"""Trust regressions in training (issue 40): gradients that must be eager's
at ties, NaNs, infinities, size changes, expanded leaves and overwrites,
gradients of outputs a loss leaves out, and training outputs that view
inputs or other outputs. Each case was a wrong gradient, a crash or a
silently accepted input before its fix (test_trust.py has the inference
cases)."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def storage(tensor):
    return tensor.untyped_storage().data_ptr()


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


@pytest.mark.parametrize("f", [lambda x: x ** 0, lambda x: x ** -0.0, lambda x: x.pow(0.0) * 2],
                         ids=["int", "negative_zero", "scaled"])
def test_outputs_whose_gradients_are_all_zero_still_require_grad(f):
    """x ** 0 has a grad_fn in eager and gives x a zero gradient; an entry
    whose every gradient is a symbolic zero ran as inference (no grad_fn,
    x.grad None), so it runs eagerly."""
    x = torch.randn(3, requires_grad=True)
    out = dynafuse.compile(f)(x)
    expected = f(x.detach().clone().requires_grad_())
    assert_outputs_close(out, expected)
    assert out.requires_grad
    out.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.zeros(3))


def remainder_by_a_scalar(x, other):
    return x % other


def test_remainder_gradient_for_other_rounds_as_eager_divides():
    # eager: grad_other = -(g * div(x, other, rounding_mode="floor")), nan
    # where x is infinite (floor(x / other) would be inf); fuzz seed 23 p291
    x = torch.tensor([[-1.7, float("-inf"), 1.6], [0.9, 1.5, float("inf")]])
    compiled = dynafuse.compile(remainder_by_a_scalar, fullgraph=True)
    grads = []
    for fn in (remainder_by_a_scalar, compiled):
        leaf_x = x.clone().requires_grad_()
        other = torch.tensor(-0.0373, requires_grad=True)
        fn(leaf_x, other).sum().backward()
        grads.append((leaf_x.grad, other.grad))
    assert_compiled()
    torch.testing.assert_close(grads[1], grads[0], equal_nan=True)
    assert grads[1][1].isnan()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_reduced_precision_log_softmax_of_a_fused_producer_stays_at_most_zero(dtype, dim):
    # fuzz seed 23 p215: an f16 max beside the f32 x it came from made
    # log_softmax positive; now normalized in f32 and rounded once
    x = torch.tensor([[1.9531, 0.00045, 0.4661], [2.0, 0.066, 8.0]], dtype=dtype)
    fn = lambda t: t.reciprocal().log_softmax(dim)  # noqa: E731
    actual = dynafuse.compile(fn, fullgraph=True)(x)
    assert_compiled()
    assert actual.dtype == dtype and (actual <= 0).all()
    torch.testing.assert_close(actual, fn(x), rtol=2e-2, atol=2e-2)
    softmax = dynafuse.compile(lambda t: t.reciprocal().softmax(dim), fullgraph=True)(x)
    torch.testing.assert_close(softmax, x.reciprocal().softmax(dim), rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape,normalized", [((5, 5), (5,)), ((4, 6), (4, 6)),
                                              ((2, 3, 8), (8,)), ((3, 1), (1,))])
def test_rms_norm_gradient_uses_the_default_eps_of_its_dtype(dtype, shape, normalized):
    """rms_norm without eps takes its dtype's machine epsilon in the
    backward too (float64's for double inputs, as ATen; the backward took
    float32's, 1e-7 off on unit-scale inputs: fuzz seed 35)."""
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    w = torch.randn(shape, dtype=dtype)

    def f(x):
        return (F.rms_norm(x, normalized) * w).sum()

    f(x).backward()
    expected, x.grad = x.grad.clone(), None
    dynafuse.compile(f)(x).backward()
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(x.grad, expected, rtol=tolerance, atol=tolerance)
    assert dynafuse.stats()["captures"] == 1 and dynafuse.stats()["graph_breaks"] == 0
