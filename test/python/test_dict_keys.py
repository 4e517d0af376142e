"""Dicts whose keys are constants other than str (DictKeys.h): int, float,
bool, None and tuple keys made, read, updated, iterated, popped and returned
inside one graph, the frame's own dict argument with int keys, and a dict
mixing equal keys of different types (1, 1.0, True), which capture refuses
(the frame runs eagerly) rather than guess which entry eager would find."""
import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close

INPUTS = [torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(1, 6), torch.randn(0, 6)]


def keyed_by_constants(x):
    d = {0: x + 1, 1: x * 2, (1, "a"): x - 1, None: x, 2.5: x * 3, "\x1fz": x / 2}
    d[3] = d[0] + d[1]
    by_layer = {i: x * i for i in range(3)}
    total = sum(by_layer[i] for i in by_layer)
    popped = d.pop(3)
    return d, total + d[2.5] + d.get(7, x) + popped + d[(1, "a")] + d[None]


@pytest.mark.parametrize("x", INPUTS)
def test_int_float_none_and_tuple_keys_stay_in_the_graph(x):
    actual = dynafuse.compile(keyed_by_constants, fullgraph=True)(x)
    expected = keyed_by_constants(x)
    assert list(actual[0].keys()) == list(expected[0].keys())
    assert_outputs_close(actual, expected)
    assert_compiled()


def rotary_by_theta(x, thetas):
    # transformers' position embeddings per distinct rope theta (a float key)
    tables = {theta: torch.cos(x / theta) for theta in thetas}
    return sum(tables[theta] for theta in thetas), sorted(tables)


def test_float_keys_from_a_comprehension():
    x = torch.randn(3, 5)
    compiled = dynafuse.compile(rotary_by_theta, fullgraph=True)
    assert_outputs_close(compiled(x, (10000.0, 1e6, 10000.0)),
                         rotary_by_theta(x, (10000.0, 1e6, 10000.0)))
    assert_compiled()


def updated_per_layer(x, seen):
    # a cache's per-layer flags, keyed by layer index, on the caller's dict
    for layer in range(3):
        if not seen.get(layer, False):
            x = x + layer
            seen[layer] = True
    return x


def test_the_frames_own_dict_with_int_keys_is_updated_as_eager_updates_it():
    x = torch.randn(4)
    compiled = dynafuse.compile(updated_per_layer, fullgraph=True)
    seen_compiled, seen_eager = {1: True}, {1: True}
    assert_outputs_close(compiled(x, seen_compiled), updated_per_layer(x, seen_eager))
    assert seen_compiled == seen_eager
    assert_compiled()
    assert_outputs_close(compiled(x, {}), updated_per_layer(x, {}))


def mixed_numeric_keys(x):
    d = {True: x}
    d[1] = x * 2  # the same key as True: eager keeps True, the value x * 2
    return d, d[1.0]


def test_keys_equal_across_types_run_eagerly_and_match():
    x = torch.randn(3)
    actual = dynafuse.compile(mixed_numeric_keys)(x)
    expected = mixed_numeric_keys(x)
    assert list(actual[0].keys()) == [True] and repr(list(actual[0])) == "[True]"
    assert_outputs_close(actual, expected)
    assert any("mix equal numbers" in reason for reason in dynafuse._C.break_reasons())


def keyword_unpacking_of_int_keys(x):
    def callee(**kwargs):
        return kwargs
    return callee(**{1: x})


def test_int_keys_as_keywords_raise_the_type_error_eager_raises():
    x = torch.randn(3)
    with pytest.raises(TypeError):
        keyword_unpacking_of_int_keys(x)
    with pytest.raises(TypeError):
        dynafuse.compile(keyword_unpacking_of_int_keys)(x)


def collects_keywords(y, **rest):
    return y * 2, rest


def forwards_keywords(x, **options):
    collected = dict(options, plain=1)
    return collects_keywords(x, **collected)


def test_keyword_names_keep_their_characters_through_dicts():
    # a keyword named with the escape character the key texts use
    x = torch.randn(3)
    odd = {"\x1fodd": 1.5, "scale": 2}
    actual = dynafuse.compile(forwards_keywords, fullgraph=True)(x, **odd)
    expected = forwards_keywords(x, **odd)
    assert actual[1] == expected[1] and list(actual[1]) == ["\x1fodd", "scale", "plain"]
    assert_outputs_close(actual[0], expected[0])
    assert_compiled()


def test_a_pre_hook_returning_int_keyword_names_raises_as_eager_raises():
    layer = torch.nn.Linear(3, 3)
    layer.register_forward_pre_hook(lambda m, args, kwargs: (args, {1: 2}),
                                    with_kwargs=True)
    outer = torch.nn.Sequential(layer)
    x = torch.randn(2, 3)
    with pytest.raises(TypeError):
        outer(x)
    with pytest.raises(TypeError):
        dynafuse.compile(outer)(x)
