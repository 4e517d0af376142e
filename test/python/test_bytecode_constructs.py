"""Python constructs whose bytecode differs between CPython 3.11, 3.12 and
3.13 (comprehensions, f-strings, slices, super(), closures, keyword calls,
with blocks, walrus, match, generator expressions, ...): each compiles with
fullgraph=True, so the compiled path must run, and matches eager on random
inputs of several layouts. Run on every interpreter by
scripts/test-matrix.sh; the frame hook's own contract (traced frames left
alone, frames disposed of without leaks) is checked at the end."""
import dis
import sys
import types

import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def contiguous():
    return torch.randn(5, 8)


def single_row():
    return torch.randn(1, 8)


def transposed():
    return torch.randn(8, 5).t()  # non-contiguous


def broadcast_rows():
    return torch.randn(1, 8).expand(5, 8)  # stride 0


def empty_rows():
    return torch.randn(0, 8)


LAYOUTS = [contiguous, single_row, transposed, broadcast_rows, empty_rows]


def check(fn, *args, captures=1, **kwargs):
    expected = fn(*args, **kwargs)
    compiled = dynafuse.compile(fn, fullgraph=True)
    actual = compiled(*args, **kwargs)
    assert_outputs_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert_compiled(captures)
    return actual


# ---- comprehensions (inlined in 3.12+, PEP 709) ----------------------------

def list_comprehension(x):
    return [x * k for k in range(3)]


def dict_comprehension(x):
    return {f"scale{k}": x + k for k in (1, 2)}


def nested_comprehension(x):
    return [[x * i + j for j in range(2)] for i in range(2)]


def comprehension_shadowing_argument(x, k):
    # The comprehension's k hides the argument k; 3.12 saves and restores it
    # around the loop (LOAD_FAST_AND_CLEAR ... STORE_FAST).
    parts = [x * k for k in (2, 3)]
    return parts[0] + parts[1] + k


def comprehension_with_condition(x):
    return [x - k for k in range(5) if k % 2 == 0]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fn", [list_comprehension, dict_comprehension,
                                nested_comprehension, comprehension_with_condition],
                         ids=lambda f: f.__name__)
def test_comprehensions(fn, layout):
    check(fn, layout())


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_comprehension_variable_shadows_an_argument(layout):
    check(comprehension_shadowing_argument, layout(), torch.randn(8))


def generator_expressions(x):
    total = sum(x * k for k in range(1, 4))
    return total, tuple(x + k for k in range(2))


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_generator_expressions(layout):
    check(generator_expressions, layout())


# ---- f-strings --------------------------------------------------------------

def fstrings(x, name):
    rows = x.shape[0]
    assert rows >= 0, f"{name!r:>8} has {rows:d} rows"
    keys = {f"{name}_{rows}": x * 2, f"{name!s}{rows:03d}": x + 1}
    return keys, f"{name}:{rows}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_fstrings(layout):
    check(fstrings, layout(), "t")


# ---- slices (BINARY_SLICE / STORE_SLICE in 3.12+) --------------------------

def slices(x):
    return x[1:3], x[:, ::2], x[..., 1:-1], x[:, 2:], x[-2:]


def slice_of_a_list(x):
    parts = [x, x * 2, x * 3, x * 4]
    head = parts[:2]
    tail = parts[2:]
    return head[0] + head[1] + tail[-1]


def store_slice(x):
    y = x * 1.5
    y[:, 1:3] = 0.0
    return y


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fn", [slices, slice_of_a_list, store_slice],
                         ids=lambda f: f.__name__)
def test_slices(fn, layout):
    check(fn, layout())


# ---- super() ---------------------------------------------------------------

class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.linear(x))


class Derived(Base):
    def forward(self, x):
        return super().forward(x) * 2 + 1


class DerivedExplicit(Base):
    def forward(self, x):
        return super(DerivedExplicit, self).forward(x) - 1


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("cls", [Derived, DerivedExplicit], ids=lambda c: c.__name__)
def test_super_calls(cls, layout):
    model = cls().eval()
    x = layout()
    with torch.no_grad():
        expected = model(x)
        compiled = dynafuse.compile(model, fullgraph=True)
        assert_outputs_close(compiled(x), expected, rtol=1e-5, atol=1e-5)
    assert_compiled()


# ---- closures ---------------------------------------------------------------

def closures(x, w):
    def scale(t):
        return t * w  # w is a cell of closures

    shift = lambda t: t + x.sum()  # noqa: E731
    return shift(scale(x))


def closure_assigned_in_inner(x):
    total = x

    def accumulate(t):
        nonlocal total
        total = total + t

    accumulate(x * 2)
    accumulate(x * 3)
    return total


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_closures(layout):
    check(closures, layout(), torch.randn(8))


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_closure_assigned_in_inner_function(layout):
    check(closure_assigned_in_inner, layout())


