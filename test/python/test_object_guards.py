"""Plain objects reaching a compiled frame through its arguments are guarded
by type, not identity (lib/Frontend/Guards/ObjectSources.h): a cache or a
config made afresh for every call meets the entry compiled for the one
before, as in torch.compile, while everything read from it stays guarded
(a changed attribute recompiles). What identity gave for free is guarded
explicitly: stores land on this call's object, a returned object is this
call's, one object met through two sources must stay one, and an object
stored into must stay distinct from the others of its type."""
import gc

import torch

import dynafuse
from conftest import assert_close


class Settings:
    def __init__(self, scale, shift=0.0):
        self.scale, self.shift = scale, shift


def scaled(x, settings):
    return torch.relu(x) * settings.scale + settings.shift


def test_a_fresh_object_each_call_reuses_the_entry():
    compiled = dynafuse.compile(scaled)
    for x in (torch.randn(4, 5), torch.randn(5, 4).t()):
        for _ in range(4):
            settings = Settings(2.0, 1.0)
            assert_close(compiled(x, settings), scaled(x, settings))
            del settings
            gc.collect()
    stats = dynafuse.stats()
    # the transposed input's strides differ: a second entry, not a third
    assert stats["captures"] == 2 and stats["cache_hits"] == 6, stats
    assert stats["settled_frames"] == 0, stats


def test_an_attribute_that_differs_recompiles():
    compiled = dynafuse.compile(scaled)
    x = torch.randn(6)
    for scale in (2.0, 3.0, 2.0, 3.0):
        settings = Settings(scale)
        assert_close(compiled(x, settings), scaled(x, settings))
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["cache_hits"] == 2, stats


class Other:
    def __init__(self, scale):
        self.scale, self.shift = scale, 0.0


def test_another_type_recompiles():
    compiled = dynafuse.compile(scaled)
    x = torch.randn(3)
    for settings in (Settings(2.0), Other(2.0), Settings(2.0), Other(2.0)):
        assert_close(compiled(x, settings), scaled(x, settings))
    assert dynafuse.stats()["captures"] == 2


class Cache:
    def __init__(self):
        self.keys = torch.zeros(1, 0, 4)
        self.steps = 0


def append(cache, x):
    cache.keys = torch.cat([cache.keys, x], dim=1)
    return cache.keys.sum(dim=1), cache


def test_stores_land_on_this_calls_object_and_it_is_returned():
    compiled = dynafuse.compile(append)
    for _ in range(3):
        mine, theirs = Cache(), Cache()
        for step in range(4):
            x = torch.randn(1, 1, 4)
            total, returned = compiled(mine, x)
            expected, _ = append(theirs, x)
            assert returned is mine
            assert_close(total, expected)
            assert_close(mine.keys, theirs.keys)
            assert mine.keys.shape[1] == step + 1
    stats = dynafuse.stats()
    # sizes 0, 1, then symbolic; new caches reuse all three entries
    assert stats["captures"] == 3, stats
    assert stats["cache_hits"] == 9, stats


def copy_keys(source, target):
    target.keys = source.keys * 2
    return source.keys + 1


def test_a_store_target_stays_distinct_from_objects_of_its_type():
    compiled = dynafuse.compile(copy_keys)
    a, b = Cache(), Cache()
    a.keys = b.keys = torch.randn(1, 3, 4)
    assert_close(compiled(a, b), a.keys + 1)
    assert dynafuse.stats()["captures"] == 1
    # One object as both arguments: eager reads source.keys before the
    # store, so the result is the old keys + 1; the entry's guards must not
    # admit the call for two objects.
    one = Cache()
    one.keys = torch.randn(1, 3, 4)
    twin = Cache()
    twin.keys = one.keys.clone()
    actual = compiled(one, one)
    expected = copy_keys(twin, twin)
    assert_close(actual, expected)
    assert_close(one.keys, twin.keys)
    assert dynafuse.stats()["captures"] == 2


class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second


def bump_both(pair, x):
    pair.first.steps = pair.first.steps + 1
    return x * pair.second.steps


def test_one_object_through_two_sources_stays_one():
    compiled = dynafuse.compile(bump_both)
    x = torch.randn(5)
    shared = Cache()
    assert_close(compiled(Pair(shared, shared), x), x * 1)
    assert shared.steps == 1
    # Two objects now: the entry compiled for one shared object must not run.
    first, second = Cache(), Cache()
    second.steps = 5
    assert_close(compiled(Pair(first, second), x), x * 5)
    assert first.steps == 1 and second.steps == 5
    shared = Cache()
    shared.steps = 1
    assert_close(compiled(Pair(shared, shared), x), x * 2)
    assert shared.steps == 2


def test_identity_comparisons_are_guarded():
    def same(a, b, x):
        return x + 1 if a is b else x - 1

    compiled = dynafuse.compile(same)
    x = torch.randn(3)
    one, two = Settings(1.0), Settings(1.0)
    assert_close(compiled(one, one, x), x + 1)
    assert_close(compiled(one, two, x), x - 1)
    assert_close(compiled(two, two, x), x + 1)
    assert dynafuse.stats()["captures"] == 2


class Layer:
    def __init__(self):
        self.keys = None


class LayeredCache:
    def __init__(self, layers):
        self.layers = [Layer() for _ in range(layers)]


def update_layers(cache, x):
    out = x
    for layer in cache.layers:
        layer.keys = out if layer.keys is None else torch.cat([layer.keys, out], 1)
        out = torch.tanh(layer.keys.mean(dim=1, keepdim=True)) + x
    return out


def test_a_nested_cache_made_for_every_sequence_compiles_a_handful_of_times():
    compiled = dynafuse.compile(update_layers)
    for sequence in range(3):
        mine, theirs = LayeredCache(3), LayeredCache(3)
        for step in range(5):
            x = torch.randn(2, 1, 8)
            assert_close(compiled(mine, x), update_layers(theirs, x))
            for a, b in zip(mine.layers, theirs.layers):
                assert_close(a.keys, b.keys)
    stats = dynafuse.stats()
    # keys None, size 1, then symbolic: three entries for every sequence
    assert stats["captures"] == 3, stats
    assert stats["settled_frames"] == 0, stats


def test_a_set_of_objects_counts_one_object_passed_twice_once():
    def distinct(a, b, x):
        seen = set()
        seen.add(a)
        seen.add(b)
        return x * len(seen)

    compiled = dynafuse.compile(distinct)
    x = torch.randn(4)
    one, two = Settings(1.0), Settings(1.0)
    assert_close(compiled(one, two, x), x * 2)
    assert_close(compiled(one, one, x), x * 1)
    assert_close(compiled(two, one, x), x * 2)
    assert dynafuse.stats()["captures"] == 2
