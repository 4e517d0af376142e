"""The oracle: runs one program eagerly and compiled, compares, classifies.

Each of a program's calls (new values, new values, new sizes) runs eager
PyTorch and the compiled function on two identical sets of inputs
(inputs.build_inputs), and compares, in this order: the exception types,
the outputs' count, shapes and dtypes, their values (compare.py), which
outputs are the same object or share memory with each other and with the
inputs (`alias_signature`), the inputs' values afterwards (what the program
updated in place), in training mode the inputs' gradients, and finally the
dynafuse.stats() deltas: a compile or run failure on a call eager runs is a
failure the fallback hid. The first call with a bug decides the program's
category; without one, the program is eager_invalid_match, numerics,
ok_compiled or ok_fallback (CATEGORIES, in the order the summary lists them).
"""
import dataclasses
import re
import warnings

import torch

import compare
import inputs as fuzz_inputs

CATEGORIES = ("ok_compiled", "ok_fallback", "numerics", "eager_invalid_match",
              "wrong", "crash", "hang", "exception_mismatch", "aliasing",
              "hidden_compile_failure", "harness_error")
BUGS = frozenset(CATEGORIES[4:])
COUNTERS = ("captures", "cache_hits", "graph_breaks", "compile_failures",
            "eager_frames", "run_failures")


@dataclasses.dataclass
class Outcome:
    """A program's verdict: plain data, sent from worker to parent."""
    category: str
    detail: str = ""
    call: int = -1              # the first call with a bug (-1: none)
    eager_valid: bool = True    # no eager call raised
    compiled: bool = False      # every call ran compiled code only
    partly_compiled: bool = False
    reasons: list = dataclasses.field(default_factory=list)
    counters: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Run:
    """What one call did: its outputs or its exception, the inputs (which
    the call may have updated) and, in training mode, their gradients."""
    args: list
    outputs: tuple = None
    error: tuple = None         # (type name, first line of the message)
    grads: list = None


def _loss_weights(program, call, index, shape):
    generator = torch.Generator().manual_seed(
        fuzz_inputs.value_seed(program.value_seed, f"loss weight {index}", call))
    return torch.randn(shape, generator=generator, dtype=torch.float64)


