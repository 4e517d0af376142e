"""Shrinking: minimize a failing program while its bug persists, then write
it out as a standalone repro.

`shrink` tries simpler variants greedily (drop statements with what reads
them, drop outputs, fewer calls, drop inputs, contiguous layouts, no special
values, smaller sizes, lower ranks, float32 for other floats), keeping a
variant when the same bug (`signature`: category and cause) shows in a child
process (`check`, a workers.Pool's), until no variant keeps it or the budget
is spent. `repro_source` renders the result as a .py file that imports only
torch and dynafuse, builds the inputs with fuzz_tensor, runs eager and
compiled, and asserts they agree.
"""
import dataclasses
import inspect
import re
import time

import inputs as fuzz_inputs
import programs


def signature(outcome):
    """What must stay the same while shrinking: the category and, where the
    detail names one, the cause (exception types, signal, failure reason)."""
    detail = outcome.detail
    if outcome.category == "exception_mismatch":
        types = re.findall(r"\('(\w+)'", detail)
        return outcome.category, tuple(types), "returns" in detail
    if outcome.category == "crash":
        return outcome.category, detail.split("\n")[0]
    if outcome.category == "aliasing":
        return outcome.category, _aliasing_change(detail)
    if outcome.category == "wrong":
        kind = re.sub(r"\d+", "N", detail.split(": ", 2)[1]) if ": " in detail else ""
        problem = ("dtype" if " dtype " in detail else "shape" if " shape " in detail
                   else "None" if "None" in detail else "values")
        return outcome.category, kind.split(" afterwards")[0], problem
    if outcome.category == "hidden_compile_failure":
        import oracle
        return outcome.category, tuple(sorted({oracle.normalize_reason(r) for r in outcome.reasons
                                               if "failed" in r}))
    return (outcome.category,)


def _aliasing_change(detail):
    """The kinds of aliasing relation eager and compiled disagree on, without
    indices: ('output is output', 'lost'), ('input afterwards', ...)."""
    if "afterwards" in detail:
        return ("input updated differently",)
    match = re.search(r"eager: (.*); compiled: (.*)", detail)
    if not match:
        return (detail,)
    sides = [set(re.findall(r"'([^']*)'", side)) for side in match.groups()]
    changes = {(re.sub(r" \d+", "", pair), "lost" if pair in sides[0] else "extra")
               for pair in sides[0] ^ sides[1]}
    return tuple(sorted(changes))


