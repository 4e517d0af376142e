"""Compiled training (issue 16): a frame whose inputs require grad, run in
grad mode, compiles into a forward and a backward graph; the forward's
outputs get a DynafuseBackward node, and its gradients match eager's.
Every test proves the compiled backward ran (the grad_fn's name, and the
training flag of compiled_graphs())."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled

F32 = dict(rtol=1e-4, atol=1e-5)


def assert_training_compiled(graphs=1):
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["compile_failures"] == 0, (
        stats, dynafuse._C.break_reasons())
    assert stats["run_failures"] == 0, stats
    training = [graph for graph in dynafuse.compiled_graphs() if graph["training"]]
    assert len(training) == graphs, dynafuse.compiled_graphs()


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def twins(make):
    model, twin = make(), make()
    twin.load_state_dict(model.state_dict())
    return model, twin


def mse(model, x, y):
    return ((model(x) - y) ** 2).mean()


def grads_of(model):
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("batch", [5, 1, 3])
def test_mlp_gradients_match_eager(batch):
    model, twin = twins(mlp)
    compiled = dynafuse.compile(mse)
    x, y = torch.randn(batch, 8), torch.randn(batch, 4)
    loss = compiled(model, x, y)
    assert loss.grad_fn.name() == "DynafuseBackward"
    loss.backward()
    expected = mse(twin, x, y)
    expected.backward()
    assert_close(loss.detach(), expected.detach(), **F32)
    for ours, eager in zip(grads_of(model), grads_of(twin)):
        assert_close(ours, eager, **F32)
    assert_training_compiled()


def test_noncontiguous_and_broadcast_inputs():
    def f(x, w, b):
        return torch.tanh(x @ w + b).sum(0)

    x = torch.randn(6, 5).t().requires_grad_()      # non-contiguous
    w = torch.randn(6, 3, requires_grad=True)
    b = torch.randn(1, 3, requires_grad=True)       # broadcast
    out = dynafuse.compile(f)(x, w, b)
    cotangent = torch.randn(3)
    ours = torch.autograd.grad(out, (x, w, b), cotangent)
    eager = torch.autograd.grad(f(x, w, b), (x, w, b), cotangent)
    for a, e in zip(ours, eager):
        assert_close(a, e, **F32)
    assert_training_compiled()


def test_autograd_grad_and_accumulation_into_grad():
    model, twin = twins(mlp)
    compiled = dynafuse.compile(mse)
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    ours = torch.autograd.grad(compiled(model, x, y), list(model.parameters()))
    eager = torch.autograd.grad(mse(twin, x, y), list(twin.parameters()))
    for a, e in zip(ours, eager):
        assert_close(a, e, **F32)
    assert all(p.grad is None for p in model.parameters())
    for _ in range(2):  # no zero_grad: gradients add up
        compiled(model, x, y).backward()
        mse(twin, x, y).backward()
    for a, e in zip(grads_of(model), grads_of(twin)):
        assert_close(a, e, **F32)
    assert dynafuse.stats()["captures"] == 1 and dynafuse.stats()["cache_hits"] == 2


def test_retain_graph_and_a_second_backward_without_it():
    model, twin = twins(mlp)
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    loss = dynafuse.compile(mse)(model, x, y)
    loss.backward(retain_graph=True)
    loss.backward()
    expected = mse(twin, x, y)
    expected.backward(retain_graph=True)
    expected.backward()
    for a, e in zip(grads_of(model), grads_of(twin)):
        assert_close(a, e, **F32)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_inputs_and_parameters_that_do_not_require_grad():
    model, twin = twins(mlp)
    for module in (model, twin):
        module[0].weight.requires_grad_(False)
    x = torch.randn(3, 8, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    y = torch.randn(3, 4)
    dynafuse.compile(mse)(model, x, y).backward()
    mse(twin, x_twin, y).backward()
    assert model[0].weight.grad is None
    assert_close(x.grad, x_twin.grad, **F32)
    for a, e in zip(grads_of(model)[1:], grads_of(twin)[1:]):
        assert_close(a, e, **F32)
    assert_training_compiled()


def test_an_input_no_output_depends_on_gets_no_gradient():
    def f(x, unused):
        return (x * 2).sum(), unused.shape[0]

    x = torch.randn(4, requires_grad=True)
    unused = torch.randn(3, requires_grad=True)
    loss, _ = dynafuse.compile(f)(x, unused)
    gx, gu = torch.autograd.grad(loss, (x, unused), allow_unused=True)
    assert_close(gx, torch.full((4,), 2.0))
    assert gu is None


def test_an_output_the_loss_does_not_use_gets_a_zero_gradient():
    def f(x, w):
        h = x @ w
        return h.relu(), h.sigmoid()

    x = torch.randn(4, 3)
    w = torch.randn(3, 5, requires_grad=True)
    first, second = dynafuse.compile(f)(x, w)
    assert second.grad_fn.name() == "DynafuseBackward"
    first.sum().backward()  # second is unused
    expected = torch.autograd.grad(f(x, w)[0].sum(), w)[0]
    assert_close(w.grad, expected, **F32)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_training_steps_match_eager(optimizer):
    model, twin = twins(mlp)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.01)}[optimizer]
    opt, opt_twin = make(model.parameters()), make(twin.parameters())
    compiled = dynafuse.compile(mse)
    for step in range(3):
        x, y = torch.randn(6, 8), torch.randn(6, 4)
        for module, optim, fn in ((model, opt, compiled), (twin, opt_twin, mse)):
            optim.zero_grad()
            loss = fn(module, x, y)
            loss.backward()
            optim.step()
            if module is model:
                ours = loss.detach()
            else:
                assert_close(ours, loss.detach(), **F32)
    for a, e in zip(model.parameters(), twin.parameters()):
        assert_close(a.detach(), e.detach(), **F32)
    assert dynafuse.stats()["cache_hits"] == 2


def test_a_parameter_updated_before_backward_raises_eagers_error():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = dynafuse.compile(mse)(model, torch.randn(2, 8), torch.randn(2, 4))
    opt.step()  # no grads yet: nothing changes; then change one in place
    with torch.no_grad():
        model[2].weight.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def second_order(outputs, wanted, directions):
    """The gradients of sum(grad_i * direction_i), and the gradients."""
    first = torch.autograd.grad(outputs, wanted, create_graph=True)
    total = sum((g * v).sum() for g, v in zip(first, directions))
    return torch.autograd.grad(total, wanted), first


@pytest.mark.parametrize("shape,transposed", [((4,), False), ((3, 5), True), ((0, 3), False)])
def test_double_backward_replays_the_forward_eagerly(shape, transposed, capfd, monkeypatch):
    monkeypatch.setattr(dynafuse.config, "log", "graph_breaks")
    def f(t, w):
        return (t.sin() * t * w).sum()

    x = torch.randn(*shape).requires_grad_()
    if transposed:
        x = x.detach().t().requires_grad_()  # non-contiguous
    w = torch.randn(shape[-1] if not transposed else shape[0]).requires_grad_()
    compiled = dynafuse.compile(f)
    out = compiled(x, w)
    assert out.grad_fn.name() == "DynafuseBackward"
    directions = [torch.randn_like(x), torch.randn_like(w)]
    ours, ours_first = second_order(out, [x, w], directions)
    eager, eager_first = second_order(f(x, w), [x, w], directions)
    for mine, theirs in zip(ours_first + ours, eager_first + eager):
        assert_close(mine, theirs, **F32)
    assert "its forward is replayed eagerly" in capfd.readouterr().err
    assert_training_compiled()


def test_gradient_penalty_matches_eager():
    """A WGAN-GP style penalty: the norm of the input gradient, trained."""
    model, twin = twins(lambda: nn.Sequential(
        nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16), nn.Softmax(-1),
        nn.Linear(16, 1)))
    compiled = dynafuse.compile(lambda m, x: m(x).sum())
    x = torch.randn(6, 8, requires_grad=True)
    for net, critic in ((model, compiled), (twin, lambda m, x: m(x).sum())):
        score = critic(net, x)
        gx, = torch.autograd.grad(score, x, create_graph=True)
        ((gx.norm(dim=1) - 1) ** 2).mean().backward()
    assert score.grad_fn.name() != "DynafuseBackward"  # the twin's
    for ours, eager in zip(grads_of(model), grads_of(twin)):
        assert (ours is None) == (eager is None)
        if ours is not None:
            assert_close(ours, eager, **F32)
    assert_training_compiled()


def test_double_backward_through_conv_batch_norm_and_pooling():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(4, 2, 3), nn.Tanh())
    model, twin = twins(make)
    compiled = dynafuse.compile(model)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    out, expected = compiled(x), twin(x)
    assert out.grad_fn.name() == "DynafuseBackward"
    assert_close(out, expected, **F32)
    params, twin_params = list(model.parameters()), list(twin.parameters())
    directions = [torch.randn_like(p) for p in [x] + params]
    cotangent = torch.randn_like(out)
    ours, _ = second_order((out * cotangent).sum(), [x] + params, directions)
    eager, _ = second_order((expected * cotangent).sum(), [x] + twin_params, directions)
    for mine, theirs in zip(ours, eager):
        assert_close(mine, theirs, rtol=1e-3, atol=1e-4)
    # The replay does not move the running statistics a second time.
    assert_close(model[1].running_mean, twin[1].running_mean, **F32)
    assert_close(model[1].running_var, twin[1].running_var, **F32)
    assert_training_compiled()


def test_double_backward_keeps_the_forwards_dropout_mask():
    """The replay draws the compiled forward's random numbers: its gradients
    (create_graph=True) equal the compiled backward's of the same run."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Dropout(0.5), nn.Linear(32, 1))
    compiled = dynafuse.compile(model)
    x = torch.randn(64, 16, requires_grad=True)
    out = compiled(x).sum()
    compiled_grads = torch.autograd.grad(out, [x] + list(model.parameters()),
                                         retain_graph=True)
    replayed = torch.autograd.grad(out, [x] + list(model.parameters()), create_graph=True)
    assert replayed[0].requires_grad
    for ours, theirs in zip(replayed, compiled_grads):
        assert_close(ours.detach(), theirs, **F32)
    assert_training_compiled()


