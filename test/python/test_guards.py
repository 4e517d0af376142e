"""Guards, the cache on the code object, recompiles and the recompile limit."""
import ctypes
import math

import sys

import pytest
import torch

import dynafuse
from conftest import assert_close, assert_compiled

SCALE = 2.0


def scaled(x):
    return torch.tanh(x) * SCALE


def test_second_call_hits_the_cache():
    f = dynafuse.compile(lambda x, y: x * y + 1)
    x, y = torch.randn(8, 3), torch.randn(3)
    f(x, y)
    assert_close(f(x, y), x * y + 1)
    assert_close(f(torch.randn(8, 3), torch.randn(3)).shape and f(x, y), x * y + 1)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["cache_hits"] == 3, stats


def test_new_shape_dtype_or_strides_recompile():
    f = dynafuse.compile(lambda x: x.sigmoid() - x)
    inputs = [torch.randn(4, 5), torch.randn(6, 5), torch.randn(4, 5).double(),
              torch.randn(5, 4).t()]
    for x in inputs:
        assert_close(f(x), x.sigmoid() - x)
    assert dynafuse.stats()["captures"] == len(inputs)
    for x in inputs:
        assert_close(f(x), x.sigmoid() - x)
    stats = dynafuse.stats()
    assert stats["captures"] == len(inputs) and stats["cache_hits"] == len(inputs), stats


def test_global_value_is_guarded():
    global SCALE
    f = dynafuse.compile(scaled)
    x = torch.randn(10)
    try:
        assert_close(f(x), torch.tanh(x) * 2.0)
        SCALE = 3.0
        assert_close(f(x), torch.tanh(x) * 3.0)
    finally:
        SCALE = 2.0
    assert dynafuse.stats()["captures"] == 2


def test_constant_argument_is_guarded():
    f = dynafuse.compile(lambda x, alpha: x * alpha)
    x = torch.randn(5)
    assert_close(f(x, 2), x * 2)
    assert_close(f(x, 3), x * 3)
    assert_close(f(x, 2.5), x * 2.5)
    assert dynafuse.stats()["captures"] == 3


def test_requires_grad_and_grad_mode_pick_the_training_or_inference_entry():
    f = dynafuse.compile(lambda x: torch.exp(x) * 2)
    x = torch.randn(4, requires_grad=True)
    out = f(x)
    assert out.grad_fn.name() == "DynafuseBackward"
    out.sum().backward()
    assert_close(x.grad, torch.exp(x.detach()) * 2)
    assert dynafuse.stats()["captures"] == 1
    with torch.no_grad():
        result = f(x)
        assert not result.requires_grad
        assert_close(result, torch.exp(x) * 2)
    plain = x.detach().clone()  # requires_grad False: a third entry
    assert not f(plain).requires_grad
    stats = dynafuse.stats()
    assert stats["captures"] == 3 and stats["graph_breaks"] == 0, stats
    assert [graph["training"] for graph in dynafuse.compiled_graphs()] == [True, False, False]


def test_grad_mode_is_guarded():
    f = dynafuse.compile(lambda x: x + 1)
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        assert not f(x).requires_grad
    assert dynafuse.stats()["captures"] == 1
    out = f(x)
    assert out.requires_grad


def test_recompile_limit_then_eager():
    dynafuse.config.recompile_limit = 2
    f = dynafuse.compile(lambda x: x * 3, dynamic=False)
    for n in range(1, 6):
        x = torch.randn(n)
        assert_close(f(x), x * 3)
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["recompile_limit_hits"] == 1, stats


def test_recompile_log_names_the_failed_guard(capfd):
    dynafuse.config.log = "recompiles"
    f = dynafuse.compile(lambda x: x - 1)
    f(torch.randn(2, 2))
    f(torch.randn(3, 2))
    err = capfd.readouterr().err
    assert "guard failed" in err and "size [2, 2]" in err, err


def eval_frame_function():
    """The interpreter's PEP 523 frame evaluation function (its address), as
    CPython itself holds it: what the hook's installation really changes."""
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    current = api._PyInterpreterState_GetEvalFrameFunc
    current.restype, current.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    return current(api.PyInterpreterState_Get())


def test_hook_is_installed_only_during_compiled_calls():
    default = eval_frame_function()
    seen = []

    def probe(x):
        seen.append(eval_frame_function())  # ctypes: a graph break
        return x + 1

    def plain(x):
        return x * 2

    f = dynafuse.compile(lambda x: x + 1)
    x = torch.randn(2)
    assert_close(f(x), x + 1)
    assert_compiled()
    assert eval_frame_function() == default
    before = dynafuse.stats()
    plain(x)
    assert dynafuse.stats() == before
    # Inside a compiled call the hook is the interpreter's frame function...
    assert_close(dynafuse.compile(probe)(x), x + 1)
    assert len(seen) == 1 and seen[0] not in (None, default), (seen, default)
    # ...and it is removed after it, also when the call raises.
    assert eval_frame_function() == default
    with pytest.raises(RuntimeError):
        dynafuse.compile(lambda a, b: a + b)(torch.randn(3), torch.randn(4))
    assert eval_frame_function() == default


