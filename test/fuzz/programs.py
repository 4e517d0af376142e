"""Random straight-line torch programs: the data model and the generator.

A `Program` is a list of input specs (inputs.py), a list of `Stmt`s (one
line of Python each, with the names it defines, reads and updates in place)
and the names it returns; `source()` renders it as a module defining
`def f(x0, x1, ...)`. `generate(seed, index, mode)` is a pure function:
the parent and every worker regenerate the same program from (seed, index).

The generator picks ops from catalog.py and checks each statement by running
it eagerly on the first call's inputs (and on the third call's, resized),
which tracks every variable's shape, dtype and aliasing exactly; a statement
that raises is dropped and redrawn, except that a few programs keep one on
purpose, so that the oracle also compares eager's and the compiler's
exceptions.
"""
import dataclasses
import linecache
import re
import warnings

import torch
import torch.nn.functional as F

import catalog
import compare
import inputs as fuzz_inputs

#: Chance that a program keeps a statement eager rejects (then it ends).
KEEP_INVALID = 0.04
#: Chance that it keeps one eager rejects only at the third call's sizes.
KEEP_RESIZE_INVALID = 0.15
#: Redraws of a statement before the generator gives up on that slot.
ATTEMPTS = 12
_NAME = re.compile(r"\b[xv]\d+\b")


@dataclasses.dataclass
class Stmt:
    """One line: `target = expr`, or an update in place of `mutates`
    (which may also define a target: `v3 = x0.add_(v1)`)."""
    text: str
    target: str = None
    mutates: str = None

    @property
    def uses(self):
        names = set(_NAME.findall(self.text))
        if self.mutates:
            names.add(self.mutates)
        return names

    def line(self):
        return f"{self.target} = {self.text}" if self.target else self.text


@dataclasses.dataclass
class Program:
    seed: int
    index: int
    mode: str
    sizes: fuzz_inputs.Sizes
    inputs: list
    stmts: list
    outputs: list
    calls: int = 3

    @property
    def value_seed(self):
        """Seeds the input values; kept when shrinking changes the program."""
        return f"{self.seed}:{self.index}"

    @property
    def tag(self):
        return f"seed {self.seed} program {self.index} ({self.mode})"

    def source(self):
        args = ", ".join(spec.name for spec in self.inputs)
        body = [f"    {stmt.line()}" for stmt in self.stmts]
        result = ", ".join(self.outputs)
        body.append(f"    return ({result},)" if len(self.outputs) == 1 else f"    return ({result})")
        return ("import torch\nimport torch.nn.functional as F\n\n\n"
                f"def f({args}):\n" + "\n".join(body) + "\n")

    def function(self):
        """A fresh function object (a fresh code object, so no compiled code
        is shared with another program)."""
        source = self.source()
        filename = f"<fuzz {self.seed}:{self.index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {}
        exec(compile(source, filename, "exec"), namespace)
        return namespace["f"]

    def build_inputs(self, call):
        return fuzz_inputs.build_inputs(self.inputs, self.sizes, self.value_seed, call)


class Builder:
    """What an op builder sees: the random stream, the live variables (the
    example tensor of each, from running the statements so far on the first
    call's inputs) and helpers for dims, sizes and scalars."""

    def __init__(self, rng, env, input_names):
        self.rng = rng
        self.env = env
        self.input_names = input_names

    def tensor(self, name):
        return self.env[name]

    def names(self, where=None):
        return [n for n in self.env if where is None or where(self.env[n])]

    def pick(self, where=None):
        """A variable (satisfying `where`), biased to the most recent."""
        names = self.names(where)
        if not names:
            return None
        if self.rng.random() < 0.45:
            return names[-1]
        return self.rng.choice(names)

    def pick_compatible(self, name, relation, chance=0.85):
        """Another variable `relation(theirs, ours)` accepts, usually; any
        variable otherwise (which may make the statement invalid)."""
        mine = self.env[name]
        if self.rng.random() < chance:
            found = self.pick(lambda t: relation(t, mine))
            if found is not None:
                return found
        return self.pick()

    def is_input_view(self, name):
        """Whether `name` shares memory with an input but is not one."""
        if name in self.input_names:
            return False
        storage = self.env[name].untyped_storage().data_ptr()
        return storage != 0 and any(self.env[i].untyped_storage().data_ptr() == storage
                                    for i in self.input_names)

    def dim(self, name, extra=0):
        """A valid dim of `name` (of rank + extra), sometimes negative; 0 for
        a 0-d tensor."""
        rank = self.env[name].dim() + extra
        if rank == 0:
            return 0
        dim = self.rng.randrange(rank)
        return dim - rank if self.rng.random() < 0.3 else dim

    def size(self, name, dim):
        """Size `dim` of `name` as source: a literal, or read from the
        tensor (x.shape[d], x.size(d)), which stays right when sizes change."""
        roll = self.rng.random()
        if roll < 0.4:
            return str(self.env[name].shape[dim])
        if roll < 0.9:
            return f"{name}.shape[{dim}]"
        return f"{name}.size({dim})"

    def scalar(self, name=None):
        """A Python number; an int for integer tensors, mostly."""
        tensor = self.env.get(name)
        if tensor is not None and not tensor.dtype.is_floating_point and self.rng.random() < 0.8:
            return str(self.rng.choice((0, 1, 2, 3, -1, -2, 5)))
        return self.rng.choice(("0.5", "2.0", "-1.5", "3", "1", "0", "-0.0", "1e-3", "100.0",
                                "True", "2", "-3", "float('inf')", "0.25"))

    def chance(self, probability):
        return self.rng.random() < probability


