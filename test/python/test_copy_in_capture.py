"""copy.deepcopy inside a compiled frame (issue 41: transformers' legacy
seq2seq configs deep-copy themselves in get_text_config): traced through
dynafuse's Python form of it (polyfills.deepcopy), with what it needs
modelled as Python does it: object.__new__ of a plain class, a class's own
__getattribute__ and validating __setattr__, delattr, dict.update, `is`
between containers read from sources, isinstance of dicts, dict.get on a
registry keyed by classes. Each test compares with eager and proves the
compiled path ran."""
import copy

import pytest
import torch

import dynafuse
from conftest import assert_close, assert_compiled


class Settings:
    """A plain configuration object: atoms, nested containers, and one list
    reachable twice (a deep copy keeps it one list)."""

    def __init__(self):
        self.layers = 2
        self.scale = 0.5
        self.name = "enc"
        self.labels = {0: "a", 1: "b"}
        self.sizes = (4, 8)
        self.shared = [1, 2]
        self.alias = self.shared


def read_copy(x, settings):
    clone = copy.deepcopy(settings)
    clone.shared.append(3)
    clone.layers = clone.layers + 1
    return x * clone.layers + clone.scale + len(clone.alias), clone


def test_a_deep_copy_is_a_new_object_with_copied_state():
    settings = Settings()
    compiled = dynafuse.compile(read_copy)
    for shape in [(3,), (2, 5), (0, 4)]:
        x = torch.randn(shape)
        out, clone = compiled(x, settings)
        expected, reference = read_copy(x, settings)
        assert_close(out, expected)
        assert type(clone) is Settings and clone is not settings
        assert clone.__dict__ == reference.__dict__
        assert clone.alias is clone.shared and clone.shared is not settings.shared
        assert clone.labels is not settings.labels
        assert settings.shared == [1, 2] and settings.layers == 2  # the original is untouched
    stats = dynafuse.stats()  # one capture per rank or size class, none eager
    assert stats["graph_breaks"] == 0 and stats["eager_frames"] == 0, stats
    assert len(dynafuse.compiled_graphs()) == stats["captures"] >= 1, stats


def test_a_changed_original_is_seen_by_the_next_copy():
    settings = Settings()
    compiled = dynafuse.compile(read_copy)
    x = torch.randn(4)
    compiled(x, settings)
    settings.layers = 5
    out, clone = compiled(x, settings)
    assert_close(out, read_copy(x, settings)[0])
    assert clone.layers == 6


class Mapped:
    """transformers' PreTrainedConfig in small: reads go through a
    __getattribute__ that maps names (attribute_map), stores through a
    validating __setattr__."""
    attribute_map = {"hidden": "width"}

    def __init__(self, width, decoder_width):
        self.width = width
        self.decoder_width = decoder_width
        self.is_encoder_decoder = True

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        if not isinstance(value, (int, bool)):
            raise TypeError(f"{key} must be an int")
        super().__setattr__(key, value)

    def decoder_view(self):
        view = copy.deepcopy(self)
        for key in list(view.__dict__):
            if key.startswith("decoder_"):
                value = getattr(view, key)
                delattr(view, key)
                setattr(view, key[len("decoder_"):], value)
        return view


def test_a_copied_config_with_its_own_attribute_lookup_is_one_graph():
    def decoder_width(x, config):
        view = config.decoder_view()
        missing = hasattr(view, "decoder_width")
        return x * view.hidden + int(missing)

    config = Mapped(3, 7)
    compiled = dynafuse.compile(decoder_width, fullgraph=True)
    x = torch.randn(2, 3)
    assert_close(compiled(x, config), decoder_width(x, config))
    assert_close(compiled(x, config), x * 7)
    assert config.width == 3 and config.decoder_width == 7
    assert_compiled()