def test_double_backward_errors():
    x = torch.randn(4, requires_grad=True)
    compiled = dynafuse.compile(lambda t: (t.sin() * t).sum())
    # The kept inputs are checked as eager's saved tensors are.
    with torch.no_grad():
        w = x.clone().requires_grad_()
    y = compiled(w)
    with torch.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, w, create_graph=True)
    # After a backward that freed them, as eager.
    y = compiled(x)
    y.backward()
    with pytest.raises(RuntimeError, match="a second time"):
        torch.autograd.grad(y, x, create_graph=True)

    # An input the graph updates in place, read where gradients flow: its
    # old value is gone, so the replay cannot happen, and says why.
    def scaled(t, scale):
        scale.add_(1)
        return (t * scale).sum()

    y = dynafuse.compile(scaled)(x, torch.ones(4))
    assert y.grad_fn.name() == "DynafuseBackward"
    with pytest.raises(RuntimeError, match="double backward .*updates its input .* in place"):
        torch.autograd.grad(y, x, create_graph=True)


def test_gradients_flow_across_a_graph_break():
    def f(x, w):
        h = torch.tanh(x @ w)
        print("", end="")  # a graph break: two training graphs
        return (h * h).sum()

    x = torch.randn(3, 4)
    w = torch.randn(4, 2, requires_grad=True)
    loss = dynafuse.compile(f)(x, w)
    loss.backward()
    expected = torch.autograd.grad(f(x, w), w)[0]
    assert_close(w.grad, expected, **F32)
    graphs = [graph for graph in dynafuse.compiled_graphs() if graph["training"]]
    assert len(graphs) == 2, dynafuse.compiled_graphs()


