"""Partial graphs: at a graph break the graph so far is compiled, the one
unsupported instruction runs natively, and the rest of the frame continues in
a generated resume function that is captured in turn (decision 43).
Every test checks the compiled graphs on both sides of the break ran."""
import logging
import sys
import traceback

import pytest
import torch
from torch import nn

import dynafuse
from conftest import assert_close, assert_outputs_close


def graph_names():
    return [graph["name"] for graph in dynafuse.compiled_graphs()]


def resumed(names):
    return [name for name in names if "resumed_at_line" in name]


def assert_resumed(graphs, breaks=1, eager=0):
    stats = dynafuse.stats()
    assert stats["captures"] == graphs == len(dynafuse.compiled_graphs()), \
        (stats, graph_names(), dynafuse._C.break_reasons())
    assert stats["graph_breaks"] == breaks, (stats, dynafuse._C.break_reasons())
    assert stats["eager_frames"] == eager, (stats, dynafuse._C.break_reasons())
    assert not stats["compile_failures"] and not stats["run_failures"], stats


INPUTS = [
    torch.randn(4, 5),
    torch.randn(5, 4).t(),  # non-contiguous
    torch.randn(1, 5),
    torch.randn(0, 3),
]


def prints_in_the_middle(x):
    y = torch.sigmoid(x) * 2
    print("shape", tuple(y.shape))
    return torch.tanh(y) + x


def test_print_in_the_middle_compiles_both_halves(capsys):
    compiled = dynafuse.compile(prints_in_the_middle)
    for x in INPUTS:
        dynafuse.reset()
        assert_close(compiled(x), prints_in_the_middle(x))
        assert_resumed(graphs=2)
        assert len(resumed(graph_names())) == 1
        out = capsys.readouterr().out
        assert out == f"shape {tuple(x.shape)}\n" * 2, out
        # Later calls hit both entries without capturing again.
        assert_close(compiled(x), prints_in_the_middle(x))
        stats = dynafuse.stats()
        assert stats["captures"] == 2 and stats["cache_hits"] == 2, stats
        assert capsys.readouterr().out == f"shape {tuple(x.shape)}\n" * 2


def item_in_the_middle(x, bias):
    scale = (x * x).sum().item()
    return torch.relu(x + bias) * scale


def test_item_in_the_middle_is_a_python_number_after_the_break():
    compiled = dynafuse.compile(item_in_the_middle)
    for shape in [(3, 4), (1, 4), (2, 1)]:
        dynafuse.reset()
        x, bias = torch.randn(shape), torch.randn(4)  # broadcast
        assert_close(compiled(x, bias), item_in_the_middle(x, bias))
        assert_resumed(graphs=2)
        assert "item" in dynafuse._C.break_reasons()[0]


def branches(x):
    y = x * 2
    if y.sum() > 0:
        z = y + 1
    else:
        z = y - 1
    return z * 3


def test_data_dependent_branch_resumes_at_each_target():
    compiled = dynafuse.compile(branches)
    positive, negative = torch.rand(3, 4) + 0.1, -torch.rand(3, 4) - 0.1
    assert_close(compiled(positive), branches(positive))
    assert_resumed(graphs=2)
    assert_close(compiled(negative), branches(negative))
    assert_resumed(graphs=3)  # one resume function per target
    names = graph_names()
    assert len(resumed(names)) == 2, names
    for x in (positive, negative, positive):
        assert_close(compiled(x), branches(x))
    assert_resumed(graphs=3)
    # 1 (the prefix, second call) + 2 per later call.
    assert dynafuse.stats()["cache_hits"] == 7


def short_circuit(x, flag):
    return (x.sum() > 0 and flag) or x.mean() < 0


def test_branch_that_keeps_its_condition_on_the_stack():
    compiled = dynafuse.compile(short_circuit)
    for x in (torch.rand(3) + 0.1, -torch.rand(3) - 0.1):
        for flag in (True, False):
            assert compiled(x, flag) == short_circuit(x, flag)
    assert dynafuse.stats()["graph_breaks"] >= 1


def noisy_helper(y):
    z = y.exp()
    print("inside helper")
    return z * 2


