"""torch.autocast as graph semantics (issue 43): a function compiled under
autocast, or entering `with torch.autocast(...)` itself, casts each call's
arguments as eager's autocast does (lower precision ops, fp32 ops, promote
ops, and everything else left alone), forward and backward, and recompiles
when the caller's autocast state changes. Every test checks the compiled
path ran and compares with eager at bf16's precision."""
import copy

import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_compiled

BF16_TOLERANCE = dict(rtol=2e-2, atol=2e-2)


def assert_same(actual, expected, **tolerances):
    tolerances = tolerances or BF16_TOLERANCE
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            assert_same(got, want, **tolerances)
        return
    if isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=tolerances["rtol"], abs=tolerances["atol"])
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.float(), expected.float(), **tolerances)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# (name, function, argument maker): each function's outputs are compared
# with eager's under autocast, dtypes first. The inputs mix f32, bf16 and
# f64 so that each policy shows.
CASES = [
    # lower precision ops: floating arguments other than f64 become bf16.
    ("linear", lambda x, w, b: F.linear(x, w, b), lambda: (rand(4, 8), rand(6, 8), rand(6))),
    ("mm", lambda x, y: torch.mm(x, y), lambda: (rand(4, 8), rand(8, 5))),
    ("bmm", lambda x, y: torch.bmm(x, y), lambda: (rand(2, 4, 8), rand(2, 8, 5))),
    ("matmul_operator", lambda x, y: x @ y, lambda: (rand(3, 4, 8), rand(8, 5))),
    ("matmul_method", lambda x, y: x.matmul(y), lambda: (rand(4, 8), rand(8, 5))),
    ("addmm", lambda b, x, y: torch.addmm(b, x, y), lambda: (rand(5), rand(4, 8), rand(8, 5))),
    ("baddbmm", lambda b, x, y: torch.baddbmm(b, x, y), lambda: (rand(2, 4, 5), rand(2, 4, 8), rand(2, 8, 5))),
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), lambda: (rand(2, 3, 8, 8), rand(4, 3, 3, 3))),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b), lambda: (rand(2, 3, 9), rand(4, 3, 3), rand(4))),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), lambda: (rand(2, 3, 5, 8), rand(2, 3, 5, 8), rand(2, 3, 5, 8))),
    ("einsum", lambda x, y: torch.einsum("bij,bjk->bik", x, y), lambda: (rand(2, 4, 8), rand(2, 8, 5))),
    ("already_bf16", lambda x, y: torch.mm(x, y), lambda: (rand(4, 8, dtype=torch.bfloat16), rand(8, 5))),
    ("float64_kept", lambda x, y: torch.mm(x, y), lambda: (rand(4, 8, dtype=torch.float64), rand(8, 5, dtype=torch.float64))),
    ("linear_then_pointwise", lambda x, w: torch.relu(F.linear(x, w)) + x[:, :6],
     lambda: (rand(4, 8), rand(6, 8))),
    # fp32 ops: bf16 arguments become f32.
    ("cross_entropy", lambda x, t: F.cross_entropy(x.bfloat16(), t),
     lambda: (rand(6, 5), torch.randint(0, 5, (6,)))),
    ("mse_loss", lambda x, y: F.mse_loss(x.bfloat16(), y.bfloat16()), lambda: (rand(4, 6), rand(4, 6))),
    ("prod", lambda x: torch.prod(x.bfloat16() * 0.5 + 1, 1), lambda: (rand(4, 6),)),
    ("pad_reflect", lambda x: F.pad(x.bfloat16(), (1, 2), mode="reflect"), lambda: (rand(2, 3, 6),)),
    ("pad_constant_kept", lambda x: F.pad(x.bfloat16(), (1, 2)), lambda: (rand(2, 3, 6),)),
    # promote ops: the widest type among the arguments.
    ("cat", lambda x, y: torch.cat([x.bfloat16(), y]), lambda: (rand(2, 4), rand(3, 4))),
    ("cat_all_bf16", lambda x, y: torch.cat([x.bfloat16(), y.bfloat16()], 1), lambda: (rand(2, 4), rand(2, 3))),
    ("stack", lambda x, y: torch.stack([x.bfloat16(), y]), lambda: (rand(2, 4), rand(2, 4))),
    # ops autocast leaves alone: their types follow their arguments.
    ("softmax_kept", lambda x: torch.softmax(x.bfloat16(), -1), lambda: (rand(4, 6),)),
    ("layer_norm_kept", lambda x: F.layer_norm(x.bfloat16(), (6,)), lambda: (rand(4, 6),)),
    ("add_promotes", lambda x, y: x.bfloat16() + y, lambda: (rand(4, 6), rand(4, 6))),
]


@pytest.mark.parametrize("name,function,make", CASES, ids=[case[0] for case in CASES])
def test_autocast_policy_matches_eager(name, function, make):
    args = make()
    compiled = dynafuse.compile(function)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        actual = compiled(*args)
        expected = function(*args)
    assert_same(actual, expected)
    assert_compiled()


