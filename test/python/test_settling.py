"""Code whose guards can never hold twice settles into eager (issue 41):
an argument made afresh for every call that is guarded by identity (a
closure, an object without an instance dict; plain objects are guarded by
type, test_object_guards.py) fails its identity guard on every call, and without settling the
code recompiles on every call until its recompile limit. The entry keeps
such objects only weakly (Guards.h), notices when one is gone, drops the
entry, and the second time a source receives a fresh object the code runs
eagerly for good, reported by stats() and settled_reasons(). So does code
whose value guards failed in three calls in a row (a counter, an object
taking no weak references): values that recur keep their entries, and new
tensor sizes are the dynamic-shapes policy's to answer."""
import copy
import gc

import pytest
import torch

import dynafuse
from conftest import assert_close, assert_outputs_close


class Settings:
    def __init__(self, scale):
        self.scale = scale


class SlottedSettings:
    __slots__ = ("scale",)  # takes no weak references

    def __init__(self, scale):
        self.scale = scale


class FixedSettings:
    """No instance dict: guarded by identity (held weakly), not by type."""
    __slots__ = ("scale", "__weakref__")

    def __init__(self, scale):
        self.scale = scale


def scaled(x, settings):
    return torch.relu(x) * settings.scale + 1


def run_calls(compiled, calls, make_settings, x):
    for _ in range(calls):
        settings = make_settings()
        assert_close(compiled(x, settings), scaled(x, settings))
        del settings
        gc.collect()


def test_a_fresh_object_on_every_call_settles_the_code_into_eager():
    x = torch.randn(4, 5).t()
    compiled = dynafuse.compile(scaled)
    run_calls(compiled, 3, lambda: FixedSettings(2.0), x)
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 1, stats
    (reason,) = dynafuse.settled_reasons()
    assert "scaled" in reason and "new object on every call" in reason, reason
    captures = stats["captures"]
    assert captures == 2, stats  # the third call settled instead of capturing
    run_calls(compiled, 5, lambda: FixedSettings(2.0), x)
    assert dynafuse.stats()["captures"] == captures
    assert dynafuse.stats()["recompile_limit_hits"] == 0


def test_one_long_lived_object_keeps_its_compiled_entry():
    x = torch.randn(3, 6)
    settings = Settings(3.0)
    compiled = dynafuse.compile(scaled)
    for _ in range(4):
        assert_close(compiled(x, settings), scaled(x, settings))
        gc.collect()
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["cache_hits"] == 3, stats
    assert stats["settled_frames"] == 0


def test_objects_that_alternate_keep_an_entry_each():
    x = torch.randn(2, 3)
    first, second = Settings(2.0), Settings(5.0)
    compiled = dynafuse.compile(scaled)
    for settings in (first, second) * 3:
        assert_close(compiled(x, settings), scaled(x, settings))
        gc.collect()
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["cache_hits"] == 4, stats
    assert stats["settled_frames"] == 0


def test_a_dropped_object_frees_its_entry_but_one_new_object_does_not_settle():
    x = torch.randn(3)
    compiled = dynafuse.compile(scaled)
    run_calls(compiled, 2, lambda: FixedSettings(4.0), x)
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["settled_frames"] == 0, stats


def test_objects_without_weak_references_settle_after_three_missing_calls():
    x = torch.randn(3)
    compiled = dynafuse.compile(scaled)
    run_calls(compiled, 5, lambda: SlottedSettings(2.0), x)
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 1 and stats["recompile_limit_hits"] == 0
    assert stats["captures"] == 3, stats  # misses in calls 2, 3 and 4
    (reason,) = dynafuse.settled_reasons()
    assert "guards failed in 3 calls in a row" in reason, reason


def offset(x, step):
    return x * 2 + step


def test_a_value_that_changes_on_every_call_settles():
    x = torch.randn(4)
    compiled = dynafuse.compile(offset)
    for step in range(6):  # a float counter: each value seen once
        assert_close(compiled(x, step * 0.5), offset(x, step * 0.5))
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 1 and stats["captures"] == 3, stats


def test_an_int_counter_becomes_a_symbol_rather_than_settling():
    x = torch.randn(4)
    compiled = dynafuse.compile(offset)
    for step in range(8):  # 0 and 1 specialized, then one symbolic graph
        assert_close(compiled(x, step), offset(x, step))
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 0 and stats["captures"] == 3, stats
    assert stats["symbolic_captures"] == 1 and stats["cache_hits"] == 5, stats


def test_values_that_recur_keep_their_entries():
    x = torch.randn(4)
    compiled = dynafuse.compile(offset)
    for step in (0, 1, 0, 1, 2, 0, 1, 2):
        assert_close(compiled(x, step), offset(x, step))
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 0 and stats["captures"] == 3, stats
    assert stats["cache_hits"] == 5, stats