# ---- calls: keywords, *args, **kwargs, methods ------------------------------

def helper(x, alpha=1.0, *, beta=0.0):
    return x * alpha + beta


def keyword_calls(x):
    a = helper(x, alpha=2.0, beta=1.0)
    b = helper(x, beta=-1.0)
    args = (x, 0.5)
    options = {"beta": 3.0}
    c = helper(*args, **options)
    d = torch.sum(x, dim=1, keepdim=True)
    e = x.clamp(min=-0.5, max=0.5)
    return a, b, c, d, e


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_keyword_calls(layout):
    check(keyword_calls, layout())


# ---- with blocks --------------------------------------------------------------

def with_blocks(x):
    with torch.no_grad():
        y = x * 2
        with torch.enable_grad():
            z = y + 1
    return y, z


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_with_blocks(layout):
    check(with_blocks, layout())


# ---- walrus, match, branches, unary operators --------------------------------

def walrus(x):
    if (rows := x.shape[0]) > 2:
        return x * rows
    return x - rows


def match_constant(x, mode):
    match mode:
        case "relu":
            return torch.relu(x)
        case "tanh" | "sigmoid":
            return torch.tanh(x) if mode == "tanh" else torch.sigmoid(x)
        case 3:
            return x * 3
        case _:
            return -x


def branches_and_unary(x, flag, scale):
    y = +x if flag and not scale is None else -x  # noqa: E714
    y = ~(y > 0) if scale is None else y * +scale
    if 0 < x.shape[1] <= 8 and (flag or scale):
        y = y + 1
    return y


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_walrus(layout):
    check(walrus, layout())


@pytest.mark.parametrize("mode", ["relu", "tanh", "sigmoid", 3, "other"])
def test_match_on_constants(mode):
    check(match_constant, torch.randn(4, 5), mode)


@pytest.mark.parametrize("flag,scale", [(True, 2.0), (False, 0.5), (True, None)])
def test_branches_and_unary_operators(flag, scale):
    check(branches_and_unary, torch.randn(4, 5), flag, scale)


# ---- loops, unpacking, containers ----------------------------------------------

def loops_and_unpacking(x, ys):
    total = x
    for index, (a, b) in enumerate(zip(ys, ys[1:])):
        total = total + a * b * index
    first, second = ys[0], ys[1]
    pair = {"first": first, "sum": first + second}
    del first
    return total, pair


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_loops_unpacking_and_containers(layout):
    x = layout()
    ys = [torch.randn(x.shape[1]) for _ in range(3)]
    check(loops_and_unpacking, x, ys)


def isinstance_of_containers(x, pair):
    dims = (x.shape[0], x.shape[1])
    flags = (isinstance(dims, (tuple, list)), isinstance(pair, list),
             isinstance(pair, (dict, str)), isinstance({"x": x}, dict),
             isinstance(dims, tuple))
    return x * (1 + sum(flags)), flags


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_isinstance_of_containers(layout):
    check(isinstance_of_containers, layout(), [1, 2])


# ---- the decoder against the interpreter's own dis ------------------------------

SUPERINSTRUCTIONS = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
                     "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
                     "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST")}


def code_objects(fn):
    """fn's code and every code object nested in its constants."""
    pending = [fn.__code__]
    while pending:
        code = pending.pop()
        yield code
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def decoded_by_dis(code):
    """What the capture decoder must produce, from dis: EXTENDED_ARG folded,
    caches skipped, jumps as absolute offsets, COMPARE_OP's argument as the
    comparison, 3.13's superinstructions as their two halves."""
    out = []
    for instruction in dis.get_instructions(code):
        name, arg = instruction.opname, instruction.arg or 0
        if name == "EXTENDED_ARG":
            continue
        if name in SUPERINSTRUCTIONS:
            first, second = SUPERINSTRUCTIONS[name]
            out += [(instruction.offset, first, arg >> 4, -1),
                    (instruction.offset, second, arg & 15, -1)]
            continue
        if name == "COMPARE_OP":
            arg = dis.cmp_op.index(instruction.argval)
        target = instruction.argval if instruction.opcode in dis.hasjrel else -1
        out.append((instruction.offset, name, arg, target))
    return out


def make_long_function(statements=150):
    """A loop whose body is long enough for its jumps to need EXTENDED_ARG
    (targets more than 255 code units away) on every interpreter."""
    body = "\n".join(f"            y = y * 0.5 + {k}" for k in range(statements))
    source = (f"def long_function(x):\n    y = x\n    for k in range(3):\n"
              f"        if k > 1:\n{body}\n    return y\n")
    namespace = {}
    exec(compile(source, "<long_function>", "exec"), namespace)
    return namespace["long_function"]


long_function = make_long_function()
assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(long_function))


