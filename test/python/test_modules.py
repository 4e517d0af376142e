"""Capturing real model code: nn.Module calls and submodules, inlined user
functions, tensor metadata, module containers, in-place updates, hooks."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
import model_helpers
from conftest import assert_close, assert_compiled, assert_outputs_close, randomize_batch_norm


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, c = x.shape
        h = self.fc2(self.act(self.fc1(self.norm(x))))
        return x + self.drop(h).view(b, t, c)


class Stack(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = nn.Sequential(nn.Linear(width, width), nn.ReLU(inplace=True))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_module_stack_is_one_graph_and_reads_weights_each_call():
    model = Stack(16, 3).eval()
    compiled = dynafuse.compile(model)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.blocks[1].fc1.weight.mul_(1.5)
        assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert_compiled()
    assert dynafuse.stats()["cache_hits"] == 1
    (graph,) = dynafuse.compiled_graphs()
    assert graph["extern_calls"] == 7


def test_resnet18_is_one_graph():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    with torch.no_grad():
        randomize_batch_norm(model)
        image = torch.randn(2, 3, 64, 64)
        assert_close(dynafuse.compile(model)(image), model(image), rtol=1e-4, atol=1e-4)
    assert_compiled()
    (graph,) = dynafuse.compiled_graphs()
    # 20 convolutions and fc (the max pool's taps and the global pool are
    # kernels).
    assert graph["extern_calls"] == 21


def test_inlined_functions_use_their_own_globals_and_defaults():
    def f(x, *rest):
        return model_helpers.scaled_tanh(x) + model_helpers.scaled_tanh(x, offset=rest[0])

    x = torch.randn(7)
    assert_close(dynafuse.compile(f)(x, 2.0), f(x, 2.0))
    assert_compiled()
    saved = model_helpers.SCALE
    try:
        model_helpers.SCALE = 5.0
        assert_close(dynafuse.compile(f)(x, 2.0), f(x, 2.0))
    finally:
        model_helpers.SCALE = saved
    assert dynafuse.stats()["captures"] == 2


def test_tensor_metadata_drives_shapes():
    def f(x):
        n = x.size(0)
        assert x.dim() == 3 and x.ndim == 3
        y = x.reshape(n, -1).T
        return y.float() * x.numel() if x.dtype == torch.float32 else y

    x = torch.randn(4, 3, 2)
    assert_close(dynafuse.compile(f)(x), f(x))
    assert_compiled()


def test_in_place_updates_of_intermediates():
    def f(x, y):
        h = x * 2
        alias = h
        h += y
        h.relu_()
        return alias, F.relu(h - 1, inplace=True)

    x, y = torch.randn(6), torch.randn(6)
    assert_outputs_close(dynafuse.compile(f)(x, y), f(x, y))
    assert_compiled()


def test_in_place_updates_of_inputs_are_written_back():
    def f(x, y):
        x.add_(1)
        y.mul_(2).relu_()
        z = x * 3
        x += y
        return x, z, y

    compiled = dynafuse.compile(f, fullgraph=True)
    for shape in [(4, 3), (1, 5), (0, 2)]:
        x, y = torch.randn(shape), torch.randn(shape)
        x_eager, y_eager = x.clone(), y.clone()
        out, expected = compiled(x, y), f(x_eager, y_eager)
        assert out[0] is x and out[2] is y  # returned as the input objects
        for actual, wanted in zip((x, y, out[1]), (x_eager, y_eager, expected[1])):
            assert_close(actual, wanted)
    assert_compiled(captures=3)


def test_in_place_update_of_an_input_that_shares_memory_runs_eagerly():
    def f(x, y):
        x.add_(1)
        return y * 2  # eager sees the update through y

    base = torch.randn(4, 3)
    expected_base = base.clone()
    expected = f(expected_base, expected_base[1:])
    assert_close(dynafuse.compile(f)(base, base[1:]), expected)
    assert_close(base, expected_base)
    assert dynafuse.stats()["graph_breaks"] == 1
    # Separate tensors compile (after a reset: the break above left f's code
    # eager); a guard then keeps a later aliasing call eager.
    dynafuse.reset()
    x, y = torch.randn(4, 3), torch.randn(3, 3)
    assert_close(dynafuse.compile(f)(x, y), y * 2)
    assert_compiled()
    base = torch.randn(4, 3)
    expected_base = base.clone()
    expected = f(expected_base, expected_base[1:])
    assert_close(dynafuse.compile(f)(base, base[1:]), expected)
    assert_close(base, expected_base)
    stats = dynafuse.stats()
    assert stats["cache_hits"] == 0 and stats["graph_breaks"] == 1, stats


def test_buffer_updated_in_place_by_a_module():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(1))
            self.linear = nn.Linear(3, 3)

        def forward(self, x):
            self.steps += 1
            return self.linear(x) * self.steps

    model, reference = Counter().eval(), Counter().eval()
    reference.load_state_dict(model.state_dict())
    compiled = dynafuse.compile(model, fullgraph=True)
    x = torch.randn(2, 3)
    with torch.no_grad():
        for _ in range(3):
            assert_close(compiled(x), reference(x))
    assert_close(model.steps, reference.steps)
    assert_compiled()


def test_forward_hook_is_respected():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh()).eval()
    compiled = dynafuse.compile(model)
    x = torch.randn(3, 4)
    calls = []
    with torch.no_grad():
        compiled(x)
        handle = model[0].register_forward_hook(lambda module, inputs, output: calls.append(1))
        assert_close(compiled(x), model(x))
        handle.remove()
    assert len(calls) == 2  # the compiled call ran the hook too (eagerly)


def test_branches_on_module_attributes_are_guarded():
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.use_gelu = True

        def forward(self, x):
            if self.use_gelu:
                return F.gelu(x)
            return torch.sigmoid(x)

    gate = Gate()
    compiled = dynafuse.compile(gate)
    x = torch.randn(5)
    assert_close(compiled(x), F.gelu(x))
    gate.use_gelu = False
    assert_close(compiled(x), torch.sigmoid(x))
    assert_compiled(captures=2)


def test_returned_lists_stay_lists():
    def f(x):
        return [x + 1, (x * 2, [x - 1])]

    x = torch.randn(3)
    out = dynafuse.compile(f)(x)
    assert type(out) is list and type(out[1]) is tuple and type(out[1][1]) is list
    assert_outputs_close(out, f(x))
    assert_compiled()


def test_explain_reports_graphs_breaks_and_guards():
    def f(x):
        return torch.nonzero(x)  # its shape depends on the data

    with torch.no_grad():
        report = dynafuse.explain(Block(8).eval())(torch.randn(1, 2, 8))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.ops_per_graph[0] >= 5
    assert any("Float tensor of size [1, 2, 8]" in guard for guard in report.guards[0])
    broken = dynafuse.explain(f)(torch.randn(3))
    assert broken.graph_count == 0 and broken.graph_break_count == 1
    assert "nonzero" in broken.break_reasons[0]
    assert "graph break" in repr(broken)


def test_star_args_kwargs_and_dicts():
    options = {"dim": -1, "keepdim": True}

    def f(x, *rest, **unused):
        parts = [x, *rest]
        total = torch.cat(parts, **{"dim": 0})
        return {"sum": total.sum(**options), "max": total.amax(**options)}

    x, y = torch.randn(2, 3), torch.randn(1, 3)
    out = dynafuse.compile(lambda a, b: f(a, b))(x, y)
    expected = f(x, y)
    assert type(out) is dict and list(out) == ["sum", "max"]
    assert_outputs_close(out, expected)
    assert_compiled()


def test_python_operators_on_tensors():
    def f(a, b, m, n):
        return (a & b) | (a ^ ~b), m % 3, (m > 0) & ~(n > 0), 7 % (m.abs() + 1)

    a = torch.randint(-8, 8, (5,))
    b = torch.randint(-8, 8, (5,))
    m, n = torch.randn(5) * 4, torch.randn(5)
    assert_outputs_close(dynafuse.compile(f)(a, b, m, n), f(a, b, m, n))
    assert_compiled()


def test_requires_grad_flag_of_inputs_under_no_grad():
    def f(x):
        return x * 2 if x.requires_grad else x * 3

    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        assert_close(dynafuse.compile(f)(x), x * 2)
    assert_compiled()


def test_state_queries_fold_and_autocast_is_captured():
    def f(x):
        if torch.is_grad_enabled() or torch.jit.is_scripting():
            return x - 1
        return x + 1 if not torch.overrides.has_torch_function((x,)) else x

    x = torch.randn(4)
    with torch.no_grad():
        assert_close(dynafuse.compile(f)(x), x + 1)
    assert_compiled()
    dynafuse.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = dynafuse.compile(lambda t: t * 2)(x)
    assert_close(out, x * 2)
    assert_compiled()


def test_many_instances_of_one_block_share_one_entry():
    blocks = [Block(8).eval() for _ in range(12)]
    x = torch.randn(1, 3, 8)
    with torch.no_grad():
        for block in blocks:
            assert_close(dynafuse.compile(block)(x), block(x), rtol=1e-5, atol=1e-5)
    assert_compiled()
    assert dynafuse.stats()["cache_hits"] == 11, dynafuse.stats()
    # A block of another type (or a changed attribute) does not hit.
    other = Block(8).eval()
    other.drop = nn.Identity()
    with torch.no_grad():
        assert_close(dynafuse.compile(other)(x), other(x), rtol=1e-5, atol=1e-5)
    assert_compiled(captures=2)


class Towers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])
        self.scale = 0.5

    def forward(self, x):
        outs = [layer(x) * self.scale for layer in self.layers]
        assert all(o is not None for o in outs), "missing output"
        pairs = {f"t{i}": out.relu() for i, out in enumerate(outs)}
        total = sum(outs)
        mixed = [a - b for a, b in zip(outs, outs[1:])]
        return total, pairs, len(mixed), tuple(o.sum(-1) for o in mixed)


def test_comprehensions_generators_and_container_builtins():
    model = Towers().eval()
    x = torch.randn(4, 6)
    with torch.no_grad():
        got, want = dynafuse.compile(model)(x), model(x)
    assert list(got[1]) == list(want[1])
    assert got[2] == want[2] == 2
    assert_outputs_close(got, want)
    assert_compiled()


def test_membership_isinstance_and_device_attributes():
    def f(x):
        kind = x.device.type
        h = x * 2
        if kind in ["cpu", "cuda"] and isinstance(h, torch.Tensor) and not isinstance(kind, int):
            return h + len(range(3))
        return h

    x = torch.randn(4)
    assert_close(dynafuse.compile(f)(x), x * 2 + 3)
    assert_compiled()


def test_outputs_that_view_inputs_share_their_memory():
    def f(x):
        return x.t(), x[1:, ::2], x.unsqueeze(0), x[0], x + 1

    compiled = dynafuse.compile(f, fullgraph=True)
    for x in [torch.randn(4, 6), torch.randn(5, 8)[:, 1:7], torch.randn(1, 6)]:
        outputs, expected = compiled(x), f(x)
        for actual, wanted in zip(outputs[:4], expected[:4]):
            assert_close(actual, wanted)
            assert actual.stride() == wanted.stride()
            assert actual.storage_offset() == wanted.storage_offset()
            assert actual.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert outputs[4].untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert len(outputs) == len(expected)
        assert_close(outputs[4], expected[4])
        x.mul_(2)  # visible through the returned views, as in eager
        assert_close(outputs[0], x.t())
    assert_compiled(captures=3)


def test_channels_last_convolution_outputs_keep_eager_strides():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(8),
                          nn.MaxPool2d(2), nn.Conv2d(8, 4, 1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d((2, 2))).eval()
    with torch.no_grad():
        for x in [torch.randn(2, 3, 9, 7), torch.randn(1, 3, 6, 6)]:
            for layout in [torch.contiguous_format, torch.channels_last]:
                image = x.to(memory_format=layout)
                actual, expected = dynafuse.compile(model)(image), model(image)
                assert_close(actual, expected, rtol=1e-5, atol=1e-5)
                assert actual.stride() == expected.stride(), layout
    assert_compiled(captures=4)


@pytest.mark.parametrize("functional", [False, True])
def test_adaptive_avg_pool2d_with_an_int_output_size(functional):
    conv = nn.Conv2d(3, 4, 1).eval()
    pool = (lambda t: F.adaptive_avg_pool2d(t, 2)) if functional else nn.AdaptiveAvgPool2d(2)
    model = nn.Sequential(conv, pool) if not functional else (lambda t: pool(conv(t)))
    x = torch.randn(2, 3, 9, 7)
    with torch.no_grad():
        assert_close(dynafuse.compile(model)(x), model(x), rtol=1e-5, atol=1e-5)
    assert_compiled()


class SmallConvNet(nn.Module):
    """Convolutions (plain, strided, depthwise, 1x1) with batch norm, a
    residual add and a classifier: a 2-D output, so the graph runs
    channels-last inside."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 12, 3, stride=2, padding=1),
                                  nn.BatchNorm2d(12), nn.ReLU6())
        self.depthwise = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.pointwise = nn.Conv2d(12, 12, 1)
        self.norm = nn.BatchNorm2d(12)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        h = self.stem(x)
        h = h + self.norm(self.pointwise(F.relu(self.depthwise(h))))
        return self.head(F.adaptive_avg_pool2d(h, (1, 1)).flatten(1))