def execute(program, fn, args, call):
    """Calls fn(*args); in training mode also backpropagates the sum of
    (output * fixed random weights) over the outputs that require grad."""
    run = Run(args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = fn(*args)
            run.outputs = outputs
            if program.mode == "training":
                loss = None
                for index, out in enumerate(outputs):
                    if isinstance(out, torch.Tensor) and out.requires_grad:
                        term = (out.double() * _loss_weights(program, call, index, out.shape)).sum()
                        loss = term if loss is None else loss + term
                if loss is not None:
                    loss.backward()
                run.grads = [a.grad if isinstance(a, torch.Tensor) else None for a in args]
    except Exception as error:  # noqa: BLE001 - the program's own error is data
        message = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        run.error = (type(error).__name__, message)
    return run


def _storage(tensor):
    if tensor.numel() == 0 or tensor.untyped_storage().nbytes() == 0:
        return None
    return tensor.untyped_storage().data_ptr()


def alias_signature(outputs, args):
    """The pairs (output i, output j or input k) that are the same object
    or share memory: what a caller could observe by mutating one."""
    items = [(f"output {i}", t) for i, t in enumerate(outputs)]
    items += [(f"input {k}", t) for k, t in enumerate(args)]
    pairs = set()
    for i, (label, tensor) in enumerate(items[:len(outputs)]):
        for other, value in items[i + 1:]:
            if tensor is value:
                pairs.add(f"{label} is {other}")
            elif (isinstance(tensor, torch.Tensor) and isinstance(value, torch.Tensor)
                  and _storage(tensor) is not None and _storage(tensor) == _storage(value)):
                pairs.add(f"{label} shares memory with {other}")
    return pairs


def _values(run, with_outputs=True):
    """(label, tensor) of what a call's values are compared on."""
    items = []
    if with_outputs:
        items += [(f"output {i}", t) for i, t in enumerate(run.outputs)]
    items += [(f"input {k} afterwards", t.detach()) for k, t in enumerate(run.args)]
    if run.grads is not None:
        items += [(f"grad of input {k}", g) for k, g in enumerate(run.grads)]
    return items


def compare_call(program, fn, call, eager, compiled):
    """(category, detail) of one call's first difference, or ('numerics',
    detail), ('invalid', ...) when both raised alike, or (None, '')."""
    if eager.error or compiled.error:
        if eager.error and compiled.error and eager.error[0] == compiled.error[0]:
            return "invalid", f"both raise {eager.error[0]}"
        return "exception_mismatch", f"eager: {eager.error or 'returns'}; compiled: {compiled.error or 'returns'}"
    if not isinstance(compiled.outputs, tuple) or len(compiled.outputs) != len(eager.outputs):
        return "wrong", f"compiled returned {type(compiled.outputs).__name__} {compiled.outputs!r:.200}"
    expected, actual = dict(_values(eager)), dict(_values(compiled))
    for label, want in expected.items():
        problem = compare.structure(want, actual[label])
        if problem:
            return "wrong", f"{label}: {problem}"
    mismatched = [label for label, want in expected.items()
                  if want is not None and not compare.close(want, actual[label])]
    numerics = ""
    if mismatched:
        probe = _probe(program, fn, call)
        if probe.undefined_cast:
            numerics = f"{mismatched[0]}: eager converts NaN, inf or out-of-range floats to integers"
            mismatched = []
        elif probe.near_tie:
            tied = [label for label in mismatched
                    if not (expected[label].dtype.is_floating_point or expected[label].is_complex())]
            if tied:
                numerics = f"{tied[0]}: indices picked among values within rounding noise of each other"
                mismatched = [label for label in mismatched if label not in tied]
        reference = _float64_reference(program, fn, call) if mismatched else {}
        perturbed = [_perturbed(program, fn, call, sign, seed, probe.eps) for seed in (call, call + 100)
                     for sign in (1, -1)] if mismatched else []
        for label in mismatched:
            verdict, note = compare.judge(expected[label], actual[label], reference.get(label),
                                          [p.get(label) for p in perturbed])
            where = "aliasing" if "afterwards" in label else "wrong"
            if verdict != "numerics":
                return where, f"{label}: {note}"
            numerics = numerics or f"{label}: {note}"
    theirs = alias_signature(eager.outputs, eager.args)
    ours = alias_signature(compiled.outputs, compiled.args)
    if theirs != ours:
        return "aliasing", (f"eager: {sorted(theirs) or 'no aliasing'}; "
                            f"compiled: {sorted(ours) or 'no aliasing'}")
    return ("numerics", numerics) if numerics else (None, "")


def _rerun(program, fn, call, args):
    run = execute(program, fn, args, call)
    return {} if run.error else dict(_values(run))


def _float64_reference(program, fn, call):
    """label -> value of the same call run eagerly with floating inputs in
    float64 (same strides); {} when that run raises."""
    return _rerun(program, fn, call, fuzz_inputs.upcast(program.build_inputs(call)))


def _perturbed(program, fn, call, sign, seed, eps):
    """label -> value of the call run eagerly on inputs moved by ~2 ulps of
    the coarsest float dtype the program computes in."""
    return _rerun(program, fn, call, fuzz_inputs.perturb(program.build_inputs(call), sign, seed, eps))


def _probe(program, fn, call):
    """compare.EagerProbe's findings on an eager run of this call: whether it
    converts a non-finite or out-of-range float to an integer (then any
    result may differ), and its coarsest float precision."""
    probe = compare.EagerProbe()
    with probe:
        execute(program, fn, program.build_inputs(call), call)
    return probe


def _delta(before, after):
    return {name: after[name] - before[name] for name in COUNTERS}


_NOISE = [(re.compile(r"^graph break in [^:]*: "), ""),
          (re.compile(r"^(<fuzz [^>]*>|/\S*/)[^:]*:\d+: "), ""),
          (re.compile(r"^compiling [^:]* at <fuzz [^>]*>:\d+ failed: "), "compile failed: "),
          (re.compile(r"^running \S+ failed: (.*); the call runs eagerly$"), r"run failed: \1"),
          (re.compile(r" \(the frame cannot resume after it: .*\)$"), ""),
          (re.compile(r"<fuzz [^>]*>:\d+"), "<fuzz>"),
          (re.compile(r"\b[xv]\d+\b"), "VAR"),
          (re.compile(r"(?<![\w.])-?\d+(\.\d+)?\b"), "N")]


def normalize_reason(text):
    """A break or failure reason without the program's names, lines and
    sizes, so that equal causes count together."""
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return text[:240]


def check(program, compile_fn=None, read_log=None):
    """Runs `program` eagerly and through compile_fn (dynafuse.compile by
    default) for each of its calls and classifies it. read_log, when given,
    returns what the compiler logged since its last call (run failures'
    reasons appear only there)."""
    import dynafuse
    compile_fn = compile_fn or dynafuse.compile
    dynafuse.reset()
    fn = program.function()
    compiled_fn = compile_fn(fn)
    outcome = Outcome("ok_compiled", counters=dict.fromkeys(COUNTERS, 0))
    reasons, verdicts, compiled_calls = [], [], []
    for call in range(program.calls):
        eager = execute(program, fn, program.build_inputs(call), call)
        seen = len(dynafuse._C.break_reasons())
        before = dynafuse.stats()
        compiled = execute(program, compiled_fn, program.build_inputs(call), call)
        delta = _delta(before, dynafuse.stats())
        for name, value in delta.items():
            outcome.counters[name] += value
        reasons += dynafuse._C.break_reasons()[seen:]
        if read_log:
            reasons += [line.split("] ", 1)[1] for line in read_log().splitlines()
                        if line.startswith("[dynafuse:graph_breaks] running")]
        outcome.eager_valid &= eager.error is None
        compiled_calls.append(all(delta[name] == 0 for name in COUNTERS[2:])
                              and delta["captures"] + delta["cache_hits"] > 0)
        outcome.partly_compiled |= delta["captures"] + delta["cache_hits"] > 0
        category, detail = compare_call(program, fn, call, eager, compiled)
        if category in (None, "numerics") and (delta["compile_failures"] or delta["run_failures"]):
            category = "hidden_compile_failure"
            detail = f"compile_failures +{delta['compile_failures']}, run_failures +{delta['run_failures']}"
        verdicts.append((category, detail))
        if category in BUGS:
            outcome.category, outcome.detail, outcome.call = category, f"call {call + 1}: {detail}", call
            break
    outcome.reasons = sorted(set(reasons))
    outcome.compiled = all(compiled_calls) and len(compiled_calls) == program.calls
    if outcome.category in BUGS:
        if outcome.category == "hidden_compile_failure" and outcome.reasons:
            outcome.detail += "; " + " | ".join(outcome.reasons)[:600]
        return outcome
    kinds = [category for category, _ in verdicts]
    if "invalid" in kinds:
        outcome.category = "eager_invalid_match"
    elif "numerics" in kinds:
        outcome.category = "numerics"
        outcome.detail = next(d for c, d in verdicts if c == "numerics")
    elif not outcome.compiled:
        outcome.category = "ok_fallback"
    return outcome