@pytest.mark.parametrize("value", [torch.ones(2), [torch.ones(2)]], ids=["tensor", "list_of_tensors"])
def test_copies_of_what_the_form_refuses_run_eagerly(value):
    """Tensors (copy's __deepcopy__ of a tensor), a memo from the caller and
    classes with a copy protocol of their own are refused: the call runs
    eagerly and the result is eager's."""

    class Own:
        def __deepcopy__(self, memo):
            return "copied by its own hook"

    def copies(x, value, own):
        clone = copy.deepcopy(value)
        return x + 1, clone, copy.deepcopy(own), copy.deepcopy([1], {})

    compiled = dynafuse.compile(copies)
    x = torch.randn(3)
    out, clone, own, listed = compiled(x, value, Own())
    assert_close(out, x + 1)
    assert own == "copied by its own hook" and listed == [1]
    first = clone if isinstance(clone, torch.Tensor) else clone[0]
    assert_close(first, torch.ones(2))
    assert dynafuse.stats()["graph_breaks"] >= 1


def test_is_between_dicts_read_from_sources_is_guarded():
    def same(x, a, b):
        return x + (1 if a is b else 2)

    compiled = dynafuse.compile(same)
    x = torch.randn(3)
    shared, other = {"k": 1}, {"k": 1}
    assert_close(compiled(x, shared, shared), x + 1)
    assert_close(compiled(x, shared, other), x + 2)
    assert_close(compiled(x, other, other), x + 1)
    assert dynafuse.stats()["graph_breaks"] == 0
    assert dynafuse.stats()["captures"] == 2


REGISTRY = {int: "int", list: "list"}


def test_a_registry_keyed_by_classes_is_read_with_guards():
    """dict.get on a module's dict keyed by classes (huggingface_hub's
    validators by typing origin): a present key reads its entry, an absent
    one the default, and a key added later is seen."""

    def lookup(x, value):
        return x + len(REGISTRY.get(type(value), ""))

    compiled = dynafuse.compile(lookup)
    x = torch.randn(3)
    assert_close(compiled(x, 5), x + 3)
    assert_close(compiled(x, 2.0), x)
    REGISTRY[float] = "floating"
    try:
        assert_close(compiled(x, 2.0), x + 8)
    finally:
        del REGISTRY[float]
    assert dynafuse.stats()["graph_breaks"] == 0


def test_dicts_made_in_capture_answer_isinstance_and_update():
    def merged(x):
        made = {"a": 1}
        made.update({"b": 2}, c=3)
        return x * len(made) + (10 if isinstance(made, Settings) else 0) + made["c"]

    compiled = dynafuse.compile(merged, fullgraph=True)
    x = torch.randn(4)
    assert_close(compiled(x), merged(x))
    assert_compiled()


def test_numpy_math_on_constants_is_folded_at_capture():
    """pegasus_x's sinusoidal positions scale by -np.log(scale) / (d - 1):
    a numpy ufunc of Python numbers is computed at capture."""
    np = pytest.importorskip("numpy")

    def positions(x, scale):
        return x * -(np.log(float(scale)) / (x.shape[-1] - 1)) + np.sqrt(4)

    compiled = dynafuse.compile(positions, fullgraph=True)
    x = torch.randn(3, 8)
    assert_close(compiled(x, 10000), positions(x, 10000))
    assert compiled(x, 10000).dtype == torch.float32
    assert_compiled()


def test_a_shallow_copy_shares_what_the_original_holds():
    def shallow(x, settings):
        clone = copy.copy(settings)
        clone.layers = 7
        listed, mapped = copy.copy([1, 2]), copy.copy({"a": 1})
        listed.append(3)
        return x * clone.layers + len(listed) + len(mapped), clone

    settings = Settings()
    compiled = dynafuse.compile(shallow, fullgraph=True)
    x = torch.randn(3)
    out, clone = compiled(x, settings)
    expected, reference = shallow(x, settings)
    assert_close(out, expected)
    assert type(clone) is Settings and clone is not settings and settings.layers == 2
    assert clone.shared is settings.shared and clone.labels is settings.labels
    assert clone.__dict__ == reference.__dict__
    assert_compiled()