def _variants(program):
    """Simpler programs, most reducing first."""
    for index in reversed(range(len(program.stmts))):
        yield programs.without(program, {index})
    if len(program.outputs) > 1:
        for index in range(len(program.outputs)):
            yield dataclasses.replace(program, outputs=program.outputs[:index] + program.outputs[index + 1:])
    if program.calls == 3:
        third = program.sizes.third
        yield dataclasses.replace(program, calls=1, sizes=fuzz_inputs.Sizes(third, third))
    if program.calls > 1:
        yield dataclasses.replace(program, calls=1)
        yield dataclasses.replace(program, calls=program.calls - 1)
    used = set().union(*(s.uses for s in program.stmts), program.outputs)
    for index, spec in enumerate(program.inputs):
        if spec.name not in used and len(program.inputs) > 1:
            yield dataclasses.replace(program, inputs=program.inputs[:index] + program.inputs[index + 1:])
    for index, spec in enumerate(program.inputs):
        simpler = []
        if spec.layout != "contiguous":
            simpler.append(dataclasses.replace(spec, layout="contiguous"))
        if spec.specials:
            simpler.append(dataclasses.replace(spec, specials=False))
        if spec.dims:
            simpler.append(dataclasses.replace(spec, dims=spec.dims[1:]))
        if spec.dtype in ("float64", "float16", "bfloat16"):
            simpler.append(dataclasses.replace(spec, dtype="float32"))
        for replacement in simpler:
            yield dataclasses.replace(program, inputs=program.inputs[:index] + [replacement]
                                      + program.inputs[index + 1:])
    for which in ("first", "third"):
        vector = getattr(program.sizes, which)
        for slot, size in enumerate(vector):
            for smaller in sorted({1, 2, size // 2, size - 1}):
                if 0 < smaller < size:
                    sizes = list(vector)
                    sizes[slot] = smaller
                    yield dataclasses.replace(program, sizes=dataclasses.replace(
                        program.sizes, **{which: tuple(sizes)}))


def shrink(program, outcome, check, max_checks=150, max_seconds=120.0):
    """The smallest variant of `program` found on which check() still shows
    outcome's bug, with that variant's outcome and the checks it took."""
    key = signature(outcome)
    current = dataclasses.replace(program, calls=outcome.call + 1 if outcome.call >= 0 else program.calls)
    best = outcome
    checks = 0
    deadline = time.monotonic() + max_seconds
    progress = True
    while progress:
        progress = False
        for variant in _variants(current):
            if checks >= max_checks or time.monotonic() > deadline:
                return current, best, checks
            checks += 1
            result = check(variant)
            if signature(result) == key:
                current, best, progress = variant, result, True
                break
    return current, best, checks


_CHECKER = '''
TOLERANCES = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-4, 1e-5),
              torch.float16: (5e-3, 1e-3), torch.bfloat16: (3e-2, 1e-2)}


def run(fn, args, call):
    try:
        outputs = fn(*args)
        if TRAINING:
            weights = torch.Generator().manual_seed(call)
            loss = sum((o.double() * torch.randn(o.shape, generator=weights, dtype=torch.float64)).sum()
                       for o in outputs if o.requires_grad)
            if torch.is_tensor(loss):
                loss.backward()
        return outputs, None
    except Exception as error:
        return None, error


def aliasing(outputs, args):
    items = list(enumerate(outputs)) + [("input %d" % k, a) for k, a in enumerate(args)]
    pairs = set()
    for i, (a, x) in enumerate(items[:len(outputs)]):
        for b, y in items[i + 1:]:
            if x is y:
                pairs.add((a, b, "is"))
            elif x.numel() and y.numel() and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr():
                pairs.add((a, b, "shares memory"))
    return pairs


def assert_close(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (what, actual, expected)
    rtol, atol = TOLERANCES.get(expected.dtype, (0, 0))
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, msg=what)


compiled = dynafuse.compile(f)
for call in range(CALLS):
    eager_args, compiled_args = inputs(call), inputs(call)
    before = dynafuse.stats()
    expected, eager_error = run(f, eager_args, call)
    actual, compiled_error = run(compiled, compiled_args, call)
    counters = {k: v - before[k] for k, v in dynafuse.stats().items() if v != before[k]}
    print(f"call {call + 1}:", counters, dynafuse._C.break_reasons())
    assert type(eager_error) is type(compiled_error), (eager_error, compiled_error)
    if eager_error is not None:
        continue
    assert len(actual) == len(expected)
    for i, (got, want) in enumerate(zip(actual, expected)):
        assert_close(got.detach(), want.detach(), f"output {i}")
    assert aliasing(actual, compiled_args) == aliasing(expected, eager_args), \\
        (aliasing(actual, compiled_args), aliasing(expected, eager_args))
    for k, (got, want) in enumerate(zip(compiled_args, eager_args)):
        assert_close(got.detach(), want.detach(), f"input {k} afterwards")
        if TRAINING and want.grad is not None:
            assert got.grad is not None, f"grad of input {k}"
            assert_close(got.grad, want.grad, f"grad of input {k}")
    assert not counters.get("compile_failures") and not counters.get("run_failures"), counters
print("eager and compiled agree")
'''


def repro_source(program, outcome):
    """A standalone .py reproducing `outcome` on `program`."""
    function = program.source().split("\n\n\n", 1)[1]
    cases = []
    for call in range(program.calls):
        build = fuzz_inputs.render_build(program.inputs, program.sizes, program.value_seed, call)
        cases.append(f"    if call == {call}:\n        return {build}")
    detail = "\n".join(line for line in outcome.detail.splitlines()[:6])
    return (f'"""Dynafuse fuzzer repro: {outcome.category} ({program.tag}).\n\n{detail}\n\n'
            f'Run: .venv/bin/python <this file>; it raises while the bug is there.\n"""\n'
            "import torch\nimport torch.nn.functional as F\n\nimport dynafuse\n\n"
            f"CALLS = {program.calls}\nTRAINING = {program.mode == 'training'}\n\n\n"
            + inspect.getsource(fuzz_inputs.fuzz_tensor) + "\n\n" + function + "\n\n"
            + "def inputs(call):\n" + "\n".join(cases) + "\n\n" + _CHECKER)
