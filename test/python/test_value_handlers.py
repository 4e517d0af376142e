"""The bytecode's generic operations (unpack, iterate, len, subscript, item
store, truth, `in`, callable(), return) on each kind of value the tracer
models, answered by that kind's handler (lib/Frontend/Tracer/
ValueHandlers.h). Each program compiles with fullgraph=True, so the
compiled path must run, and matches eager on inputs of several layouts.
Where Python raises (a dict's missing key, subscripting an iterator, len
of a generator), capture refuses and the call raises eager's error."""
import collections
import typing

import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


LAYOUTS = [
    lambda: torch.randn(4, 6),
    lambda: torch.randn(6, 4).t(),  # non-contiguous
    lambda: torch.randn(1, 6).expand(4, 6),  # stride 0
    lambda: torch.randn(1, 6),
    lambda: torch.randn(0, 6),
]


# ---- tuples, lists and sets ------------------------------------------------

def sequence_operations(x):
    parts = [x, x * 2, x + 1, x - 3]
    a, b, *rest = parts
    total = sum(parts[1:3], a)
    picked = parts[-1] + parts[::2][1] + parts[3:0:-2][0]
    parts[0] = total  # a list made by the frame: the store is traced
    flags = (len(parts), bool(parts), bool([]), callable(parts), 2 in (1, 2))
    return parts, picked, rest, flags, tuple(parts[:1])


def list_aliases(x):
    shared = [x * 2]
    return shared, shared, {"again": shared}


# ---- dicts -------------------------------------------------------------------

def dict_operations(x):
    table = {"scale": x * 2, "shift": x + 1}
    table["extra"] = x.sum(dim=-1, keepdim=True)
    keys = [key for key in table]
    present = ("scale" in table, "nope" in table, len(table), bool(table),
               bool({}), callable(table))
    first, *_ = table
    return table["scale"] + table["shift"], keys, present, first, table


def kwargs_operations(x, **options):
    if "scale" in options and options:
        x = x * options["scale"]
    return x, len(options), sorted(options)


# ---- constants, ranges and sizes ------------------------------------------

def constant_operations(x):
    rows, cols = x.shape
    sizes = x.shape[1:] + x.shape[:1]
    steps = [k for k in range(1, 7, 2)]
    word = "rope_dynamic"
    facts = ("dynamic" in word, word[:4], (1, 2, 3)[-1], (4, 5, 6)[::2],
             len(x.shape), bool(()), callable(len), 3 in range(5))
    return x * rows + cols, sizes, steps, facts


# ---- iterators -------------------------------------------------------------

def iterator_operations(x):
    pairs = list(enumerate([x, x * 2], start=1))
    (i, first), (j, second) = pairs
    zipped = zip((x, x + 1), (2, 3))
    (a, p), (b, q) = zipped
    squares = (x * k for k in range(3))
    head, *tail = squares
    flags = (bool(zip((1,), (2,))), callable(enumerate(())))
    return first * i + second * j + a * p + b * q, head, tail, flags


# ---- callables -------------------------------------------------------------

def callable_operations(x):
    double = lambda t: t * 2  # noqa: E731
    method = x.add
    flags = (bool(double), callable(double), bool(method), callable(method))
    return double(method(1)), flags


# ---- attributes, type() and isinstance() -----------------------------------

Pair = collections.namedtuple("Pair", "left right")


def type_and_attribute_operations(x):
    items = [x, x * 2]
    table = {"a": x, "b": x - 1}
    pair = Pair(x, x + 1)
    copied = items.copy()
    copied.append(x * 3)
    facts = (type(items) is list, type(table) is dict, type(3) is int,
             type(x) is torch.Tensor, isinstance(items, (tuple, list)),
             isinstance(table, dict), isinstance(items, dict),
             isinstance(x, torch.Tensor), isinstance(x, (int, str)),
             isinstance("s", str), (3, 4).index(4), "abc".upper(),
             x.ndim, x.dtype, len(copied), list(table.keys()))
    return pair.left + pair.right, table.get("b"), copied, facts


PROGRAMS = [sequence_operations, list_aliases, dict_operations,
            constant_operations, iterator_operations, callable_operations,
            type_and_attribute_operations]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_each_kind_answers_the_generic_operations_like_python(program, layout):
    x = LAYOUTS[layout]()
    expected = program(x)
    actual = dynafuse.compile(program, fullgraph=True)(x)
    assert_outputs_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert_compiled(1)


def test_a_returned_list_keeps_its_identity():
    x = torch.randn(3)
    shared, again, nested = dynafuse.compile(list_aliases, fullgraph=True)(x)
    assert shared is again and nested["again"] is shared
    assert_compiled(1)


def test_the_frames_own_kwargs_answer_in_len_and_subscript():
    x = torch.randn(2, 3)
    compiled = dynafuse.compile(kwargs_operations, fullgraph=True)
    for options in ({"scale": 2.0}, {"scale": 3.0, "other": 1}):
        expected = kwargs_operations(x, **options)
        assert_outputs_close(compiled(x, **options), expected)
    assert dynafuse.stats()["graph_breaks"] == 0