def calls_a_breaking_helper(x):
    y = x + 1
    z = noisy_helper(y)
    return z - y


def test_break_in_a_callee_breaks_the_caller_and_the_callee_compiles(capsys):
    compiled = dynafuse.compile(calls_a_breaking_helper)
    x = torch.randn(6)
    assert_close(compiled(x), calls_a_breaking_helper(x))
    assert capsys.readouterr().out == "inside helper\n" * 2
    # The caller: before the call and after it; the helper (run by the stub,
    # intercepted by the hook): before its print and after it.
    assert_resumed(graphs=4, breaks=2)
    names = graph_names()
    assert sum("noisy_helper" in name for name in names) == 2, names
    assert_close(compiled(x), calls_a_breaking_helper(x))
    assert capsys.readouterr().out == "inside helper\n" * 2
    assert dynafuse.stats()["captures"] == 4


def mutates_in_a_callee(t):
    t.mul_(2)
    print("mutated")
    return t


def mutation_before_a_break_in_a_callee(x):
    y = x + 1
    z = mutates_in_a_callee(y)
    return y + z


def test_what_a_breaking_call_changed_during_capture_is_undone(capsys):
    """The callee's in-place update is captured, then the call breaks: the
    update must happen once (natively, in the stub), not in the graph too."""
    compiled = dynafuse.compile(mutation_before_a_break_in_a_callee)
    x = torch.randn(5)
    assert_close(compiled(x), mutation_before_a_break_in_a_callee(x))
    assert dynafuse.stats()["graph_breaks"] >= 1
    assert dynafuse.stats()["captures"] >= 2


def updates_input_then_breaks(x):
    x.add_(1)
    print("updated")
    return x * 2


def test_an_input_updated_before_the_break_is_written_back_once():
    compiled = dynafuse.compile(updates_input_then_breaks)
    x = torch.randn(4)
    expected_input = x.clone() + 1
    result = compiled(x)
    assert_close(x, expected_input)
    assert_close(result, expected_input * 2)
    assert_resumed(graphs=2)


def with_no_grad_around_a_break(x, w):
    y = x @ w
    with torch.no_grad():
        z = torch.relu(y) * 2
        print("inside no_grad")
        inside = torch.is_grad_enabled()
        z = z + 1
    return z, inside, torch.is_grad_enabled()


def test_a_with_block_is_re_entered_after_the_break():
    compiled = dynafuse.compile(with_no_grad_around_a_break)
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    with torch.enable_grad():
        actual, inside, after = compiled(x, w)
        expected = with_no_grad_around_a_break(x, w)
        assert torch.is_grad_enabled()
    assert_close(actual, expected[0])
    assert (inside, after) == (False, True) == expected[1:]
    # The resume function models leaving the block (no break at __exit__).
    assert_resumed(graphs=2)


def enable_grad_inside(x):
    with torch.enable_grad():
        y = x * 2
        print("inside enable_grad")
        inside = torch.is_grad_enabled()
        y = y + 1
    return y, inside, torch.is_grad_enabled()


def test_a_with_block_restores_the_mode_it_found():
    compiled = dynafuse.compile(enable_grad_inside)
    x = torch.randn(3)
    for outer in (False, True):  # prev differs: a guard, a second entry
        with torch.set_grad_enabled(outer):
            actual, expected = compiled(x), enable_grad_inside(x)
            assert torch.is_grad_enabled() == outer
        assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:] == (True, outer)
    assert dynafuse.stats()["eager_frames"] == 0, dynafuse._C.break_reasons()
    assert dynafuse.stats()["captures"] == 4


def test_resumption_can_be_turned_off():
    dynafuse.config.resume_after_breaks = False
    try:
        compiled = dynafuse.compile(prints_in_the_middle)
        x = torch.randn(3)
        assert_close(compiled(x), prints_in_the_middle(x))
        stats = dynafuse.stats()
        assert stats["captures"] == 0 and stats["eager_frames"] == 1, stats
    finally:
        dynafuse.config.resume_after_breaks = True


def raises_user_error(t):
    raise ValueError(f"bad value with {t.numel()} elements")


def break_that_raises(x):
    y = x * 2
    with torch.no_grad():
        raises_user_error(y)
    return y