def test_no_grad_blocks_inside_a_training_graph_stop_gradients():
    def f(x, w):
        with torch.no_grad():
            scale = (x @ w).abs().amax()
        return ((x @ w) / scale).sum()

    x = torch.randn(3, 4)
    w = torch.randn(4, 2, requires_grad=True)
    loss = dynafuse.compile(f)(x, w)
    loss.backward()
    expected = torch.autograd.grad(f(x, w), w)[0]
    assert_close(w.grad, expected, **F32)
    assert_training_compiled()


def test_detach_stops_gradients():
    def f(x):
        return (x * x.detach()).sum()

    x = torch.randn(5, requires_grad=True)
    dynafuse.compile(f)(x).backward()
    assert_close(x.grad, x.detach())
    assert_training_compiled()


def test_sequence_lengths_share_one_symbolic_training_graph():
    def f(x, w):
        return F.gelu(x @ w).mean()

    w = torch.randn(8, 8, requires_grad=True)
    compiled = dynafuse.compile(f)
    for t in (3, 5, 7, 9):
        x = torch.randn(2, t, 8)
        ours = torch.autograd.grad(compiled(x, w), w)[0]
        eager = torch.autograd.grad(f(x, w), w)[0]
        assert_close(ours, eager, **F32)
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["symbolic_captures"] == 1, stats


