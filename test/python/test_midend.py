"""Reductions, views, data movement, extern ops and composites against eager
PyTorch: random data, several shapes (size-1 and empty dims), non-contiguous
inputs; each test proves the compiled path ran."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, assert_outputs_close

SHAPES = [(6, 10), (1, 7), (3, 1, 5), (4, 0), (2, 3, 4)]


# The reduction tests run on the default CPU backend and, when built, on the
# MLIR backend (loop IR compiled by MLIR's own passes: an independent check).
REDUCTION_BACKENDS = ["auto"] + (["mlir"] if "mlir" in dynafuse._C.backends() else [])


def run_both(fn, *args, backend="auto", **tolerances):
    dynafuse.reset()
    compiled = dynafuse.compile(fn, backend=backend)
    actual, expected = compiled(*args), fn(*args)
    assert_outputs_close(actual, expected, **tolerances)
    assert_compiled()


REDUCTIONS = {
    "sum_last": lambda x: x.sum(-1),
    "sum_all": lambda x: torch.sum(x),
    "sum_first_keepdim": lambda x: x.sum(0, keepdim=True),
    "mean_last": lambda x: x.mean(dim=-1),
    "amax": lambda x: torch.amax(x, dim=-1),
    "amin_keepdim": lambda x: x.amin(-1, keepdim=True),
    "prod": lambda x: (x * 0.5 + 1).prod(-1),
    "var": lambda x: x.var(dim=-1),
    "std_correction0": lambda x: x.std(dim=-1, correction=0),
    "logsumexp": lambda x: torch.logsumexp(x, dim=-1),
    "argmax": lambda x: x.argmax(dim=-1),
    "argmin_flat": lambda x: torch.argmin(x),
    "any": lambda x: (x > 1).any(-1),
    "all": lambda x: (x > -2).all(dim=-1),
    "norm": lambda x: torch.linalg.vector_norm(x, dim=-1),
}
# max has no identity: torch raises on these (and Dynafuse falls back for
# logsumexp over an empty dim, whose decomposition takes a max).
NEEDS_NONEMPTY = {"amax", "amin_keepdim", "argmax", "argmin_flat", "logsumexp"}


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name, shape, backend):
    if name in NEEDS_NONEMPTY and 0 in shape:
        pytest.skip("torch raises on empty max/argmax")
    if name == "var" and shape[-1] == 1:
        pytest.skip("n - 1 = 0")
    x = torch.randn(shape)
    run_both(REDUCTIONS[name], x, backend=backend, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
def test_reduction_dtypes_and_nan(backend):
    ints = torch.randint(-5, 5, (4, 6), dtype=torch.int32)
    run_both(lambda x: (x.sum(-1), x.sum(0), x.amax(-1)), ints, backend=backend)
    run_both(lambda x: x.float().mean(-1), ints, backend=backend)
    x = torch.randn(3, 5)
    x[1, 2] = float("nan")
    run_both(lambda t: (t.amax(-1), t.argmax(-1), t.sum(-1)), x, backend=backend)
    b = torch.rand(4, 5) > 0.5
    run_both(lambda t: (t.sum(-1), t.any(0)), b, backend=backend)


COLUMN_REDUCTIONS = {
    "sum0": lambda x: x.sum(0),
    "mean0_keepdim": lambda x: x.mean(0, keepdim=True),
    "sum_middle_then_sqrt": lambda x: (x * x).sum(1).sqrt() if x.dim() == 3 else (x * x).sum(0).sqrt(),
    "amax0": lambda x: x.amax(0),
    "amin0": lambda x: torch.amin(x, 0),
    "prod0": lambda x: (x * 0.1 + 1).prod(0),
    "sum_leading_two": lambda x: x.sum((0, 1)) if x.dim() == 3 else x.sum(0),
}


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("shape", [(64, 33), (7, 1), (1, 9), (5, 40, 17), (300, 130)], ids=str)
@pytest.mark.parametrize("name", sorted(COLUMN_REDUCTIONS))
def test_reductions_over_leading_dims(name, shape, backend):
    # Lowered with the output loop innermost (accumulating in the output):
    # same results as eager, NaN included, for plain, transposed and
    # sliced inputs.
    x = torch.randn(shape)
    x.view(-1)[len(x.view(-1)) // 2] = float("nan") if name.startswith("am") else 0.5
    for variant in (x, x.transpose(0, -1).contiguous().transpose(0, -1), x[::2]):
        if variant.numel() == 0:
            continue
        run_both(COLUMN_REDUCTIONS[name], variant, backend=backend, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
def test_reduction_over_non_contiguous_input(backend):
    x = torch.randn(7, 5).t()
    run_both(lambda t: (t.sum(-1), t.softmax(-1), t.mean(0)), x, backend=backend,
             rtol=1e-5, atol=1e-6)


COMPOSITES = {
    "softmax": lambda x: F.softmax(x, dim=-1),
    "softmax_dim0": lambda x: torch.softmax(x, 0),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "std_normalize": lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True),
    "rms_by_hand": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
}


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("shape", [(6, 10), (1, 33), (3, 4, 17), (5, 1)], ids=str)
@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composites(name, shape, backend):
    if name == "std_normalize" and shape[-1] == 1:
        pytest.skip("std of one element is nan")
    run_both(COMPOSITES[name], torch.randn(shape), backend=backend, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_group_norm_batch_norm(affine):
    x = torch.randn(4, 6, 5, 3)
    c = x.shape[1]
    w, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)
    lw, lb = (torch.randn(5, 3), torch.randn(5, 3)) if affine else (None, None)
    rm, rv = torch.randn(c), torch.rand(c) + 0.5
    run_both(lambda t: F.layer_norm(t, (5, 3), lw, lb, 1e-5), x, rtol=1e-5, atol=1e-5)
    run_both(lambda t: F.group_norm(t, 3, w, b), x, rtol=1e-5, atol=1e-5)
    run_both(lambda t: F.batch_norm(t, rm, rv, w, b, False, 0.1, 1e-5), x, rtol=1e-5, atol=1e-5)
    run_both(lambda t: F.rms_norm(t, (3,), lw[0] if affine else None), x, rtol=1e-5, atol=1e-5)
    run_both(lambda t: F.dropout(t, 0.3, False) * 2, x)


VIEWS = {
    "view": lambda x: x.view(4, -1) * 2,
    "reshape_split": lambda x: x.reshape(2, 2, 3, 5).sum(1),
    "permute": lambda x: x.permute(2, 0, 1) + 1,
    "transpose": lambda x: x.transpose(0, 2).exp(),
    "t_of_2d": lambda x: x[0].t() * 3,
    "expand": lambda x: x[:, :1].expand(4, 3, 5) + x,
    "squeeze_unsqueeze": lambda x: x[:, :1].squeeze(1).unsqueeze(0) - 1,
    "flatten": lambda x: torch.flatten(x, 1) + 1,
    "select": lambda x: x.select(1, 2) * 2,
    "slice_step": lambda x: x[:, ::2, 1:4] + 0,
    "narrow": lambda x: x.narrow(2, 1, 3).tanh(),
    "flip": lambda x: x.flip(0, 2) - x,
    "roll": lambda x: torch.roll(x, 2, 2) * 1,
    "roll_flat": lambda x: x.roll(7) + 0,
    "repeat": lambda x: x.repeat(2, 1, 1, 1) + 0,
    "split": lambda x: torch.split(x, 2, dim=2),
    "split_sizes": lambda x: x.split([1, 4], 2),
    "chunk": lambda x: x.chunk(2, 1),
    "unbind": lambda x: x.unbind(0),
    # One piece is still a tuple of one, as in torch.
    "split_one_piece": lambda x: torch.split(x, 5, dim=2),
    "chunk_one_piece": lambda x: x.chunk(1, 1),
    "unbind_size_one": lambda x: x[:1].unbind(0),
    "cat": lambda x: torch.cat([x, x * 2, x[:, :1]], dim=1),
    "stack": lambda x: torch.stack([x, -x], dim=1),
    "pad": lambda x: F.pad(x, (1, 2, 0, 1), value=-1.5),
    "tril_triu": lambda x: x.tril(1) + x.triu(-1),
    "contiguous_clone": lambda x: x.transpose(1, 2).contiguous() + x.clone().transpose(1, 2),
    "zeros_ones_like": lambda x: torch.zeros_like(x) + torch.ones_like(x, dtype=torch.float64) + x,
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views(name):
    x = torch.randn(4, 3, 5)
    run_both(VIEWS[name], x)


def test_views_of_non_contiguous_input():
    x = torch.randn(5, 3, 4).permute(1, 2, 0)
    run_both(lambda t: (t.reshape(3, 20) + 1, t[:, 1:3].flip(0), torch.cat([t, t], 2)), x)


def dense_block_step(pieces, weight, bias):
    """densenet's layer head: batch norm (folded) and ReLU over the
    concatenation of every earlier layer's output."""
    return torch.relu(torch.cat(pieces, 1) * weight + bias)


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("batch,channels,spatial", [
    (1, [3, 5, 2, 4], (6, 7)), (3, [1, 8, 0, 2, 3], (4, 5)), (2, [4, 4], (1, 1)),
    (0, [2, 3], (3, 3))])