def test_autocast_state_change_recompiles():
    """Entries are guarded by the caller's autocast state (on/off, dtype)."""
    x, w = rand(4, 8), rand(8, 5)
    compiled = dynafuse.compile(lambda a, b: torch.mm(a, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x, w).dtype == torch.bfloat16
    plain = compiled(x, w)
    assert plain.dtype == torch.float32
    torch.testing.assert_close(plain, torch.mm(x, w))
    with torch.autocast("cpu", dtype=torch.float16):
        assert compiled(x, w).dtype == torch.float16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x, w).dtype == torch.bfloat16
    assert_compiled(captures=3)


def test_autocast_block_inside_the_frame():
    """A with block inside the compiled function: casts within it only,
    a nested enabled=False block turns them off, and the state queries
    answer as eager's."""
    def f(x, w):
        before = x @ w
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = x @ w
            enabled = torch.is_autocast_enabled("cpu")
            dtype = torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):
                off = x @ w
                disabled = torch.is_autocast_enabled("cpu")
            joined = torch.cat([inside, off])
            loss = F.mse_loss(inside, inside * 2)
        after = x @ w
        return before, inside, off, joined, loss, after, enabled, dtype, disabled

    x, w = rand(4, 8), rand(8, 5)
    actual = dynafuse.compile(f)(x, w)
    expected = f(x, w)
    assert_same(actual, expected)
    assert [t.dtype for t in actual[:6]] == [torch.float32, torch.bfloat16, torch.float32,
                                              torch.float32, torch.float32, torch.float32]
    assert_compiled()


def test_autocast_convolutional_network():
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10)).eval()
    compiled = dynafuse.compile(net)
    for batch in (1, 3):
        x = rand(batch, 3, 16, 16)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert_same(compiled(x), net(x), rtol=5e-2, atol=5e-2)
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["captures"] >= 1


def training_step(model, x, target):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), target)
    return loss


@pytest.mark.parametrize("where", ["around", "inside"])
def test_autocast_training_gradients(where):
    """Forward and backward of an MLP under autocast: the loss is f32, the
    gradients reach the f32 parameters through the casts, and they match
    eager's at bf16 precision."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 5))
    reference = copy.deepcopy(model)
    x, target = rand(16, 32), torch.randint(0, 5, (16,))
    if where == "around":
        compiled = dynafuse.compile(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(x), target)
    else:
        loss = dynafuse.compile(training_step)(model, x, target)
    expected = training_step(reference, x, target)
    assert loss.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(loss, expected, **BF16_TOLERANCE)
    loss.backward()
    expected.backward()
    for got, want in zip(model.parameters(), reference.parameters()):
        assert got.grad.dtype == torch.float32
        scale = want.grad.abs().max().item() + 1e-3
        torch.testing.assert_close(got.grad / scale, want.grad / scale, rtol=0, atol=3e-2)
    assert_compiled()


def test_break_inside_an_autocast_block_resumes_inside_it():
    """A graph break inside a block the frame entered: the code after it
    resumes inside a fresh autocast context (compiled, under the state the
    block set), whose exit restores the caller's state."""
    def f(x, w):
        before = x @ w
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            value = y.sum().item()  # a break: .item()
            z = y @ w.t()
            enabled = torch.is_autocast_enabled("cpu")
        after = z.float() @ w
        return before, y, z, after, value, enabled

    x, w = rand(4, 8), rand(8, 8)
    compiled = dynafuse.compile(f)
    for _ in range(2):
        actual = compiled(x, w)
        assert not torch.is_autocast_enabled("cpu")
        assert_same(actual, f(x, w), rtol=5e-2, atol=5e-2)
    assert [t.dtype for t in actual[:4]] == [torch.float32, torch.bfloat16, torch.bfloat16,
                                             torch.float32]
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 1 and stats["captures"] == 2, stats
    assert stats["eager_frames"] == 0


def test_autocast_on_float16():
    x, w = rand(4, 8), rand(8, 5)
    compiled = dynafuse.compile(lambda a, b: F.linear(a, b.t()))
    with torch.autocast("cpu", dtype=torch.float16):
        assert_same(compiled(x, w), F.linear(x, w.t()))
    assert_compiled()


@pytest.mark.parametrize("training", [False, True])
def test_transformer_encoder_with_padding_mask_under_autocast(training):
    """nn.TransformerEncoder under autocast, one graph: in eval its layers'
    native fast path (an extern whose ATen kernel autocast casts inside)
    runs under the caller's autocast state, as eager's does; in training
    its linear layers are cast."""
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    encoder.train(training)
    x = rand(3, 10, 32)
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[1, 7:] = True
    compiled = dynafuse.compile(encoder)
    with torch.set_grad_enabled(training), torch.autocast("cpu", dtype=torch.bfloat16):
        actual = compiled(x, src_key_padding_mask=mask)
        expected = encoder(x, src_key_padding_mask=mask)
    assert_same(actual, expected, rtol=3e-2, atol=3e-2)
    assert_compiled()
