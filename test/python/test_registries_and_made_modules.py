"""Library idioms around classes as data (issue 41): registries keyed by
classes (pytree's SUPPORTED_NODES, huggingface_hub's validators) read with
`in`, `[]` and `.get`, namedtuple fields of their entries, issubclass of
pinned classes, and modules made inside forward (transformers'
ACT2FN["silu"] builds its activation module per call). Each is compared
with eager, and the compiled path is proven to run."""
import collections

import pytest
import torch
import torch.nn as nn

import dynafuse
from conftest import assert_close, assert_compiled

Entry = collections.namedtuple("Entry", ["scale", "shift"])
REGISTRY = {int: Entry(2.0, 1.0), list: Entry(3.0, 0.0)}


def test_a_registry_keyed_by_classes_answers_in_and_subscript():
    def lookup(x, value):
        kind = type(value)
        if kind in REGISTRY:
            entry = REGISTRY[kind]
            return x * entry.scale + entry.shift
        return x - 1

    compiled = dynafuse.compile(lookup)
    x = torch.randn(2, 3)
    for value in [5, [1], 2.5, 7]:
        assert_close(compiled(x, value), lookup(x, value))
    REGISTRY[float] = Entry(10.0, 0.0)  # the guard on the absent key sees it
    try:
        assert_close(compiled(x, 2.5), x * 10.0)
    finally:
        del REGISTRY[float]
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["eager_frames"] == 0, stats


def test_issubclass_of_a_pinned_class_is_decided_at_capture():
    def kind(x, value):
        cls = type(value)
        return x + (1 if issubclass(cls, tuple) else 2) + (10 if issubclass(cls, (int, str)) else 0)

    compiled = dynafuse.compile(kind, fullgraph=True)
    x = torch.randn(4)
    for value in [(1,), Entry(1, 2), 3, "s", 1.5]:
        assert_close(compiled(x, value), kind(x, value))
    assert dynafuse.stats()["graph_breaks"] == 0


class Scaled(nn.Module):
    """An activation module with constant state (what transformers'
    activation classes are)."""

    def __init__(self, factor=2.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return torch.nn.functional.silu(x) * self.factor


ACTIVATIONS = {"scaled": (Scaled, {"factor": 3.0}), "plain": (Scaled, {})}


@pytest.fixture(params=["plain", "dynamo_tagged"])
def module_init(request):
    """nn.Module.__init__ as it is, and as TorchDynamo leaves it once
    torch.compile ran in the process (wrapped to tag each new module)."""
    if request.param == "plain":
        yield
        return
    from torch._dynamo import mutation_guard
    original = nn.Module.__init__
    # (already wrapped when torch.compile ran earlier in this process)
    mutation_guard.install_generation_tagging_init()
    try:
        assert nn.Module.__init__.__name__ == "patched_init"
        yield
    finally:
        nn.Module.__init__ = original


def test_a_module_made_in_forward_without_state_is_one_graph(module_init):
    def block(x, name):
        cls, kwargs = ACTIVATIONS[name]
        return cls(**kwargs)(x) + 1

    compiled = dynafuse.compile(block, fullgraph=True)
    for shape in [(2, 3), (5,), (0, 4)]:
        x = torch.randn(shape)
        assert_close(compiled(x, "scaled"), block(x, "scaled"))
    x = torch.randn(3, 2)
    assert_close(compiled(x, "plain"), block(x, "plain"))
    assert dynafuse.stats()["graph_breaks"] == 0


MADE = []


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        MADE.append(1)  # a side effect each construction must repeat

    def forward(self, x):
        return x * 2


def test_modules_made_in_forward_with_effects_or_parameters_run_eagerly():
    """A module whose __init__ changes something outside it, or that holds
    parameters (drawn anew by each eager call), is not made once at
    capture: the construction runs eagerly every call."""

    def with_effect(x):
        return Counted()(x)

    def with_parameters(x):
        torch.manual_seed(0)
        return nn.Linear(3, 2)(x)

    x = torch.randn(4, 3)
    compiled = dynafuse.compile(with_effect)
    MADE.clear()
    for _ in range(3):
        assert_close(compiled(x), x * 2)
    assert len(MADE) == 3
    compiled = dynafuse.compile(with_parameters)
    for _ in range(2):
        assert_close(compiled(x), with_parameters(x))


class LayerSpec:
    def __init__(self, names):
        self.per_layer = set(names)


class SpecReader(nn.Module):
    """Reads a config's set of names with `in`, as transformers'
    heterogeneous configs do in __getattribute__."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def forward(self, x):
        if "scale" in self.spec.per_layer:
            return x * 3
        return x - 1


def test_membership_in_a_set_of_a_source_object_is_guarded():
    spec = LayerSpec({"scale", "bias"})
    model = SpecReader(spec)
    compiled = dynafuse.compile(model)
    x = torch.randn(4, 5)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))
    assert dynafuse.stats()["captures"] == 1
    assert dynafuse.stats()["graph_breaks"] == 0
    spec.per_layer.discard("scale")  # the guarded answer changes
    torch.testing.assert_close(compiled(x), x - 1)
    assert dynafuse.stats()["captures"] == 2
    assert dynafuse.stats()["graph_breaks"] == 0