def test_pointwise_over_a_concatenation_split_at_its_pieces(backend, batch, channels, spatial):
    """The kernel's loop over the channels is split into one nest per piece
    (PieceLoops.h): every piece, the per-channel operands at its offset, an
    empty piece, a batch of one and none."""
    torch.manual_seed(0)
    pieces = [torch.randn(batch, c, *spatial) for c in channels]
    pieces[0] = pieces[0].transpose(2, 3).contiguous().transpose(2, 3)  # non-contiguous
    total = sum(channels)
    weight, bias = torch.randn(1, total, 1, 1), torch.randn(total, 1, 1)
    run_both(dense_block_step, pieces, weight, bias, backend=backend)
    # The cat itself realized (an extern reads it), a reduction over it,
    # and a cat along the last dim.
    run_both(lambda ps, w: (F.conv2d(torch.cat(ps, 1), w),
                            torch.cat(ps, 1).exp().sum((2, 3)),
                            torch.cat([p.transpose(1, 3) for p in ps], 3) * 2),
             pieces, torch.randn(2, total, 1, 1), backend=backend)


@pytest.mark.parametrize("kept", [2, 4, 6])
def test_a_slice_of_a_concatenation_realized_for_broadcast_readers(kept):
    """DeepSeek's interleaved rotary table: cos(cat(f, f)) sliced to part of
    the concatenated dim, realized because many elements broadcast it. Its
    loop spans the slice, not the pieces (it stored past its buffer)."""
    def rotate(positions, frequencies, q):
        angles = positions * frequencies
        table = torch.cat((angles, angles), dim=-1).cos()[..., :kept].unsqueeze(1)
        return q[..., :kept] * table

    positions = torch.arange(64.0).view(1, 64, 1)
    run_both(rotate, positions, torch.randn(4), torch.randn(8, 8, 64, 8))