def test_an_error_raised_at_the_break_is_eagers_own_and_leaves_with_blocks():
    compiled = dynafuse.compile(break_that_raises)
    x = torch.randn(3)
    with torch.enable_grad():
        with pytest.raises(ValueError, match="bad value with 3 elements") as info:
            compiled(x)
        assert torch.is_grad_enabled()  # the with block's exit ran
    frames = traceback.extract_tb(info.value.__traceback__)
    line = break_that_raises.__code__.co_firstlineno + 3
    assert any(frame.name == "break_that_raises" and frame.lineno == line
               for frame in frames), frames
    assert dynafuse.stats()["captures"] == 1  # the graph before the break ran


def call_with_null_and_keywords(x):
    y = x.abs()
    total = torch.add(y, y.sum().item(), alpha=2)
    return total.mul(x.max().item())


def test_breaks_inside_call_arguments_and_keyword_calls():
    compiled = dynafuse.compile(call_with_null_and_keywords)
    x = torch.randn(2, 3)
    assert_close(compiled(x), call_with_null_and_keywords(x))
    assert dynafuse.stats()["graph_breaks"] >= 2
    assert dynafuse.stats()["eager_frames"] == 0, dynafuse._C.break_reasons()


def prints_with_keywords(x):
    y = x + 1
    print("a", "b", sep="|")
    return y * 2


def test_a_keyword_call_breaks_and_resumes(capsys):
    compiled = dynafuse.compile(prints_with_keywords)
    x = torch.randn(3)
    assert_close(compiled(x), prints_with_keywords(x))
    assert capsys.readouterr().out == "a|b\n" * 2
    assert_resumed(graphs=2)


logger = logging.getLogger("dynafuse.test_resume")


def logs_in_the_middle(x):
    y = x.sigmoid()
    logger.warning("shape %s", tuple(y.shape))
    return y * x


def test_logging_in_the_middle(caplog):
    compiled = dynafuse.compile(logs_in_the_middle)
    x = torch.randn(2, 2)
    with caplog.at_level(logging.WARNING, logger="dynafuse.test_resume"):
        assert_close(compiled(x), logs_in_the_middle(x))
    assert [record.getMessage() for record in caplog.records] == ["shape (2, 2)"] * 2
    assert dynafuse.stats()["captures"] == 2
    assert dynafuse.stats()["eager_frames"] == 0, "\n".join(dynafuse._C.break_reasons())


def make_closure(k):
    def uses_free_variables(x):
        y = x * k
        print("closure")
        return y + k

    return uses_free_variables


def test_free_variables_survive_the_break():
    fn = make_closure(3.0)
    compiled = dynafuse.compile(fn)
    x = torch.randn(4)
    assert_close(compiled(x), fn(x))
    assert_resumed(graphs=2)


def two_breaks(x):
    a = x.cos()
    print("one")
    b = a * 2
    print("two")
    return b + a


def test_two_breaks_make_three_graphs(capsys):
    compiled = dynafuse.compile(two_breaks)
    x = torch.randn(5)
    assert_close(compiled(x), two_breaks(x))
    assert_resumed(graphs=3, breaks=2)
    explanation = dynafuse.explain(two_breaks)(x)
    assert explanation.graph_count == 3 and explanation.graph_break_count == 2
    first = two_breaks.__code__.co_firstlineno
    for reason, line in zip(explanation.break_reasons, (first + 2, first + 4)):
        assert f"test_resume.py:{line}" in reason and "print" in reason, reason


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, h, scale=None):
        for i, layer in enumerate(self.layers, start=int(h.sum() > 0)):
            h = layer(h) * (i + 1)
        return h


def test_a_loop_over_an_iterator_made_before_a_break_runs_every_iteration():
    """A break at the loop's GET_ITER hands a real iterator to the resume
    function: its loop must run (eagerly), not be taken as exhausted."""
    model = Stack().eval()
    for x in (torch.randn(2, 4) + 1, torch.randn(2, 4) - 1):
        with torch.no_grad():
            assert_close(dynafuse.compile(model)(x), model(x))