def _run(stmt, env):
    """Runs one statement on the example tensors; returns the value it
    defines (None for a pure update). Raises what eager raises."""
    namespace = {"torch": torch, "F": F}
    namespace.update(env)
    with warnings.catch_warnings(), compare.EagerProbe(strict=True):
        warnings.simplefilter("ignore")
        exec(stmt.line(), namespace)
    if stmt.target is None:
        return None
    value = namespace[stmt.target]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{stmt.text} is a {type(value).__name__}, not a tensor")
    return value


def _draft(builder):
    """One candidate statement from a random op of the catalog, or None."""
    family = builder.rng.choices(catalog.FAMILIES, catalog.FAMILY_WEIGHTS)[0]
    return family(builder)


def _replay(program, call):
    """The variables after running the program's statements on a call's
    inputs (to undo what a rejected in-place draft did to them)."""
    env = dict(zip((s.name for s in program.inputs), program.build_inputs(call)))
    for stmt in program.stmts:
        value = _run(stmt, env)
        if stmt.target:
            env[stmt.target] = value
    return env


def _backward_works(env):
    """Whether autograd can still differentiate every live variable (an
    update in place can overwrite what a backward needs: eager raises)."""
    live = [t for t in env.values() if t.requires_grad]
    leaves = [t for t in live if t.is_leaf]
    if not live or not leaves:
        return True
    try:
        torch.autograd.grad(sum(t.double().sum() for t in live), leaves,
                            allow_unused=True, retain_graph=True)
        return True
    except RuntimeError:
        return False


def _check(stmt, env, resized, mode):
    """Runs a draft on the first call's variables and the third call's
    (None once a kept statement made those invalid). Returns (value,
    resized value, failure) with failure None, 'undefined' (never kept),
    'invalid' (eager raises) or 'resize' (raises at the third sizes only)."""
    try:
        compile(stmt.line(), "<draft>", "exec")
    except SyntaxError as error:
        raise AssertionError(f"the catalog drafted invalid Python: {stmt.line()}") from error
    try:
        value = _run(stmt, env)
        if mode == "training" and stmt.mutates and not _backward_works(env):
            return None, None, "undefined"
    except compare.UndefinedCast:
        return None, None, "undefined"
    except Exception:  # noqa: BLE001 - any eager error rejects the draft
        return None, None, "invalid"
    if resized is None:
        return value, None, None
    try:
        return value, _run(stmt, resized), None
    except compare.UndefinedCast:
        return None, None, "undefined"
    except Exception:  # noqa: BLE001 - valid only at the first sizes
        return value, None, "resize"


def generate(seed, index, mode="inference"):
    """Program `index` of campaign `seed`: a pure function of its arguments.
    Each statement is checked on the first call's inputs and on the third
    call's (resized) ones, so that most programs are valid at every call."""
    rng = fuzz_inputs.rng_for(seed, index, mode)
    sizes = fuzz_inputs.draw_sizes(rng)
    specs = [fuzz_inputs.draw_input(rng, f"x{i}", mode)
             for i in range(rng.choices((1, 2, 3, 4), (3, 4, 3, 1))[0])]
    program = Program(seed, index, mode, sizes, specs, [], [])
    env = _replay(program, 0)
    resized = _replay(program, 2)
    builder = Builder(rng, env, [s.name for s in specs])
    count = rng.randint(1, 10)
    temps = 0
    while len(program.stmts) < count:
        for _ in range(ATTEMPTS):
            draft = _draft(builder)
            if draft is None:
                continue
            text, mutates, defines = draft
            stmt = Stmt(text, f"v{temps}" if defines else None, mutates)
            value, resized_value, failure = _check(stmt, env, resized, mode)
            if failure == "invalid" and rng.random() < KEEP_INVALID:
                program.stmts.append(stmt)
                program.outputs = [stmt.target or stmt.mutates]
                return program
            if failure == "resize" and rng.random() < KEEP_RESIZE_INVALID:
                failure, resized = None, None
            if failure:
                if mutates:
                    env.clear()
                    env.update(_replay(program, 0))
                    resized = resized and _replay(program, 2)
                continue
            program.stmts.append(stmt)
            if stmt.target:
                env[stmt.target] = value
                if resized is not None:
                    resized[stmt.target] = resized_value
                temps += 1
            break
        else:
            break
    program.outputs = _pick_outputs(builder, program)
    return program


def _pick_outputs(builder, program):
    """1 to 4 names: mostly recent temporaries, sometimes an input, a view
    of one, or the same name twice."""
    rng = builder.rng
    temps = [s.target for s in program.stmts if s.target]
    everything = list(builder.env)
    outputs = []
    for _ in range(rng.choices((1, 2, 3, 4), (4, 4, 2, 1))[0]):
        roll = rng.random()
        views = [n for n in temps if builder.is_input_view(n)]
        if roll < 0.1 and outputs:
            outputs.append(rng.choice(outputs))
        elif roll < 0.2:
            outputs.append(rng.choice(builder.input_names))
        elif roll < 0.3 and views:
            outputs.append(rng.choice(views))
        elif temps:
            outputs.append(temps[-1] if rng.random() < 0.5 else rng.choice(temps))
        else:
            outputs.append(rng.choice(everything))
    if temps and temps[-1] not in outputs and rng.random() < 0.7:
        outputs[0] = temps[-1]
    return outputs


def without(program, drop):
    """The program without statements `drop` (indices) and everything that
    reads what they define; outputs that go are dropped too."""
    gone = set()
    stmts = []
    for index, stmt in enumerate(program.stmts):
        if index in drop or stmt.uses & gone:
            if stmt.target:
                gone.add(stmt.target)
            continue
        stmts.append(stmt)
    outputs = [name for name in program.outputs if name not in gone]
    return dataclasses.replace(program, stmts=stmts, outputs=outputs or [program.inputs[0].name])