def test_gather_index_select_embedding():
    x = torch.randn(5, 6)
    index = torch.randint(0, 6, (5, 4))
    rows = torch.tensor([4, 0, 2, 2])
    run_both(lambda t, i: torch.gather(t, 1, i) * 2, x, index)
    run_both(lambda t, r: t.index_select(0, r) + 1, x, rows)
    weight = torch.randn(10, 3)
    ids = torch.randint(0, 10, (2, 7))
    run_both(lambda i, w: F.embedding(i, w) * 2, ids, weight)


def test_out_of_range_gather_raises_like_eager():
    x = torch.randn(3, 4)
    bad = torch.tensor([[0, 9]])
    f = dynafuse.compile(lambda t, i: torch.gather(t, 1, i) + 1)
    with pytest.raises(RuntimeError):
        f(x, bad)


EXTERNS = {
    "mm": lambda a, b: torch.relu(a @ b) + 1,
    "linear": lambda a, b: F.gelu(F.linear(a, b.t(), b[0])),
    "matmul_batched": lambda a, b: torch.matmul(a.unsqueeze(0).expand(2, 6, 8), b) * 2,
    "addmm": lambda a, b: torch.addmm(b[0], a, b, beta=0.5) - 1,
}


@pytest.mark.parametrize("name", sorted(EXTERNS))
def test_extern_ops_with_fused_epilogues(name):
    a, b = torch.randn(6, 8), torch.randn(8, 8)
    run_both(EXTERNS[name], a, b, rtol=1e-5, atol=1e-5)


