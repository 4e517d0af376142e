"""Attention models captured as one graph each: nn.MultiheadAttention and
nn.TransformerEncoderLayer through torch's native fast path (one call_torch
extern) and through their Python path, torchvision's vit_b_16, and a GPT-2
style block written as an nn.Module."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, randomize_batch_norm
from conftest import assert_outputs_close as assert_all_close

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture
def fast_path(request):
    saved = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(request.param)
    yield request.param
    torch.backends.mha.set_fastpath_enabled(saved)


def graph():
    (info,) = dynafuse.compiled_graphs()
    return info


def encoder_layer_kernel_runs_on_meta():
    """Whether this torch has a meta kernel for the encoder layer's native
    fast path (2.11 has none): capture runs torch calls outside the op table
    on meta tensors for their shapes, so without one the call breaks the
    graph, by design."""
    def m(*shape):
        return torch.empty(*shape, device="meta")
    e = 8
    try:
        torch._transformer_encoder_layer_fwd(
            m(2, 3, e), e, 2, m(3 * e, e), m(3 * e), m(e, e), m(e), False, False, 1e-5,
            m(e), m(e), m(e), m(e), m(16, e), m(16), m(e, 16), m(e))
        return True
    except NotImplementedError:
        return False


def require_native_encoder_meta_kernel(fast_path):
    if fast_path and not encoder_layer_kernel_runs_on_meta():
        pytest.xfail(f"torch {torch.__version__} has no meta kernel for "
                     "aten::_transformer_encoder_layer_fwd: the native path breaks the graph")


def assert_outputs_close(actual, expected):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            if e is None:
                assert a is None or a.numel() == 0
            else:
                assert_close(a, e, **TOLERANCE)
        return
    assert_close(actual, expected, **TOLERANCE)


@pytest.mark.parametrize("fast_path", [True, False], indirect=True, ids=["native", "python"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first,shape", [(True, (2, 7, 16)), (False, (7, 2, 16)), (True, (1, 1, 16))])
def test_multihead_self_attention(fast_path, need_weights, batch_first, shape):
    model = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        expected = model(x, x, x, need_weights=need_weights)
        actual = dynafuse.compile(model, fullgraph=True)(x, x, x, need_weights=need_weights)
    assert_outputs_close(actual, expected)
    assert_compiled()
    native = fast_path and batch_first
    if native:
        assert graph()["kernels"] == 0 and graph()["extern_calls"] == 1
    else:
        assert graph()["kernels"] >= 2  # projections, attention, output


def test_cross_attention_guards_that_query_and_key_differ():
    model = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    compiled = dynafuse.compile(model, fullgraph=True)
    with torch.no_grad():
        assert_outputs_close(compiled(q, kv, kv), model(q, kv, kv))
        # The same object for all three: torch switches to its fast path, so
        # the guard that query is not key must fail and recompile.
        x = torch.randn(2, 9, 16)
        assert_outputs_close(compiled(x, x, x), model(x, x, x))
    assert dynafuse.stats()["captures"] == 2


@pytest.mark.parametrize("fast_path", [True, False], indirect=True, ids=["native", "python"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_layer(fast_path, norm_first, batch_first):
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=batch_first, norm_first=norm_first).eval()
    x = torch.randn(3, 6, 32)
    if batch_first:
        require_native_encoder_meta_kernel(fast_path)
    with torch.no_grad():
        expected = layer(x)
        actual = dynafuse.compile(layer, fullgraph=True)(x)
    assert_close(actual, expected, **TOLERANCE)
    assert_compiled()


def test_transformer_encoder_layer_with_activation_function_and_gelu():
    layer = nn.TransformerEncoderLayer(32, 4, 64, activation="gelu", batch_first=True).eval()
    x = torch.randn(2, 6, 32)[:, ::2]  # non-contiguous input
    require_native_encoder_meta_kernel(torch.backends.mha.get_fastpath_enabled())
    with torch.no_grad():
        assert_close(dynafuse.compile(layer, fullgraph=True)(x), layer(x), **TOLERANCE)
    assert_compiled()


def test_vit_b_16_is_one_graph():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.vit_b_16(image_size=32).eval()
    nn.init.normal_(model.heads.head.weight, std=0.02)  # zero-initialized by torchvision
    image = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(image)
        actual = dynafuse.compile(model, fullgraph=True)(image)
    assert expected.abs().max() > 0.1
    assert_close(actual, expected, **TOLERANCE)
    assert_compiled()
    assert graph()["kernels"] >= 12 and graph()["extern_calls"] >= 12


def test_mobilenet_v2_is_one_graph():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.mobilenet_v2().eval()
    with torch.no_grad():
        randomize_batch_norm(model)
        image = torch.randn(2, 3, 64, 64)
        assert_close(dynafuse.compile(model, fullgraph=True)(image), model(image), rtol=1e-4, atol=1e-4)
    assert_compiled()


class GPT2Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.ModuleDict({"fc": nn.Linear(width, 4 * width), "out": nn.Linear(4 * width, width)})
        self.register_buffer("causal", torch.ones(context, context, dtype=torch.bool).tril())

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        return self.proj((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp["out"](F.gelu(self.mlp["fc"](self.ln2(x)), approximate="tanh"))


@pytest.mark.parametrize("t", [1, 9, 16])
def test_gpt2_block_module_is_one_graph(t):
    block = GPT2Block(32, 4, 16).eval()
    x = torch.randn(2, t, 32)
    with torch.no_grad():
        assert_close(dynafuse.compile(block, fullgraph=True)(x), block(x), **TOLERANCE)
    assert_compiled()


def test_torch_ops_outside_the_op_table_stay_in_the_graph():
    def f(x, y):
        values, indices = torch.sort(x, dim=-1, descending=True)
        top = torch.topk(y * 2, 3).values
        return values.sin() + 1, indices, top, torch.cumsum(x, 1), x.unfold(1, 2, 1).sum(-1)

    for shape in [(4, 8), (1, 5), (3, 3)]:
        x, y = torch.randn(shape), torch.randn(shape[0], 8)
        assert_all_close(dynafuse.compile(f, fullgraph=True)(x, y), f(x, y))
    assert dynafuse.stats()["graph_breaks"] == 0
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 4  # sort, topk, cumsum, unfold


def test_call_torch_results_that_alias_inputs_are_copied_and_in_place_calls_refused():
    def views(x):
        y = x.unfold(0, 2, 1)  # a view of x in eager
        return y * 1, x + 1

    x = torch.randn(6)
    assert_all_close(dynafuse.compile(views, fullgraph=True)(x), views(x))

    def mutates_view(x):
        y = x * 2
        z = y.unfold(0, 2, 1)
        z.mul_(3)  # eager writes through the view into y
        return y

    assert_close(dynafuse.compile(mutates_view)(x), mutates_view(x))
    assert dynafuse.stats()["graph_breaks"] == 1


def test_tensor_indexing_and_item_assignment():
    def f(x, index):
        y = x * 2
        y[index] = 0.5
        y[1] = x[0] + 1
        y[:, 0] = torch.arange(5.0)
        return y, y[index, 1:], x[:, index], x[index][:, None]

    x = torch.randn(5, 5)
    for index in [torch.tensor([0, 3]), torch.tensor([4]), torch.tensor([[1, 2], [2, 1]])]:
        assert_all_close(dynafuse.compile(f, fullgraph=True)(x, index), f(x, index))


def test_mask_indexing_breaks_the_graph_with_a_reason():
    def f(x):
        return x[x > 0] * 2

    x = torch.randn(6, 3)
    report = dynafuse.explain(f)(x)
    assert report.graph_break_count == 1 and "__getitem__" in report.break_reasons[0]
    assert_close(dynafuse.compile(f)(x), f(x))


def test_no_grad_and_inference_mode_blocks():
    linear = nn.Linear(4, 4)  # parameters require grad

    def f(x):
        y = x + 1
        with torch.no_grad():
            z = linear(y).relu()
            inside = torch.is_grad_enabled()
        with torch.inference_mode():
            w = linear(z)
        return z * 2 + w, inside, torch.is_grad_enabled()

    x = torch.randn(3, 4)
    actual, expected = dynafuse.compile(f, fullgraph=True)(x), f(x)
    assert_close(actual[0], expected[0])
    assert actual[1:] == expected[1:] == (False, True)
    assert not actual[0].requires_grad

    def trains(x):
        return linear(x)

    out = dynafuse.compile(trains)(x)
    assert_close(out, trains(x))
    # Grad mode on, the weight requires grad: a training graph.
    assert out.grad_fn.name() == "DynafuseBackward"
    assert dynafuse.stats()["captures"] == 2
    assert [graph["training"] for graph in dynafuse.compiled_graphs()] == [False, True]


def test_try_blocks_compile_their_normal_path():
    def f(x):
        try:
            y = x + 1
        except RuntimeError:
            y = x
        finally:
            y = y * 2
        return y

    x = torch.randn(3)
    report = dynafuse.explain(f)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert_close(dynafuse.compile(f, fullgraph=True)(x), f(x))

    def raises_at_run_time(t, index):
        try:
            return torch.gather(t, 0, index) + 1  # an index out of range raises
        except RuntimeError:
            return t * 0

    t = torch.randn(4)
    good, bad = torch.tensor([0, 3]), torch.tensor([0, 9])
    compiled = dynafuse.compile(raises_at_run_time)
    assert_close(compiled(t, good), raises_at_run_time(t, good))
    assert_close(compiled(t, bad), raises_at_run_time(t, bad))  # the handler ran
    assert dynafuse.stats()["run_failures"] == 1

    def breaks_inside_try(x):
        try:
            y = x + 1
            print("inside try")
        except RuntimeError:
            y = x
        return y * 2

    report = dynafuse.explain(breaks_inside_try)(x)
    assert "try block" in report.break_reasons[0], report.break_reasons
    assert dynafuse.stats()["eager_frames"] == 1


def test_module_walks_and_getattr():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2))).eval()

    def f(x):
        names = [name for name, _ in model.named_modules()]
        hooks = sum(len(getattr(m, "_forward_hooks", {})) for m in model.modules())
        linears = sum(isinstance(m, nn.Linear) for m in model.modules())
        missing = getattr(model, "no_such_attribute", 3)
        return model(x) * linears + hooks + missing, names, hasattr(model, "no_such_attribute")

    x = torch.randn(2, 4)
    with torch.no_grad():
        actual, expected = dynafuse.compile(f, fullgraph=True)(x), f(x)
        assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:]
        model[1].add_module("extra", nn.Identity())  # the walk changes: recompile
        assert_close(dynafuse.compile(f, fullgraph=True)(x)[0], f(x)[0])
    assert dynafuse.stats()["captures"] == 2


def test_call_torch_results_keep_eager_layouts():
    # Dense permuted layouts (a transposed input through cumsum, SDPA's
    # result) come back with eager's strides instead of row-major copies.
    def f(x):
        attention = F.scaled_dot_product_attention(x, x, x)
        return attention, torch.cumsum(x.transpose(1, 2), 2) + 1

    for shape in [(2, 3, 5, 4), (1, 1, 1, 8)]:
        x = torch.randn(shape)
        actual, expected = dynafuse.compile(f, fullgraph=True)(x), f(x)
        assert_all_close(actual, expected, **TOLERANCE)
        for got, want in zip(actual, expected):
            assert got.stride() == want.stride()