def test_conv_net_runs_channels_last_inside_and_matches_eager():
    model = randomize_batch_norm(SmallConvNet()).eval()
    inputs = [torch.randn(2, 3, 9, 7), torch.randn(1, 3, 16, 16),
              torch.randn(3, 3, 12, 10).to(memory_format=torch.channels_last),
              torch.randn(2, 3, 20, 9)[:, :, ::2]]  # non-contiguous
    with torch.no_grad():
        for x in inputs:
            actual, expected = dynafuse.compile(model)(x), model(x)
            assert_close(actual, expected, rtol=1e-5, atol=1e-5)
            assert actual.stride() == expected.stride()
    assert_compiled(captures=4)


class FlattenedFeatures(nn.Module):
    """A classifier over feature maps larger than 1x1 (VGG's 7x7 pool, a
    LeNet view): channels-last inside (its depthwise layer), so the
    flatten is a copy."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(),
                                      nn.Conv2d(6, 6, 3, padding=1, groups=6),
                                      nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d((3, 2))
        self.fc = nn.Linear(6 * 3 * 2, 4)
        self.fc_view = nn.Linear(6 * 6 * 6, 4)

    def forward(self, x):
        h = self.features(x)
        return self.fc(self.pool(h).flatten(1)) + self.fc_view(h.view(-1, 6 * 6 * 6))


def test_flattening_channels_last_feature_maps():
    model = FlattenedFeatures().eval()
    with torch.no_grad():
        for x in [torch.randn(2, 3, 16, 16), torch.randn(1, 3, 16, 16)]:
            assert_close(dynafuse.compile(model, fullgraph=True)(x), model(x),
                         rtol=1e-5, atol=1e-5)
    assert_compiled(captures=2)


def test_module_and_parameter_containers():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.ReLU()})
            self.scales = nn.ParameterList([nn.Parameter(torch.randn(4))])

        def forward(self, x):
            for _, layer in self.layers.items():
                x = layer(x)
            for key in self.layers:
                x = x + len(key)
            for layer in self.layers.values():
                x = layer(x)
            return x * self.scales[0] * self.scales[-1] * self.layers["a"](x)

    model = Model().eval()
    x = torch.randn(2, 4)
    compiled = dynafuse.compile(model, fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
        model.scales.append(nn.Parameter(torch.randn(4)))  # scales[-1] moves
        assert_close(compiled(x), model(x))
    assert_compiled(captures=2)