def test_new_sizes_are_left_to_the_dynamic_shapes_policy():
    compiled = dynafuse.compile(offset, options={"automatic_dynamic_shapes": False})
    for n in range(2, 7):
        x = torch.randn(n)
        assert_close(compiled(x, 1), offset(x, 1))
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 0 and stats["captures"] == 5, stats


def apply(x, fn):
    return fn(x) + 1


def test_a_closure_made_for_every_call_settles():
    x = torch.randn(5)
    compiled = dynafuse.compile(apply)
    for _ in range(4):
        fn = lambda t: t * 2.0  # noqa: E731
        assert_close(compiled(x, fn), apply(x, fn))
        del fn
        gc.collect()
    (reason,) = dynafuse.settled_reasons()
    assert reason.startswith("apply at ") and "local[1]" in reason, reason
    # apply captured twice, then ran eagerly; the lambda, called from the
    # eager frame, is compiled on its own once (its code is the same).
    assert dynafuse.stats()["captures"] == 3, dynafuse.stats()


def test_fullgraph_never_settles_into_eager():
    x = torch.randn(3)
    compiled = dynafuse.compile(scaled, fullgraph=True)
    run_calls(compiled, 4, lambda: FixedSettings(2.0), x)
    stats = dynafuse.stats()
    assert stats["settled_frames"] == 0 and stats["captures"] == 4, stats


def test_explain_over_several_calls_reports_what_settled():
    x = torch.randn(3)

    def caller(x):
        settings = FixedSettings(2.0)
        gc.collect()
        return scaled_in_a_frame_of_its_own(x, settings)

    explanation = dynafuse.explain(caller, calls=4)(x)
    assert any("new object on every call" in reason
               for reason in explanation.settled), explanation
    assert "settled:" in repr(explanation)


@torch.compiler.disable(recursive=False)
def _opaque(value):
    return value


def scaled_in_a_frame_of_its_own(x, settings):
    # A break first: the caller's frame resumes after it and calls this one
    # as a frame of its own, with a new Settings each time.
    _opaque(None)
    return torch.relu(x) * settings.scale


class Holder:
    """Data whose deep copy runs the stdlib's copy module (code capture
    skips) and, when asked, a __deepcopy__ of the user's that compiles."""

    def __init__(self, tensor, settings):
        self.tensor, self.settings = tensor, settings


class CopiesByTensorOps(Holder):
    def __deepcopy__(self, memo):
        return CopiesByTensorOps(self.tensor * 2 + 1, dict(self.settings))


def copy_then_compute(x, holder):
    y = x.sin()
    copied = copy.deepcopy(holder)  # the copy module's frames run eagerly
    return y + copied.tensor, copied.settings


def test_eager_code_that_compiles_nothing_runs_unhooked_and_still_matches():
    compiled = dynafuse.compile(copy_then_compute)
    holder = Holder(torch.randn(3), {"depth": [1, 2, {"k": (3, 4)}]})
    x = torch.randn(3)
    for _ in range(6):
        actual = compiled(x, holder)
        expected = copy_then_compute(x, holder)
        assert_outputs_close(actual[0], expected[0])
        assert actual[1] == expected[1] and actual[1] is not holder.settings
    assert dynafuse.stats()["unhooked_codes"] > 0
    # the frame after the copy is compiled again once the copy is unhooked
    hits = dynafuse.stats()["cache_hits"]
    compiled(x, holder)
    assert dynafuse.stats()["cache_hits"] > hits


def test_eager_code_calling_compiled_code_stays_hooked():
    compiled = dynafuse.compile(copy_then_compute)
    holder = CopiesByTensorOps(torch.randn(3), {"depth": 2})
    x = torch.randn(3)
    for _ in range(6):
        compiled(x, holder)
    # copy.deepcopy ran the user's __deepcopy__, a compiled frame, each time
    hits = dynafuse.stats()["cache_hits"]
    actual = compiled(x, holder)
    assert dynafuse.stats()["cache_hits"] >= hits + 2
    assert_outputs_close(actual[0], copy_then_compute(x, holder)[0])


def raises_inside_the_copy(x, holder):
    y = x.cos()
    copy.deepcopy(holder)
    return y


class RefusesToCopy(Holder):
    def __reduce_ex__(self, protocol):
        raise ValueError("not copyable")


def test_exceptions_leave_unhooked_and_reported_frames_as_eager_leaves_them():
    compiled = dynafuse.compile(raises_inside_the_copy)
    holder = RefusesToCopy(torch.randn(2), {})
    for _ in range(5):
        with pytest.raises(ValueError, match="not copyable"):
            compiled(torch.randn(2), holder)
    ok = Holder(torch.randn(2), {})
    x = torch.randn(2)
    assert_outputs_close(compiled(x, ok), raises_inside_the_copy(x, ok))