def test_hook_restores_the_frame_function_installed_before_it():
    """Under another PEP 523 user (here torch._dynamo's frame function in
    its run-only mode), a compiled call installs the hook on top of it and
    puts it back afterwards."""
    eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    if eval_frame is None or not hasattr(eval_frame, "set_eval_frame"):
        pytest.skip("this torch has no torch._C._dynamo.eval_frame.set_eval_frame")
    default = eval_frame_function()
    seen = []

    def probe(x):
        seen.append(eval_frame_function())
        return torch.sigmoid(x)

    x = torch.randn(4)
    previous = eval_frame.set_eval_frame(False)  # dynamo's run-only frame function
    try:
        other = eval_frame_function()
        # Once torch.compile has run in this process (test_dynamo_backend),
        # dynamo's frame function stays installed: it is `default` too.
        assert other != default or "torch._dynamo.eval_frame" in sys.modules
        assert_close(dynafuse.compile(lambda t: t * 3)(x), x * 3)
        assert_compiled()
        assert eval_frame_function() == other
        assert_close(dynafuse.compile(probe)(x), torch.sigmoid(x))
        assert eval_frame_function() == other
    finally:
        eval_frame.set_eval_frame(previous)
    assert len(seen) == 1 and seen[0] not in (default, other), (seen, default, other)
    assert eval_frame_function() == default


def test_backend_is_part_of_the_cache_key():
    def f(x):
        return x.exp() + 1

    x = torch.randn(5)
    dynafuse.compile(f, backend="llvm")(x)
    assert_close(dynafuse.compile(f, backend="interp")(x), f(x))
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["cache_hits"] == 0, stats


OFFSET = 2.0


def test_globals_read_in_a_comprehension_of_the_frame_are_guarded():
    # The generator body is code made during capture and inlined from the
    # frame itself: its globals are the frame's (this used to build a guard
    # source with no parent and crash on the first cache hit).
    def f(x):
        return x * sum(abs(v) + OFFSET for v in (1, -2))

    compiled = dynafuse.compile(f, fullgraph=True)
    x = torch.randn(3)
    assert_close(compiled(x), f(x))
    assert_close(compiled(x), f(x))
    assert dynafuse.stats()["cache_hits"] == 1
    global OFFSET
    OFFSET = 3.0
    try:
        assert_close(compiled(x), f(x))
        assert dynafuse.stats()["captures"] == 2
    finally:
        OFFSET = 2.0


def signed_by(x, scale):
    return x * math.copysign(1.0, scale) if not math.isnan(scale) else x * 2


def test_float_arguments_are_guarded_by_bit_pattern():
    f = dynafuse.compile(signed_by)
    x = torch.randn(4)
    # -0.0 == 0.0 in Python, but they pick different branches here: an entry
    # compiled for 0.0 must not run for -0.0.
    assert_close(f(x, 0.0), x)
    assert_close(f(x, -0.0), -x)
    assert dynafuse.stats()["captures"] == 2
    # NaN != NaN in Python, yet a NaN argument must hit its entry (here a
    # NaN made anew each call, with the same bits).
    assert_close(f(x, float("nan")), x * 2)
    assert_close(f(x, float("nan")), x * 2)
    stats = dynafuse.stats()
    assert stats["captures"] == 3 and stats["cache_hits"] == 1, stats
    assert_close(f(x, -0.0), -x)
    assert dynafuse.stats()["cache_hits"] == 2