def test_conv_and_pooling():
    x = torch.randn(2, 3, 12, 12)
    w = torch.randn(4, 3, 3, 3)
    bias = torch.randn(4)

    def block(t):
        y = F.relu(F.conv2d(t, w, bias, stride=1, padding=1))
        y = F.max_pool2d(y, 2)
        y = F.avg_pool2d(y, 2, ceil_mode=True)
        return F.adaptive_avg_pool2d(y, (1, 1)).flatten(1)

    run_both(block, x, rtol=1e-4, atol=1e-5)
    run_both(lambda t: F.conv1d(t, torch.ones(2, 3, 2), None, 2), torch.randn(1, 3, 9), rtol=1e-5, atol=1e-5)


GLOBAL_POOL_INPUTS = {
    "batch2_7x9": lambda: torch.randn(2, 5, 7, 9),
    "one_pixel": lambda: torch.randn(3, 4, 1, 1),
    "unbatched": lambda: torch.randn(6, 5, 5),
    "transposed": lambda: torch.randn(2, 6, 8, 4).transpose(2, 3),
    "channels_last": lambda: torch.randn(2, 16, 6, 6).contiguous(memory_format=torch.channels_last),
    "broadcast": lambda: torch.randn(1, 8, 1, 1).expand(2, 8, 5, 5),
    "empty_batch": lambda: torch.randn(0, 4, 3, 3),
    "large": lambda: torch.randn(1, 32, 56, 56),
}


@pytest.mark.parametrize("name", sorted(GLOBAL_POOL_INPUTS))
def test_global_average_pool_is_a_fused_mean(name):
    """adaptive_avg_pool2d to 1x1 decomposes into a mean over the pixels,
    computed in the kernel of its producer: no extern call is left."""
    x = GLOBAL_POOL_INPUTS[name]()
    run_both(lambda t: F.adaptive_avg_pool2d(torch.relu(t) * 2, 1), x, rtol=1e-5, atol=1e-5)
    (graph,) = dynafuse.compiled_graphs()
    assert graph["extern_calls"] == 0, graph


def test_squeeze_excitation_block():
    w1, w2 = torch.randn(4, 16), torch.randn(16, 4)

    def block(x):
        s = F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
        s = torch.sigmoid(F.linear(F.relu(F.linear(s, w1)), w2))
        return x * s[:, :, None, None]

    run_both(block, torch.randn(2, 16, 9, 9), rtol=1e-5, atol=1e-5)
    (graph,) = dynafuse.compiled_graphs()
    assert graph["extern_calls"] == 2, graph  # the two linears


def gpt2_block(x, ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b):
    b, t, c = 2, 8, 16
    h = F.layer_norm(x, (c,), ln1_w, ln1_b)
    q, k, v = F.linear(h, attn_w, attn_b).split(c, dim=2)
    q = q.view(b, t, 4, 4).transpose(1, 2)
    k = k.view(b, t, 4, 4).transpose(1, 2)
    v = v.view(b, t, 4, 4).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * 0.5
    mask = torch.ones(t, t).tril() == 0
    scores = torch.where(mask, float("-inf"), scores)
    attn = F.softmax(scores, dim=-1) @ v
    y = attn.transpose(1, 2).reshape(b, t, c)
    x = x + F.linear(y, proj_w, proj_b)
    h = F.gelu(F.linear(F.layer_norm(x, (c,), ln2_w, ln2_b), fc_w, fc_b), approximate="tanh")
    return x + F.linear(h, out_w, out_b)


def gpt2_inputs():
    c = 16
    shapes = [(2, 8, c), (c,), (c,), (3 * c, c), (3 * c,), (c, c), (c,), (c,), (c,),
              (4 * c, c), (4 * c,), (c, 4 * c), (c,)]
    return [torch.randn(s) * 0.5 for s in shapes]