class Scaled(typing.NamedTuple):
    value: torch.Tensor
    scale: float = 2.0


def returns_named_tuples(x):
    pair = Pair(x * 2, right=x)
    scaled = Scaled(pair.left + pair.right)
    return pair, scaled, type(pair) is Pair, isinstance(scaled, tuple), \
        scaled.scale, scaled._fields


def test_named_tuples_made_in_capture_come_back_as_their_class():
    x = torch.randn(3, 4).t()
    expected = returns_named_tuples(x)
    actual = dynafuse.compile(returns_named_tuples, fullgraph=True)(x)
    assert_compiled(1)
    assert type(actual[0]) is Pair and type(actual[1]) is Scaled
    assert_outputs_close(tuple(actual[0]), tuple(expected[0]))
    assert_outputs_close(tuple(actual[1]), tuple(expected[1]))
    assert actual[2:] == expected[2:]


def named_tuple_missing_field(x):
    return Pair(x * 2), x + 1


# ---- where Python raises, capture refuses and eager's error comes back -----

# Each computes on tensors, so a capture that answered where Python raises
# would return a graph's result (before the handlers: "zero", ("a",), the
# first pair and 2).

def dict_integer_key(x):
    table = {"zero": x * 2}
    return table[0], x + 1


def dict_slice_key(x):
    table = {"a": x, "b": x}
    return table[0:1], x + 1


def iterator_subscript(x):
    return zip((x, x), (1, 2))[0], x + 1


def generator_length(x):
    return len(enumerate((x, x))), x + 1


@pytest.mark.parametrize("program, error", [
    (dict_integer_key, KeyError),
    (named_tuple_missing_field, TypeError),
    (dict_slice_key, TypeError),
    (iterator_subscript, TypeError),
    (generator_length, TypeError),
], ids=lambda p: getattr(p, "__name__", ""))
def test_what_python_refuses_raises_eagers_error(program, error):
    x = torch.randn(3)
    with pytest.raises(error):
        program(x)
    with pytest.raises(error):
        dynafuse.compile(program)(x)
    with pytest.raises(dynafuse.Unsupported):
        dynafuse.compile(program, fullgraph=True)(x)


class Holder(torch.nn.Module):
    def scale(self, t):
        return t * 3


def returns_methods(x, holder):
    return holder.scale, x.add, holder.scale(x)


def test_returned_methods_are_rebound_by_the_run():
    x, holder = torch.randn(3), Holder()
    method, tensor_method, value = dynafuse.compile(returns_methods, fullgraph=True)(x, holder)
    assert method == holder.scale and tensor_method == x.add
    assert_outputs_close(value, x * 3)
    assert_compiled(1)


class Output(collections.OrderedDict):
    """A dict subclass as transformers' ModelOutput is."""


def merges_a_dict_subclass(x):
    output = Output()
    output["hidden"] = x * 2
    output["extra"] = x + 1
    merged = dict(**output, scale=3)
    return merged["hidden"] * merged["scale"] + merged["extra"], sorted(merged)


def test_double_star_of_a_dict_subclass_made_in_capture():
    x = torch.randn(2, 3)
    actual = dynafuse.compile(merges_a_dict_subclass, fullgraph=True)(x)
    assert_outputs_close(actual, merges_a_dict_subclass(x))
    assert_compiled(1)


def compares_with_none(x, pair):
    n = x.shape[0]  # a symbolic size under dynamic=True
    flags = (pair is None, pair is not None, n is None, iter(pair) is None,
             (lambda: 0) is None)
    return x * 2 if not flags[0] else x, flags


def test_is_none_of_values_that_are_never_none():
    compiled = dynafuse.compile(compares_with_none, fullgraph=True, dynamic=True)
    for rows in (3, 5):
        x, pair = torch.randn(rows, 2), (1, 2)
        actual = compiled(x, pair)
        assert_outputs_close(actual, compares_with_none(x, pair))
        assert actual[1] == (False, True, False, False, False)
    assert dynafuse.stats()["graph_breaks"] == 0


def iterates_by_hand(x):
    it = iter([x, x * 2, x * 3, x * 4])
    first = next(it)
    rest = list(it)  # consumes it
    after = next(it, None)
    flags = iter((0, 0, 1, 0))
    any(flags)  # stops at the 1
    return first, rest, after is None, list(flags), next(iter(()), x - 1)


def test_iter_and_next_consume_as_python_does():
    x = torch.randn(3)
    actual = dynafuse.compile(iterates_by_hand, fullgraph=True)(x)
    expected = iterates_by_hand(x)
    assert actual[2] is True and actual[3] == expected[3] == [0]
    assert_outputs_close(actual, expected)
    assert_compiled(1)
