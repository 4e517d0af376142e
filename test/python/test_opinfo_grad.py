"""Gradients of the differentiable ops Dynafuse captures, on PyTorch's own
OpInfo samples (float32): each sample's tensor inputs require grad, the
compiled function's outputs are differentiated against a random cotangent,
and the gradients must match eager's. A sample whose op has no derivative
rule yet runs eagerly (a graph break before it) and counts as "eager";
a captured one must compile a training graph. The per-op coverage is
printed at the end of the session, beside the forward OpInfo table.

Each compiled sample is then differentiated twice (create_graph=True, as
gradient penalties and Hessian-vector products do): the node replays its
forward with ATen, and the second-order gradients must match eager's."""
import pytest
import torch

import dynafuse
from conftest import OPINFO_COVERAGE, assert_close

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = [
    "sum", "mean", "amax", "amin", "var", "std", "logsumexp", "softmax", "log_softmax",
    "nn.functional.layer_norm", "reshape", "view", "permute", "transpose", "t", "expand",
    "squeeze", "unsqueeze", "flatten", "select", "narrow", "split", "chunk", "unbind", "cat",
    "stack", "flip", "roll", "tril", "triu", "matmul", "mm", "bmm", "addmm",
    "nn.functional.linear", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "sin", "cos",
    "erf", "neg", "abs", "square", "reciprocal", "log1p", "expm1", "add", "sub", "mul",
    "div", "maximum", "minimum", "where", "clamp", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.leaky_relu",
    "nn.functional.hardtanh", "masked_fill", "pow",
    # Training's extern backward kernels, gathers and the train-mode ops.
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "nn.functional.embedding", "gather", "index_select", "max",
    "min", "repeat", "nn.functional.elu", "nn.functional.softplus", "nn.functional.mish",
    "nn.functional.hardswish", "nn.functional.hardsigmoid",
]
OPINFOS = {}
for _op in common.op_db:
    # (batch_norm's "without_cudnn" variant differs only on CUDA.)
    if _op.name in OPS and _op.supports_autograd and _op.variant_test_name != "without_cudnn":
        OPINFOS.setdefault(_op.name if not _op.variant_test_name
                           else f"{_op.name}.{_op.variant_test_name}", _op)
SAMPLES_PER_OP = 4


def _differentiable(value):
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _cases():
    cases = []
    for name in sorted(OPINFOS):
        opinfo = OPINFOS[name]
        if torch.float32 not in opinfo.supported_dtypes("cpu"):
            continue
        try:
            samples = list(opinfo.sample_inputs("cpu", torch.float32, requires_grad=False))
        except Exception:  # noqa: BLE001 - an OpInfo that cannot sample float32
            continue
        for index, sample in enumerate(samples[:SAMPLES_PER_OP]):
            cases.append(pytest.param(name, sample, id=f"{name}-{index}"))
    return cases


with torch.random.fork_rng():
    torch.manual_seed(0)
    CASES = _cases()


def test_every_op_has_samples():
    assert {case.values[0] for case in CASES} == set(OPINFOS)
    assert {op.name for op in OPINFOS.values()} == set(OPS)


def _leaves(sample):
    """The sample's input (a tensor or a list of them) and its top-level
    tensor arguments, as leaves that require grad, and a function of them."""
    inputs = list(sample.input) if isinstance(sample.input, (list, tuple)) else [sample.input]
    listed = isinstance(sample.input, (list, tuple))
    arg_positions = [i for i, arg in enumerate(sample.args) if isinstance(arg, torch.Tensor)]
    tensors = inputs + [sample.args[i] for i in arg_positions]
    leaves = [t.detach().clone().requires_grad_(_differentiable(t)) for t in tensors]
    return leaves, listed, len(inputs), arg_positions


def _function(opinfo, sample, listed, count, arg_positions):
    op, kwargs = opinfo.op, sample.kwargs

    def fn(*tensors):
        first = list(tensors[:count]) if listed else tensors[0]
        args = list(sample.args)
        for position, tensor in zip(arg_positions, tensors[count:]):
            args[position] = tensor
        return op(first, *args, **kwargs)

    return fn