def test_training_graph_dumps(tmp_path):
    model = mlp()
    compiled = dynafuse.compile(mse, options={"dump_dir": str(tmp_path)})
    compiled(model, torch.randn(2, 8), torch.randn(2, 4)).backward()
    (folder,) = tmp_path.iterdir()
    files = {path.name for path in folder.iterdir()}
    assert {"graph.graph", "training.graph", "kernels.loop", "backward"} <= files, files
    backward = {path.name for path in (folder / "backward").iterdir()}
    assert {"graph.graph", "kernels.loop"} <= backward, backward
    text = (folder / "training.graph").read_text()
    assert "// -----" in text and "tangent of forward output 0" in text
    assert "--passes=autodiff" in (folder / "replay.sh").read_text()


def saved_bytes(loss_of, params, inputs):
    """Bytes of distinct storages saved for backward (not parameters or
    inputs), seen by a saved_tensors_hooks pack hook: eager's and
    Dynafuse's SavedVariables alike."""
    excluded = {p.untyped_storage().data_ptr() for p in params}
    excluded |= {t.untyped_storage().data_ptr() for t in inputs}
    storages = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in excluded:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_of(*inputs)
    loss.backward()
    return sum(storages.values())


class NormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return x + F.gelu(self.norm(x))


@pytest.mark.parametrize("make,shape", [
    (mlp, (6, 8)),
    (NormBlock, (16, 32)),
    (lambda: nn.Sequential(nn.Linear(32, 32), nn.Softmax(-1)), (4, 32)),
])
def test_saved_activations_never_exceed_eagers(make, shape):
    model = make()
    out_features = model(torch.randn(*shape)).shape[-1]
    x, target = torch.randn(*shape), torch.randn(shape[0], out_features)

    def loss_of(x, target):
        return ((model(x) - target) ** 2).mean()

    eager = saved_bytes(loss_of, model.parameters(), (x, target))
    compiled = dynafuse.compile(loss_of)
    ours = saved_bytes(compiled, model.parameters(), (x, target))
    # (The pack hook's own frames run under the frame hook: not counted.)
    assert any(graph["training"] for graph in dynafuse.compiled_graphs())
    assert compiled(x, target).grad_fn.name() == "DynafuseBackward"
    assert 0 < eager and ours <= eager, (ours, eager)


def dropped(x, w, p):
    return F.dropout(x * w, p=p, training=True)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_training_dropout_is_statistically_eagers(p):
    x, w = torch.randn(256, 512), torch.randn(512, requires_grad=True)
    compiled = dynafuse.compile(dropped)
    y = compiled(x, w, p)
    assert y.grad_fn.name() == "DynafuseBackward"
    kept = y != 0
    n = kept.numel()
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(kept.float().mean().item() - (1 - p)) < 4 * sigma
    # Kept elements are scaled by 1 / (1 - p).
    assert_close(y[kept], (x * w)[kept].detach() / (1 - p), rtol=1e-5, atol=1e-6)
    # The backward recomputes the same mask from the run's seed.
    g = torch.randn_like(y)
    y.backward(g)
    assert_close(w.grad, (kept.float() / (1 - p) * x * g).sum(0), rtol=1e-4, atol=1e-4)
    # Another call draws another seed: masks independent of the first.
    other = compiled(x, w, p) != 0
    differ = (other != kept).float().mean().item()
    assert abs(differ - 2 * p * (1 - p)) < 8 * sigma
    assert_training_compiled()


