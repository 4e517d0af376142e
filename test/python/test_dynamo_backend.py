"""torch.compile(model, backend="dynafuse"): TorchDynamo captures, Dynafuse
compiles each FX graph. The backend is found by name through its entry
point; functions, modules and code Dynamo splits into several graphs run
Dynafuse's kernels; ops outside Dynafuse's table run as extern calls;
Dynamo's symbolic sizes stay symbols; and the model suites give the same
results through both capture paths (Dynafuse's own and Dynamo's)."""
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close

dynamo = pytest.importorskip("torch._dynamo")
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def dynamo_graphs():
    """Graphs Dynafuse compiled from Dynamo's FX graphs (their code is
    FX-generated: '<eval_with_key>.N')."""
    return [g for g in dynafuse.compiled_graphs() if g["where"].startswith("<eval_with_key>")]


def assert_dynamo_compiled(graphs):
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["compile_failures"] == 0, stats
    assert stats["run_failures"] == 0, stats
    assert len(dynamo_graphs()) == graphs, dynafuse.compiled_graphs()
    assert stats["cache_hits"] >= graphs, stats


def test_backend_is_found_by_name_without_importing_dynafuse():
    script = (
        "import sys, torch\n"
        "from torch._dynamo.backends.registry import lookup_backend, list_backends\n"
        "assert 'dynafuse' not in sys.modules\n"
        "backend = lookup_backend('dynafuse')\n"
        "print(backend.__module__, backend.__name__, 'dynafuse' in list_backends())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["dynafuse.dynamo_backend", "dynafuse_backend", "True"], out


def test_a_function():
    def f(x, w):
        return F.gelu(x * w + 1).sum(-1)

    compiled = torch.compile(f, backend="dynafuse")
    cases = [(torch.randn(4, 8), torch.randn(8)), (torch.randn(1, 8), torch.randn(8)),
             (torch.randn(3, 0), torch.randn(0)),
             (torch.randn(8, 6).t(), torch.randn(1))]  # non-contiguous, broadcast
    for x, w in cases:
        for _ in range(2):  # the second call runs the cached entry
            assert_close(compiled(x, w), f(x, w), rtol=1e-5, atol=1e-5)
    stats = dynafuse.stats()
    assert len(dynamo_graphs()) == stats["captures"] >= 2, dynafuse.compiled_graphs()
    assert stats["cache_hits"] >= 4 and stats["graph_breaks"] == 0, stats


def test_a_module_with_noncontiguous_and_broadcast_inputs():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)
            self.norm = nn.LayerNorm(32)

        def forward(self, x, bias):
            return self.norm(F.silu(self.fc(x)) + bias).softmax(-1)

    model = Block().eval()
    compiled = torch.compile(model, backend="dynafuse")
    x = torch.randn(16, 5).t()
    bias = torch.randn(32)
    with torch.no_grad():
        for _ in range(2):
            assert_close(compiled(x, bias), model(x, bias), rtol=1e-5, atol=1e-5)
    assert_dynamo_compiled(graphs=1)


def test_a_model_dynamo_splits_into_several_graphs():
    def f(x):
        y = torch.tanh(x) * 2
        if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
            y = y + 1
        else:
            y = y - 1
        return y.exp()

    compiled = torch.compile(f, backend="dynafuse")
    for _ in range(4):
        x = torch.randn(6, 3)
        assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-5)
    graphs = dynamo_graphs()
    assert len(graphs) >= 2, dynafuse.compiled_graphs()
    assert dynafuse.stats()["graph_breaks"] == 0


def test_ops_outside_the_op_table_run_as_extern_calls():
    def f(x):
        return torch.cumsum(x.relu(), dim=1) * 3

    assert torch.cumsum not in dynafuse.ops.FUNCTIONS
    compiled = torch.compile(f, backend="dynafuse")
    for _ in range(2):
        x = torch.randn(4, 9)
        assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-5)
    assert_dynamo_compiled(graphs=1)
    assert dynamo_graphs()[0]["extern_calls"] == 1


def aten_operators(x):
    return torch.ops.aten.cumsum.default(x.relu(), 1) * 3 + torch.ops.aten.sin(x)


@pytest.mark.parametrize("path", ["dynafuse", "torch.compile"])
def test_aten_operators_run_as_extern_calls(path):
    compiled = (dynafuse.compile(aten_operators) if path == "dynafuse"
                else torch.compile(aten_operators, backend="dynafuse"))
    x = torch.randn(4, 9)
    assert_close(compiled(x), aten_operators(x), rtol=1e-5, atol=1e-5)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["graph_breaks"] == 0, stats
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 2