DECODED = [list_comprehension, dict_comprehension, nested_comprehension,
           comprehension_shadowing_argument, comprehension_with_condition,
           generator_expressions, fstrings, slices, slice_of_a_list, store_slice,
           Derived.forward, DerivedExplicit.forward, closures, closure_assigned_in_inner,
           keyword_calls, with_blocks, walrus, match_constant, branches_and_unary,
           loops_and_unpacking, isinstance_of_containers, long_function]


@pytest.mark.parametrize("fn", DECODED, ids=lambda f: f.__qualname__)
def test_decoder_agrees_with_dis(fn):
    for code in code_objects(fn):
        assert dynafuse._C.decode_instructions(code) == decoded_by_dis(code), code


def test_long_function_with_extended_jumps_compiles():
    check(long_function, torch.randn(4, 4))


# ---- the frame hook's contract -------------------------------------------------

def plain(x):
    return torch.sigmoid(x) * x + 1


def test_frames_are_disposed_of_without_leaks():
    # From 3.12 the hook itself clears and pops a frame it answers: the
    # arguments' reference counts must come back to where they were.
    x = torch.randn(4, 4)
    f = dynafuse.compile(plain, fullgraph=True)
    f(x)
    before = sys.getrefcount(x)
    for _ in range(200):
        f(x)
    assert sys.getrefcount(x) == before
    assert dynafuse.stats()["cache_hits"] >= 200


def test_deep_recursion_through_compiled_calls_stays_balanced():
    # Compiled calls made inside a recursive Python function: every handled
    # frame is popped off the thread's frame stack (a leak would overflow).
    f = dynafuse.compile(plain, fullgraph=True)
    x = torch.randn(3)

    def recurse(depth):
        return f(x) if depth == 0 else recurse(depth - 1)

    for _ in range(50):
        recurse(200)
    assert_compiled()


def test_traced_frames_are_left_alone():
    # A tracer (debugger, coverage) sees the code it expects: while one is
    # active the hook does not capture, and the call runs eagerly.
    calls = []

    def tracer(frame, event, arg):
        if frame.f_code is plain.__code__:
            calls.append(event)
        return tracer

    f = dynafuse.compile(plain)
    x = torch.randn(4, 4)
    sys.settrace(tracer)
    try:
        out = f(x)
    finally:
        sys.settrace(None)
    assert_outputs_close(out, plain(x))
    assert "call" in calls and "line" in calls, calls
    assert dynafuse.stats()["captures"] == 0
    # Without the tracer the same function compiles.
    assert_outputs_close(f(x), plain(x))
    assert_compiled()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitored_frames_are_left_alone():
    monitoring = sys.monitoring
    tool = monitoring.PROFILER_ID
    events = []
    monitoring.use_tool_id(tool, "dynafuse-test")
    try:
        monitoring.register_callback(
            tool, monitoring.events.PY_START,
            lambda code, offset: events.append(code.co_name))
        monitoring.set_events(tool, monitoring.events.PY_START)
        f = dynafuse.compile(plain)
        x = torch.randn(4, 4)
        assert_outputs_close(f(x), plain(x))
        assert dynafuse.stats()["captures"] == 0
        assert "plain" in events, events
    finally:
        monitoring.set_events(tool, 0)
        monitoring.free_tool_id(tool)
    assert_outputs_close(f(x), plain(x))
    assert_compiled()


def shapes_are_sizes(x):
    shape = x.shape
    flags = (isinstance(shape, torch.Size), isinstance(x.size(), tuple),
             isinstance(shape[1:], torch.Size))
    return x * (1 + sum(flags)), shape, x.size()[1:], shape + (1,)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_shapes_are_torch_sizes(layout):
    actual = check(shapes_are_sizes, layout())
    expected = shapes_are_sizes(layout())
    assert [type(item) for item in actual[1:]] == [type(item) for item in expected[1:]]


def slices_and_devices_called_by_name(x):
    # FX-generated code (torch.compile's graphs) spells indices and devices
    # as calls: x[(slice(None, None, None), slice(0, 2, None))].
    head = x[(slice(None, None, None), slice(0, 2, None))]
    tail = x[slice(1, None), slice(None, None, 2)]
    first = x[slice(3)]
    ones = torch.ones(2, device=torch.device("cpu"))
    on = torch.ones(1, device=torch.device(type="cpu"))
    return head * ones + on, tail.sum(), first


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_slice_and_torch_device_calls(layout):
    check(slices_and_devices_called_by_name, layout())


def test_a_torch_device_that_raises_is_a_graph_break():
    def bad_device(x):
        return x.to(torch.device("nowhere")) + 1

    with pytest.raises(dynafuse.Unsupported, match=r"torch.device\(\) raises"):
        dynafuse.compile(bad_device, fullgraph=True)(torch.randn(3))