def eager_frame_with_a_comprehension(xs):
    for _ in range(1):
        print("a break in a loop: this frame runs eagerly")
    return [t * 2 for t in xs], {str(i): t + 1 for i, t in enumerate(xs)}


def test_a_comprehension_called_by_an_eager_frame_is_not_taken_as_empty():
    xs = (torch.randn(3), torch.randn(2))
    compiled = dynafuse.compile(eager_frame_with_a_comprehension)
    assert_outputs_close(compiled(xs), eager_frame_with_a_comprehension(xs))
    assert dynafuse.stats()["eager_frames"] == 1


def break_in_a_loop(x):
    for _ in range(3):
        x = x * 2
        print("loop")
    return x


def test_a_break_inside_a_loop_runs_the_frame_eagerly_with_its_reason():
    compiled = dynafuse.compile(break_in_a_loop)
    x = torch.randn(3)
    assert_close(compiled(x), break_in_a_loop(x))
    stats = dynafuse.stats()
    assert stats["eager_frames"] == 1 and stats["captures"] == 0, stats
    (reason,) = dynafuse._C.break_reasons()
    assert "inside a loop" in reason and "print" in reason, reason


def live_view_at_a_break(x):
    y = x * 2
    v = y[0]
    print("view")
    v.mul_(10)
    return y


def test_a_live_view_at_a_break_runs_the_frame_eagerly():
    compiled = dynafuse.compile(live_view_at_a_break)
    x = torch.randn(3, 2)
    assert_close(compiled(x), live_view_at_a_break(x))
    assert "view" in dynafuse._C.break_reasons()[0]
    assert dynafuse.stats()["eager_frames"] == 1


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        y = self.linear(x).relu()
        self.last = y  # an attribute store: a break at STORE_ATTR
        self.calls += 1  # guarded by value: each call recompiles the rest
        return y * 2


def test_a_module_attribute_store_breaks_and_resumes():
    model = CountsCalls().eval()
    reference = CountsCalls().eval()
    reference.load_state_dict(model.state_dict())
    compiled = dynafuse.compile(model)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            assert_close(compiled(x), reference(x))
            assert_close(model.last, reference.last)
    assert model.calls == reference.calls == 3
    stats = dynafuse.stats()
    # Graphs: linear+relu before the first store, y * 2 after the second.
    # Between them only Python runs (recaptured per value of self.calls, an
    # int attribute guarded as a constant).
    assert stats["captures"] == 2 and stats["eager_frames"] == 0, stats
    # Two hits per later call for the forward's entries, one for the
    # compiled module's call frame (it breaks where the forward stores and
    # runs the forward under the hook).
    assert stats["cache_hits"] == 6, stats


def test_fullgraph_still_raises_at_the_first_break():
    with pytest.raises(dynafuse.Unsupported, match="print"):
        dynafuse.compile(prints_in_the_middle, fullgraph=True)(torch.randn(2))
    assert dynafuse.stats()["captures"] == 0


def test_guards_of_the_resume_function_recompile_it_alone():
    compiled = dynafuse.compile(prints_in_the_middle)
    compiled(torch.randn(2, 3))
    compiled(torch.randn(2, 3, dtype=torch.float64))
    stats = dynafuse.stats()
    assert stats["captures"] == 4 and stats["graph_breaks"] == 2, stats


def test_resume_code_objects_are_shared_across_calls_and_recompiles():
    compiled = dynafuse.compile(branches)
    for x in (torch.rand(3) + 0.1, torch.rand(4) + 0.1):
        compiled(x)
    names = resumed(graph_names())
    # Two sizes, one resume function: its entries are numbered per code.
    assert sorted(names) == sorted(["branches__resumed_at_line_78__0",
                                    "branches__resumed_at_line_78__1"]) or \
        len({name.rsplit("__", 1)[0] for name in names}) == 1, names


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.12+ only")
def test_inlined_comprehension_locals_are_handed_on():
    def comprehension(x):
        parts = [x * i for i in range(3)]
        print("built")
        return sum(parts)

    compiled = dynafuse.compile(comprehension)
    x = torch.randn(3)
    assert_close(compiled(x), comprehension(x))
    assert dynafuse.stats()["eager_frames"] == 0, dynafuse._C.break_reasons()