def test_gpt2_block_matches_eager(tmp_path):
    dynafuse.config.dump_dir = str(tmp_path)
    run_both(gpt2_block, *gpt2_inputs(), rtol=1e-4, atol=1e-5)
    (folder,) = list(tmp_path.iterdir())
    loop = (folder / "kernels.loop").read_text()
    # Fused: each layer_norm and the softmax are one kernel with reductions.
    assert loop.count("reduce max") == 1
    assert loop.count("extern ") >= 6


def test_gpt2_block_peak_intermediate_memory_not_above_eager():
    from eager_memory import eager_peak_intermediate_bytes

    inputs = gpt2_inputs()
    dynafuse.reset()
    with torch.no_grad():
        dynafuse.compile(gpt2_block)(*inputs)
        eager = eager_peak_intermediate_bytes(gpt2_block, *inputs)
    (graph,) = dynafuse.compiled_graphs()
    assert graph["kernels"] >= 4 and graph["extern_calls"] >= 6, graph
    assert 0 < graph["peak_intermediate_bytes"] <= eager, (graph, eager)


def test_channels_last_in_channels_last_out():
    x = torch.randn(2, 8, 5, 6).to(memory_format=torch.channels_last)
    bias = torch.randn(8, 1, 1)

    def f(t, b):
        return F.relu(t + b) * 2, t.sum(1)

    dynafuse.reset()
    out, reduced = dynafuse.compile(f)(x, bias)
    ref, ref_reduced = f(x, bias)
    assert out.stride() == ref.stride()
    assert_close(out, ref)
    assert_close(reduced, ref_reduced, rtol=1e-5, atol=1e-5)
    assert_compiled()


def test_overloads_max_min_and_arange():
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    run_both(lambda a, b: (torch.max(a), a.max(1)[0], a.max(dim=0, keepdim=True)[1],
                           torch.min(a, b), a.min(-1)[1]), x, y)
    run_both(lambda a: a * torch.arange(6) + torch.arange(1, 4.5, 0.5)[:6], x)


def test_max_and_min_over_a_dim_return_eagers_named_tuples():
    # .values/.indices inside the frame, and the torch.return_types result
    # returned as eager returns it.
    def f(a):
        low = torch.min(a, 0, keepdim=True)
        return low.values + a.max(dim=1).values.unsqueeze(1), torch.max(a, 1)

    x = torch.randn(4, 6)
    (total, named), (expected_total, expected) = dynafuse.compile(f)(x), f(x)
    assert type(named) is type(expected) is torch.return_types.max
    assert_close(total, expected_total)
    assert_close(named.values, expected.values)
    assert torch.equal(named.indices, expected.indices)
    assert_compiled()


@pytest.mark.parametrize("backend", ["llvm", "interp"] + REDUCTION_BACKENDS[1:])
@pytest.mark.parametrize("dims", [(1,), (0, 2, 3)], ids=str)
def test_float32_sums_that_cancel_keep_their_digits(backend, dims):
    # Per-channel sums of large terms that cancel (a batch norm's gradient):
    # accumulated in f64, the f32 result is the exact sum rounded once,
    # where an f32 accumulator loses digits eager's cascade summation keeps.
    torch.manual_seed(0)
    shape = (4, 64, 16, 16) if len(dims) == 3 else (16, 4096)
    x = torch.randn(*shape) * 1e4
    x = torch.cat([x, -x + torch.rand(*shape)], dim=dims[-1])
    ours = dynafuse.compile(lambda x: x.sum(dims), backend=backend)(x)
    exact = x.double().sum(dims)
    assert_compiled()
    assert ((ours.double() - exact).abs() / exact.abs()).max() < 1e-6


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_chained_channel_shuffles(layout):
    """shufflenet's blocks: each concatenates its input's first half with a
    branch and shuffles the channels; inline, the shuffles would compose
    into nested divisions, so every third regrouping reads a buffer (the
    realization policy), with the same results."""
    def shuffle(x, groups=2):
        n, c, h, w = x.shape
        return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)

    def blocks(x):
        for k in range(4):
            a, b = x.chunk(2, dim=1)
            x = shuffle(torch.cat([a, torch.relu(b * (k + 1) - 0.5)], dim=1))
        return x * 2

    x = torch.randn(2, 8, 5, 3)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    run_both(blocks, x, rtol=1e-6, atol=1e-6)