def test_training_dropout_follows_torch_manual_seed_and_backends_agree():
    x, w = torch.randn(64, 96), torch.randn(96, requires_grad=True)
    results = []
    for backend in ("llvm", "interp", "llvm"):
        torch.manual_seed(11)
        results.append(dynafuse.compile(dropped, backend=backend)(x, w, 0.4).detach())
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])
    torch.manual_seed(12)
    assert not torch.equal(dynafuse.compile(dropped)(x, w, 0.4).detach(), results[0])


def test_dropout_modules_in_a_training_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.25),
                          nn.Linear(32, 4), nn.Dropout(0.1))
    compiled = dynafuse.compile(model)
    x = torch.randn(512, 16)
    out = compiled(x)
    assert out.grad_fn.name() == "DynafuseBackward"
    out.square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert_training_compiled()
    model.eval()  # eval mode: the identity, a separate entry
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    # Two dropout layers take disjoint streams: their masks are independent.
    model.train()
    assert len(dynafuse.compiled_graphs()) == 2


def attention_inputs(heads=4, groups=4, length=7, keys=9, dim=8):
    q = torch.randn(2, heads, length, dim, requires_grad=True)
    k = torch.randn(2, groups, keys, dim, requires_grad=True)
    v = torch.randn(2, groups, keys, dim, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("case", ["plain", "causal", "scale", "float mask", "bool mask",
                                  "grouped heads", "learned bias"])
def test_scaled_dot_product_attention_gradients(case):
    """Attention in training runs ATen's CPU flash kernel forward and
    backward (sdpa_flash), or, for a mask that requires grad, graph ops."""
    q, k, v = attention_inputs(groups=2 if case == "grouped heads" else 4,
                               keys=7 if case == "causal" else 9)
    kwargs = {}
    if case == "causal":
        kwargs["is_causal"] = True
    if case == "scale":
        kwargs["scale"] = 0.3
    if case == "float mask":
        kwargs["attn_mask"] = torch.randn(7, 9)
    if case == "bool mask":
        kwargs["attn_mask"] = torch.rand(2, 1, 7, 9) > 0.3
    if case == "grouped heads":
        kwargs["enable_gqa"] = True
    bias = torch.randn(1, 4, 7, 9, requires_grad=True)
    leaves = (q, k, v, bias) if case == "learned bias" else (q, k, v)

    def f(q, k, v, bias):
        mask = {"attn_mask": bias} if case == "learned bias" else kwargs
        return F.scaled_dot_product_attention(q, k, v, **mask).sin()

    out = dynafuse.compile(f)(q, k, v, bias)
    assert out.grad_fn.name() == "DynafuseBackward"
    cotangent = torch.randn(out.shape)
    ours = torch.autograd.grad(out, leaves, cotangent)
    eager = torch.autograd.grad(f(q, k, v, bias), leaves, cotangent)
    for mine, theirs in zip(ours, eager):
        assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert_training_compiled()
    graph = dynafuse.compiled_graphs()[0]
    assert graph["backward_extern_calls"] >= (2 if case == "learned bias" else 1)


def test_a_hook_on_an_intermediate_runs_eagerly_and_fires():
    """register_hook on a tensor made inside the frame: the frame falls back
    to eager for the call (with the reason logged), and the hook sees the
    gradient eager gives it."""
    seen = []

    def f(x, w):
        h = torch.tanh(x @ w)
        h.register_hook(lambda g: seen.append(g.clone()))
        return (h * 2).sum()

    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    dynafuse.compile(f)(x, w).backward()
    ours, ours_hooked = w.grad.clone(), seen.pop()
    w.grad = None
    f(x, w).backward()
    assert_close(ours, w.grad, **F32)
    assert_close(ours_hooked, seen.pop(), **F32)
    assert dynafuse.stats()["graph_breaks"] >= 1, dynafuse._C.break_reasons()


class SmallGPT2Block(nn.Module):
    """The benchmark's GPT-2 block (pre-norm attention with a causal mask,
    gelu MLP, residuals), at test size."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        attention = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class MemoryBoundBlock(nn.Module):
    def __init__(self, d=48):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(0.0)  # dropout off: comparable with eager

    def forward(self, x):
        return x + self.dropout(F.gelu(self.norm(x)))


@pytest.mark.parametrize("make,shape", [(SmallGPT2Block, (3, 8, 32)),
                                        (MemoryBoundBlock, (16, 48))],
                         ids=["gpt2-block", "memory-bound-block"])
def test_benchmark_blocks_train_step_by_step_like_eager(make, shape):
    model, twin = twins(lambda: make().train())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_twin = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    compiled = dynafuse.compile(mse)
    for step in range(3):
        x, y = torch.randn(*shape), torch.randn(*shape)
        opt.zero_grad()
        opt_twin.zero_grad()
        loss = compiled(model, x, y)
        assert loss.grad_fn.name() == "DynafuseBackward"
        loss.backward()
        expected = mse(twin, x, y)
        expected.backward()
        assert_close(loss.detach(), expected.detach(), **F32)
        opt.step()
        opt_twin.step()
        for mine, theirs in zip(model.parameters(), twin.parameters()):
            assert_close(mine.detach(), theirs.detach(), rtol=1e-4, atol=1e-5)
    assert_training_compiled()


def attention_with_dropout(q, k, v, mask, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3,
                                          is_causal=causal)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_attention_dropout_in_training_is_compiled_unbiased_and_seeded(mask_kind):
    # nn.MultiheadAttention in training passes its dropout to sdpa: graph
    # ops with the counter-based dropout (statistically eager's, not its
    # numbers), differentiated through
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    mask = {"none": None, "causal": None,
            "bool": torch.rand(5, 5) > 0.2,
            "float": torch.randn(5, 5)}[mask_kind]
    causal = mask_kind == "causal"
    if mask is not None and mask.dtype == torch.bool:
        mask[:, 0] = True  # every row keeps a key
    compiled = dynafuse.compile(attention_with_dropout, fullgraph=True)
    torch.manual_seed(1)
    first = compiled(q, k, v, mask, causal)
    torch.manual_seed(1)
    assert torch.equal(compiled(q, k, v, mask, causal), first)  # torch's seed decides
    first.sum().backward()
    assert all(t.grad is not None and t.grad.isfinite().all() for t in (q, k, v))
    mean = sum(compiled(q, k, v, mask, causal).detach() for _ in range(400)) / 400
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              is_causal=causal).detach()
    torch.testing.assert_close(mean, expected, atol=0.08, rtol=0)
    assert dynafuse.stats()["captures"] == 1


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_transformer_encoder_training_is_one_graph(dropout):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                       dropout=dropout, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).train()
    x = torch.randn(3, 7, 32)
    compiled = dynafuse.compile(encoder, fullgraph=True)
    out = compiled(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in encoder.parameters()]
    assert all(g.isfinite().all() for g in grads)
    assert dynafuse.stats()["captures"] == 1
    if dropout == 0.0:  # no randomness: eager's numbers
        encoder.zero_grad()
        expected = encoder(x)
        expected.square().mean().backward()
        assert_close(out, expected)
        for got, param in zip(grads, encoder.parameters()):
            assert_close(got, param.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_shape", [(6, 4)])
def test_mse_loss_trains_as_one_graph(reduction, target_shape):
    """F.mse_loss in a training step (its torch.broadcast_tensors and its
    kernel as graph ops): one graph, gradients equal to eager's. (A target
    of another shape makes eager warn: warnings.warn is a break.)"""
    import warnings
    torch.manual_seed(7)
    layer = nn.Linear(8, 4)
    reference = copy.deepcopy(layer)
    x, target = torch.randn(6, 8), torch.randn(target_shape)

    def loss_of(model, x, target):
        loss = F.mse_loss(model(x), target, reduction=reduction)
        return loss if reduction != "none" else loss.sum()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager warns about broadcasting
        dynafuse.compile(loss_of)(layer, x, target).backward()
        loss_of(reference, x, target).backward()
    for got, want in zip(layer.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-6)
    assert_compiled()