class DoubleSigmoid(torch.overrides.TorchFunctionMode):
    """Changes what torch.sigmoid returns: compiled code must not bypass it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.sigmoid else out


class AddOneToSigmoid(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.ops.aten.sigmoid.default else out


def sigmoid_plus_one(x):
    return torch.sigmoid(x) + 1


@pytest.mark.parametrize("mode", [DoubleSigmoid, AddOneToSigmoid])
def test_torch_function_and_dispatch_modes_are_not_bypassed(mode):
    f = dynafuse.compile(sigmoid_plus_one)
    x = torch.randn(5)
    assert_close(f(x), sigmoid_plus_one(x))  # compiled, no mode
    assert_compiled()
    with mode():
        expected = sigmoid_plus_one(x)
        assert_close(f(x), expected)  # the entry must not run under the mode
        assert_close(f(x), expected)
    assert not torch.allclose(expected, sigmoid_plus_one(x))
    reasons = [r for r in dynafuse._C.break_reasons() if "sigmoid_plus_one" in r]
    assert len(reasons) == 1 and "Mode is active" in reasons[0], reasons
    # (The mode's own handler runs with the mode off; the hook may compile it.)
    before = dynafuse.stats()
    assert_close(f(x), sigmoid_plus_one(x))  # without the mode: the entry runs
    after = dynafuse.stats()
    assert after["cache_hits"] == before["cache_hits"] + 1
    assert after["captures"] == before["captures"]


def test_factory_functions_follow_set_default_device():
    def ones_like_rows(x):
        return torch.ones(x.shape[1]) * 2

    f = dynafuse.compile(ones_like_rows)
    x = torch.randn(3, 4)
    assert f(x).device.type == "cpu"
    torch.set_default_device("meta")
    try:
        out = f(x)
    finally:
        torch.set_default_device(None)
    assert out.device.type == "meta" and out.shape == (4,)


# ---- modules are guarded by type: where identity matters, it is guarded ----

class ReturnsItsLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x), self.layer


def test_a_returned_module_is_the_callers_instance():
    first, second = ReturnsItsLayer(), ReturnsItsLayer()
    x = torch.randn(3, 4)
    with torch.no_grad():
        for model in (first, second, first):
            out, layer = dynafuse.compile(model)(x)
            assert layer is model.layer
            assert_close(out, model.layer(x))


class MaybeTied(torch.nn.Module):
    def __init__(self, tied):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a if tied else torch.nn.Linear(4, 4)

    def forward(self, x):
        if self.a is self.b:
            return self.a(x) * 2
        return self.a(x) + self.b(x)


class WalksItsModules(MaybeTied):
    def forward(self, x):
        for module in self.modules():  # a shared submodule is visited once
            if isinstance(module, torch.nn.Linear):
                x = module(x)
        return x


@pytest.mark.parametrize("cls", [MaybeTied, WalksItsModules])
@pytest.mark.parametrize("order", [(False, True), (True, False)], ids=["untied_first", "tied_first"])
def test_shared_submodules_are_guarded_as_shared(cls, order):
    x = torch.randn(3, 4)
    with torch.no_grad():
        for tied in order + order:
            model = cls(tied)
            assert_close(dynafuse.compile(model)(x), model(x))
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["cache_hits"] == 2, stats


class CallsInner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.inner(x) + 1


def test_a_per_instance_forward_override_is_guarded():
    plain, overridden = CallsInner(), CallsInner()
    overridden.inner.forward = lambda t: t * 100  # an instance attribute
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert_close(dynafuse.compile(plain)(x), plain(x))
        assert_close(dynafuse.compile(overridden)(x), overridden(x))
        assert_close(dynafuse.compile(plain)(x), plain(x))



class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.randn(4))
        self.scale = torch.nn.Parameter(torch.rand(4) + 0.5)

    def forward(self, x):
        return self.inner(x) * self.scale + self.shift


class CustomGetattr(Block):
    """A class with its own __getattr__: guards use the full lookup."""
    def __getattr__(self, name):
        if name == "scale":
            return super().__getattr__("scale") * 2
        return super().__getattr__(name)


class ScaleProperty(Block):
    """A property shadows the parameter's name: the property wins."""
    def __init__(self):
        super().__init__()
        self._parameters.pop("scale")
        self.register_parameter("raw_scale", torch.nn.Parameter(torch.rand(4)))

    @property
    def scale(self):
        return self.raw_scale + 1


def swap_submodule(m):
    m.inner = torch.nn.Linear(4, 4)


def replace_parameter(m):
    m.scale = torch.nn.Parameter(torch.rand(4))


def replace_buffer(m):
    m.shift = torch.randn(4)


def buffer_to_none(m):
    m.shift = None  # registered buffers may be None


def instance_attribute_shadows(m):
    m.__dict__["scale"] = torch.full((4,), 3.0)  # found before _parameters


CHANGES = {
    "submodule": swap_submodule,
    "parameter": replace_parameter,
    "buffer": replace_buffer,
    "instance_shadow": instance_attribute_shadows,
}


@pytest.mark.parametrize("cls", [Block, CustomGetattr, ScaleProperty])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_module_attributes_are_read_as_torch_reads_them(cls, change):
    """Guards read module attributes in C (instance dict, _parameters,
    _buffers, _modules) where the class keeps torch's lookup, and through
    getattr otherwise; either way a changed attribute is seen."""
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(3, 4)
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
        assert_close(compiled(x), model(x))
        assert dynafuse.stats()["captures"] == 1
        if cls is ScaleProperty and change == "parameter":
            return  # torch refuses a parameter named like a property
        CHANGES[change](model)  # a property still takes precedence
        assert_close(compiled(x), model(x))
        assert_close(compiled(x), model(x))


def test_a_buffer_set_to_none_is_seen():
    class MaybeShift(Block):
        def forward(self, x):
            y = self.inner(x)
            return y if self.shift is None else y + self.shift

    model = MaybeShift()
    x = torch.randn(3, 4)
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
        buffer_to_none(model)
        assert_close(compiled(x), model(x))
    assert dynafuse.stats()["captures"] == 2
