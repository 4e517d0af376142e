"""dynafuse.compile's torch.compile-style arguments (mode, options,
disable, and the errors for bad values of each), and the compiled module's
state_dict, parameters and attribute access."""
import os

import pytest
import torch
import torch.nn as nn

import dynafuse
from conftest import assert_close, assert_compiled


def affine_gelu(x, w):
    return torch.nn.functional.gelu(x * w + 1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.register_buffer("scale", torch.full((16,), 2.0))
        self.label = "net"

    def forward(self, x):
        return self.norm(self.fc(x)).relu() * self.scale


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_every_torch_compile_mode_compiles(mode):
    x, w = torch.randn(5, 7), torch.randn(7)
    compiled = dynafuse.compile(affine_gelu, mode=mode)
    assert_close(compiled(x, w), affine_gelu(x, w), rtol=1e-5, atol=1e-5)
    assert_compiled()
    assert compiled._dynafuse_settings.mode == (mode or "default")


@pytest.mark.parametrize("arguments,error,message", [
    ({"mode": "fast"}, ValueError, "unknown mode 'fast'; choose one of"),
    ({"dynamic": "yes"}, ValueError, "dynamic must be None, True or False"),
    ({"fullgraph": 1.5}, ValueError, "fullgraph must be True or False"),
    ({"backend": "tpu"}, ValueError, "unknown backend 'tpu'"),
    ({"options": {"dump_directory": "x"}}, ValueError,
     "unknown dynafuse option 'dump_directory'; valid options: automatic_dynamic_shapes, dump_dir, log, recompile_limit"),
    ({"options": {"recompile_limit": "3"}}, TypeError,
     "option 'recompile_limit' must be int"),
    ({"options": {"recompile_limit": True}}, TypeError,
     "option 'recompile_limit' must be int"),
    ({"options": {"recompile_limit": -1}}, ValueError, "must be >= 0"),
    ({"options": {"log": 3}}, TypeError, "option 'log' must be str or NoneType"),
    ({"options": ["dump_dir"]}, TypeError, "options must be a dict"),
])
def test_bad_arguments_are_refused_with_what_is_valid(arguments, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        dynafuse.compile(affine_gelu, **arguments)
    with pytest.raises(error, match=message.replace("(", r"\(")):
        dynafuse.compile(**arguments)  # the decorator form checks at once too


def test_disable_returns_the_callable_unchanged():
    module = Net()
    assert dynafuse.compile(affine_gelu, disable=True) is affine_gelu
    assert dynafuse.compile(module, disable=True) is module
    assert dynafuse.compile(disable=True)(affine_gelu) is affine_gelu
    affine_gelu(torch.randn(3), torch.randn(3))
    assert dynafuse.stats()["captures"] == 0


def test_options_dump_dir_applies_to_that_callable_only(tmp_path):
    def other(x):
        return x.sin() + 1

    dumped = dynafuse.compile(affine_gelu, options={"dump_dir": str(tmp_path / "mine")})
    plain = dynafuse.compile(other)
    x = torch.randn(4, 4)
    dumped(x, x)
    plain(x)
    assert dynafuse.config.dump_dir in (None, "")
    folders = os.listdir(tmp_path / "mine")
    assert len(folders) == 1 and "affine_gelu" in folders[0], folders
    assert "graph.graph" in os.listdir(tmp_path / "mine" / folders[0])
    assert dynafuse.stats()["captures"] == 2


def test_options_recompile_limit_sends_later_shapes_to_eager():
    compiled = dynafuse.compile(affine_gelu, dynamic=False, options={"recompile_limit": 1})
    for n in (3, 4, 5):
        x, w = torch.randn(n, 6), torch.randn(6)
        assert_close(compiled(x, w), affine_gelu(x, w), rtol=1e-5, atol=1e-5)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["recompile_limit_hits"] >= 1, stats


def test_options_automatic_dynamic_shapes_off_compiles_each_size():
    compiled = dynafuse.compile(affine_gelu, options={"automatic_dynamic_shapes": False})
    for n in (3, 4, 5):
        compiled(torch.randn(n, 6), torch.randn(6))
    stats = dynafuse.stats()
    assert stats["captures"] == 3 and stats["symbolic_captures"] == 0, stats
    automatic = dynafuse.compile(lambda x, w: x * w - 1)
    for n in (3, 4, 5):
        automatic(torch.randn(n, 6), torch.randn(6))
    assert dynafuse.stats()["symbolic_captures"] == 1


def test_options_log_logs_that_callable_only(capfd):
    logged = dynafuse.compile(affine_gelu, options={"log": "recompiles"})
    quiet = dynafuse.compile(lambda x: x.cos() * 3)
    for n in (3, 4):
        logged(torch.randn(n, 2), torch.randn(2))
        quiet(torch.randn(n, 2))
    err = capfd.readouterr().err
    assert "recompiling affine_gelu" in err, err
    assert "<lambda>" not in err, err
    assert dynafuse.config.log in (None, "")


def test_options_resume_after_breaks_off_runs_the_frame_eagerly():
    def with_break(x):
        y = x * 2
        print("", end="")
        return y + 1

    compiled = dynafuse.compile(with_break, options={"resume_after_breaks": False})
    x = torch.randn(4)
    assert_close(compiled(x), with_break(x))
    stats = dynafuse.stats()
    assert stats["captures"] == 0 and stats["eager_frames"] >= 1, stats

    def same_with_break(x):  # another code object: with_break's stays eager
        y = x * 2
        print("", end="")
        return y + 1

    dynafuse.compile(same_with_break)(torch.randn(4))
    assert dynafuse.stats()["captures"] == 2  # the graph before the break, and after


def test_compiled_module_keeps_state_dict_parameters_and_attributes():
    model = Net()
    compiled = dynafuse.compile(model)
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert [name for name, _ in compiled.named_parameters()] == \
        [name for name, _ in model.named_parameters()]
    assert [name for name, _ in compiled.named_buffers()] == ["scale"]
    assert all(a is b for a, b in zip(compiled.parameters(), model.parameters()))
    assert compiled.fc is model.fc and compiled.label == "net"
    assert compiled.scale is model.scale
    assert "fc" in dir(compiled) and compiled._orig_mod is model
    with pytest.raises(AttributeError, match="no_such_thing"):
        compiled.no_such_thing  # noqa: B018

    x = torch.randn(3, 8)
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert_compiled()

    other = Net()
    compiled.load_state_dict(other.state_dict())
    assert torch.equal(model.fc.weight, other.fc.weight)
    prefixed = {"_orig_mod." + key: value * 0.5 for key, value in other.state_dict().items()}
    compiled.load_state_dict(prefixed)  # torch.compile's checkpoints load too
    assert torch.equal(model.fc.weight, other.fc.weight * 0.5)
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)  # reads the new weights
    with pytest.raises(RuntimeError, match="Missing key"):
        compiled.load_state_dict({"fc.weight": other.fc.weight})


def test_compiled_module_follows_train_eval_and_dtype_changes():
    model = Net()
    compiled = dynafuse.compile(model)
    compiled.eval()
    assert not model.training
    compiled.double()
    assert model.fc.weight.dtype == torch.float64
    x = torch.randn(2, 8, dtype=torch.float64)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
    assert_compiled()


def test_compiled_module_call_is_one_captured_frame_with_hooks_traced():
    """A compiled module's call is captured whole (the wrapped module's
    hooks and forward, no nn.Module call machinery left in Python): one
    entry, which a hook added later on the wrapped module invalidates."""
    net = Net().eval()
    net.fc.register_forward_hook(lambda module, args, out: out * 2)
    compiled = dynafuse.compile(net)
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert_close(compiled(x), net(x), rtol=1e-5, atol=1e-5)
        assert_compiled()
        net.norm.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
        assert_close(compiled(x), net(x), rtol=1e-5, atol=1e-5)
    assert dynafuse.stats()["captures"] == 2, dynafuse.stats()
    assert dynafuse.stats()["graph_breaks"] == 0, dynafuse.stats()


def test_hooks_on_the_compiled_wrapper_run_around_the_call():
    net = Net().eval()
    compiled = dynafuse.compile(net)
    calls = []
    compiled.register_forward_pre_hook(lambda module, args: calls.append("pre"))
    compiled.register_forward_hook(lambda module, args, out: out + 1)
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert_close(compiled(x), net(x) + 1, rtol=1e-5, atol=1e-5)
    assert calls == ["pre"]
    assert_compiled()


def test_a_deep_copy_of_a_compiled_module_runs_its_own_module():
    net = Net().eval()
    compiled = dynafuse.compile(net)
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
        import copy
        twin = copy.deepcopy(compiled)
        twin._orig_mod.scale.zero_()
        assert torch.count_nonzero(twin(x)) == 0
        assert_close(compiled(x), net(x), rtol=1e-5, atol=1e-5)
        assert torch.count_nonzero(compiled(x)) > 0


@pytest.mark.parametrize("backend", ["auto", "llvm"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_a_compiled_module_goes_with_its_last_reference(backend, training):
    """Nothing a compiled module binds refers back to it: the wrapper and
    the wrapped module are freed when their last reference goes, without
    waiting for a cycle collection (a DDP process that tears down its
    process group relies on it: modules kept for the final collection
    outlive the state their hooks refer to)."""
    import gc
    import weakref

    def run_once():
        net = Net().train(training)
        compiled = dynafuse.compile(net, backend=backend)
        x = torch.randn(3, 8, requires_grad=training)
        for _ in range(2):
            out = compiled(x)
            if training:
                out.sum().backward()
        assert_compiled()
        return weakref.ref(net), weakref.ref(compiled)

    enabled = gc.isenabled()
    gc.disable()
    try:
        net, compiled = run_once()
        assert net() is None and compiled() is None
    finally:
        if enabled:
            gc.enable()