def test_aten_operators_that_write_into_arguments_are_not_extern_calls():
    def f(x, out):
        y = x * 2
        torch.ops.aten.add_.Tensor(y, x)
        torch.ops.aten.mul.out(y, 3, out=out)
        return y + 1

    x = torch.randn(5)
    out, expected_out = torch.empty(5), torch.empty(5)
    compiled = dynafuse.compile(f)
    assert_close(compiled(x, out), f(x, expected_out))
    assert_close(out, expected_out)
    reasons = " ".join(dynafuse._C.break_reasons())
    assert "aten::add_" in reasons and "writes into its arguments" in reasons, reasons


def test_symbolic_sizes_from_dynamo_stay_symbols():
    def f(x, w):
        b, t, c = x.shape
        y = (x @ w).view(b, t, 2, c // 2).transpose(1, 2)
        return y.sum(-1) * 2

    compiled = torch.compile(f, backend="dynafuse")
    w = torch.randn(8, 8)
    for t in (3, 5, 7, 9, 11):
        x = torch.randn(2, t, 8)
        assert_close(compiled(x, w), f(x, w), rtol=1e-5, atol=1e-5)
    stats = dynafuse.stats()
    # Dynamo's static graph (t=3), then its symbolic one: static at t=5,
    # symbolic from t=7 on, for every later length.
    assert stats["captures"] == 3 and stats["symbolic_captures"] == 1, stats
    assert any("s0" in guard for graph in dynamo_graphs() for guard in graph["guards"])


def test_mode_and_options_reach_the_backend(tmp_path):
    def f(x):
        return (x * 2).sigmoid()

    compiled = torch.compile(f, backend="dynafuse", mode="max-autotune-no-cudagraphs")
    assert_close(compiled(torch.ones(3)), f(torch.ones(3)))
    dynamo.reset()
    compiled = torch.compile(f, backend="dynafuse", options={"dump_dir": str(tmp_path)})
    compiled(torch.ones(3))
    assert [name for name in tmp_path.iterdir()], "nothing dumped"
    dynamo.reset()
    bad = torch.compile(f, backend="dynafuse", options={"vector_width": 4})
    with pytest.raises(Exception, match="unknown dynafuse option 'vector_width'"):
        bad(torch.ones(3))


def test_training_through_torch_compile_runs_the_compiled_backward():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    twin = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="dynafuse")
    x = torch.randn(3, 4)
    out = compiled(x)
    assert out.grad_fn.name() == "DynafuseBackward"
    out.square().sum().backward()
    twin(x).square().sum().backward()
    for ours, eager in zip(model.parameters(), twin.parameters()):
        assert_close(ours.grad, eager.grad, rtol=1e-5, atol=1e-6)
    graphs = dynamo_graphs()
    assert len(graphs) == 1 and graphs[0]["training"], graphs


def suite_models():
    """The suite's models (benchmarks/workloads.py), at test sizes."""
    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    from workloads import GPT2Block
    torch.manual_seed(0)
    models = [
        ("mlp", nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)),
         (torch.randn(8, 64),)),
        ("gpt2 block", GPT2Block(d=64, heads=4), (torch.randn(2, 16, 64),)),
    ]
    torchvision = pytest.importorskip("torchvision")
    for name in ("resnet18", "mobilenet_v2"):
        models.append((name, getattr(torchvision.models, name)(weights=None),
                       (torch.randn(2, 3, 64, 64),)))
    return models


@pytest.mark.parametrize("index", range(4))
def test_the_suite_gives_the_same_results_through_both_capture_paths(index):
    name, model, inputs = suite_models()[index]
    model.eval()
    ours = dynafuse.compile(model)
    theirs = torch.compile(model, backend="dynafuse")
    with torch.no_grad():
        expected = model(*inputs)
        from_ours = ours(*inputs)
        own_graphs = len(dynafuse.compiled_graphs())
        from_theirs = theirs(*inputs)
    assert own_graphs == 1, (name, dynafuse.compiled_graphs())
    assert len(dynamo_graphs()) == 1, (name, dynafuse.compiled_graphs())
    tolerance = dict(rtol=1e-4, atol=1e-4)
    assert_close(from_ours, expected, **tolerance)
    assert_close(from_theirs, expected, **tolerance)
    assert_close(from_theirs, from_ours, **tolerance)
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["run_failures"] == 0, stats


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5", "vit"])
def test_transformers_models_are_one_graph_through_both_capture_paths(name):
    pytest.importorskip("transformers", minversion="5.0")
    from test_transformers_models import inputs_for, small
    model = small(name).eval()
    inputs = inputs_for(name, 2, 7)
    ours = dynafuse.compile(model, fullgraph=True)
    theirs = torch.compile(model, backend="dynafuse")
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
        from_ours = ours(**inputs).last_hidden_state
        from_theirs = theirs(**inputs).last_hidden_state
    assert_close(from_ours, expected, rtol=1e-4, atol=1e-4)
    assert_close(from_theirs, expected, rtol=1e-4, atol=1e-4)
    assert len(dynamo_graphs()) == 1, dynafuse.compiled_graphs()
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["eager_frames"] == 0, stats
    assert stats["graph_breaks"] == 0 and stats["run_failures"] == 0, stats