def _outputs(result):
    items = result if isinstance(result, (list, tuple)) else [result]
    return [item for item in items if isinstance(item, torch.Tensor) and item.requires_grad]


@pytest.mark.parametrize("name,sample", CASES)
def test_gradients_match_eager(name, sample):
    opinfo = OPINFOS[name]
    coverage = OPINFO_COVERAGE.setdefault(
        "grad " + name, {"compiled": 0, "eager": 0, "rejected": 0, "failed": 0})
    leaves, listed, count, arg_positions = _leaves(sample)
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    fn = _function(opinfo, sample, listed, count, arg_positions)
    try:
        expected = _outputs(fn(*leaves))
    except Exception:  # noqa: BLE001 - eager rejects the sample too
        coverage["rejected"] += 1
        return
    if not expected or not wanted:
        coverage["rejected"] += 1
        return
    cotangents = [torch.randn_like(out) for out in expected]
    eager = torch.autograd.grad(expected, wanted, cotangents, allow_unused=True)
    coverage["failed"] += 1  # until the sample has passed
    compiled = dynafuse.compile(fn)
    actual = _outputs(compiled(*leaves))
    ours = torch.autograd.grad(actual, wanted, cotangents, allow_unused=True)
    what = f"{name}: {sample}"
    assert len(ours) == len(eager), what
    for mine, theirs in zip(ours, eager):
        assert (mine is None) == (theirs is None) or (
            mine is None and not theirs.any()) or (theirs is None and not mine.any()), what
        if mine is not None and theirs is not None:
            assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    stats = dynafuse.stats()
    assert not stats["compile_failures"] and not stats["run_failures"], (
        what, stats, dynafuse._C.break_reasons())
    trained = any(graph["training"] for graph in dynafuse.compiled_graphs())
    coverage["failed"] -= 1
    coverage["compiled" if trained and not stats["graph_breaks"] else "eager"] += 1
    if trained:
        _second_order_matches_eager(name, fn, compiled, leaves, wanted, cotangents, what)


def _directional_second_order(outputs, wanted, cotangents, directions):
    """d/d(wanted) of sum(grad_i * direction_i): the gradients of the
    gradients (None where the first-order gradients do not require grad)."""
    first = torch.autograd.grad(outputs, wanted, cotangents, create_graph=True,
                                allow_unused=True)
    terms = [(g * v).sum() for g, v in zip(first, directions)
             if g is not None and g.requires_grad]
    if not terms:
        return None
    return torch.autograd.grad(sum(terms), wanted, allow_unused=True)


def _second_order_matches_eager(name, fn, compiled, leaves, wanted, cotangents, what):
    coverage = OPINFO_COVERAGE.setdefault(
        "grad2 " + name, {"compiled": 0, "eager": 0, "rejected": 0, "failed": 0})
    directions = [torch.randn_like(leaf) for leaf in wanted]
    try:
        eager = _directional_second_order(_outputs(fn(*leaves)), wanted, cotangents,
                                          directions)
    except RuntimeError:  # eager cannot differentiate this op twice either
        coverage["rejected"] += 1
        return
    coverage["failed"] += 1
    actual = _outputs(compiled(*leaves))
    # Outputs that are views of the inputs route around the node: only the
    # others go through the replay.
    replayed = any(out.grad_fn is not None and out.grad_fn.name() == "DynafuseBackward"
                   for out in actual)
    ours = _directional_second_order(actual, wanted, cotangents, directions)
    if eager is None or ours is None:
        # A linear function: its gradients do not depend on the inputs (the
        # replay's decomposition may still link them, by zeros).
        rest = ours if eager is None else eager
        assert rest is None or not any(g is not None and g.any() for g in rest), what
        coverage["failed"] -= 1
        coverage["compiled" if replayed else "eager"] += 1
        return
    for mine, theirs in zip(ours, eager):
        if mine is None or theirs is None:
            assert (mine is None or not mine.any()) and (theirs is None or not theirs.any()), what
        else:
            assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    coverage["failed"] -= 1
    coverage["compiled" if replayed else "eager"] += 1

