"""The differential fuzzer (test/fuzz, docs/fuzzing.md): a fixed-seed slice
of random programs must show no bug (wrong values, crashes, hangs,
exception or aliasing mismatches, hidden compile failures), and the fuzzer
itself must be able to fail: its classifier flags deliberately wrong
"compiled" functions, its workers survive crashes and hangs, and its
shrinker minimizes."""
import dataclasses
import os
import sys
import warnings

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))

import inputs as fuzz_inputs  # noqa: E402
import oracle  # noqa: E402
import programs  # noqa: E402
import run as fuzz_run  # noqa: E402
import shrink  # noqa: E402
import workers  # noqa: E402

SEED = 20240601
SLICES = {"inference": 300, "training": 100}


@pytest.mark.parametrize("mode", sorted(SLICES))
def test_fuzz_slice_has_no_bugs(mode, tmp_path):
    campaign = fuzz_run.run_campaign(SEED, SLICES[mode], workers=2, mode=mode, timeout=60,
                                     out=str(tmp_path), max_shrink=2, shrink_seconds=15,
                                     log=lambda *_: None)
    bugs = campaign.bugs()
    if bugs:
        lines = [fuzz_run.summary([campaign], top=5), "", "bugs (program: category: detail):"]
        lines += [f"  {index}: {o.category}: {o.detail.splitlines()[0][:200]}"
                  for index, o in list(bugs.items())[:20]]
        for path, source, _ in campaign.repros:
            lines += ["", f"--- {path}", source.split("\ndef fuzz_tensor")[0],
                      "def f(" + source.split("\ndef f(", 1)[1].split("\nTOLERANCES")[0]]
        lines.append(f"replay: .venv/bin/python test/fuzz/run.py --seed {SEED} "
                     f"--programs {SLICES[mode]} --mode {mode}")
        pytest.fail("\n".join(lines), pytrace=False)


def test_generation_is_deterministic_and_mostly_valid():
    first = [programs.generate(7, i).source() for i in range(40)]
    assert first == [programs.generate(7, i).source() for i in range(40)]
    valid = 0
    for index in range(100):
        program = programs.generate(7, index)
        fn = program.function()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for call in range(program.calls):
                    fn(*program.build_inputs(call))
            valid += 1
        except Exception:  # noqa: BLE001 - invalid programs are allowed, a few
            pass
    assert valid >= 85, valid


def _program(stmts, outputs, dtype="float32", dims=(2, 3), mode="inference"):
    specs = [fuzz_inputs.InputSpec("x0", dtype, dims, requires_grad=mode == "training")]
    stmts = [programs.Stmt(text, target, mutates) for text, target, mutates in stmts]
    return programs.Program(0, 0, mode, fuzz_inputs.Sizes((2, 3, 4, 5), (2, 4, 3, 2)), specs,
                            stmts, outputs)


def _check(program, compiled):
    """The oracle's verdict with `compiled(fn)` in place of dynafuse.compile."""
    return oracle.check(program, compile_fn=compiled)


def test_classifier_flags_wrong_values():
    program = _program([("x0 * 2", "v0", None)], ["v0"])
    outcome = _check(program, lambda fn: lambda *a: tuple(o + 0.5 for o in fn(*a)))
    assert outcome.category == "wrong", outcome
    outcome = _check(program, lambda fn: lambda *a: tuple(o.double() for o in fn(*a)))
    assert outcome.category == "wrong" and "dtype" in outcome.detail, outcome


def test_classifier_flags_wrong_gradients():
    program = _program([("x0 * 2", "v0", None)], ["v0"], mode="training")
    outcome = _check(program, lambda fn: lambda *a: tuple(o * 1.5 + o.detach() * -0.5 for o in fn(*a)))
    assert outcome.category == "wrong" and "grad of input 0" in outcome.detail, outcome


def test_classifier_accepts_a_faithful_function_as_fallback():
    program = _program([("x0 * 2", "v0", None), ("v0.sum(0)", "v1", None)], ["v1", "v0"])
    assert _check(program, lambda fn: fn).category == "ok_fallback"


def test_classifier_flags_exception_mismatches():
    program = _program([("x0 * 2", "v0", None)], ["v0"])

    def raising(fn):
        def call(*args):
            raise ValueError("compiled raises")
        return call
    assert _check(program, raising).category == "exception_mismatch"
    invalid = _program([("x0.view(7)", "v0", None)], ["v0"])
    outcome = _check(invalid, lambda fn: lambda *a: (a[0].reshape(-1),))
    assert outcome.category == "exception_mismatch", outcome
    assert _check(invalid, lambda fn: fn).category == "eager_invalid_match"


def test_classifier_flags_aliasing_mismatches():
    def cloning(fn):
        return lambda *a: tuple(o.clone() for o in fn(*a))
    for outputs in (["x0"], ["v0"], ["v1", "v1"]):
        program = _program([("x0[1:]", "v0", None), ("x0 + 1", "v1", None)], outputs)
        outcome = _check(program, cloning)
        assert outcome.category == "aliasing", (outputs, outcome)
    updating = _program([("x0.mul_(3)", None, "x0"), ("x0 + 1", "v0", None)], ["v0"])
    outcome = _check(updating, lambda fn: lambda *a: fn(*[t.clone() for t in a]))
    assert outcome.category == "aliasing" and "input 0 afterwards" in outcome.detail, outcome


def test_classifier_tolerates_more_accurate_low_precision():
    program = _program([("(x0 * 3).sum(-1)", "v0", None)], ["v0"], dtype="float16")

    def accurate(fn):
        return lambda x: ((x.double() * 3).sum(-1).half(),)
    assert _check(program, accurate).category in ("ok_fallback", "numerics")


def test_classifier_judges_nans_by_how_far_eager_strays():
    import compare
    half = torch.float16
    reference = torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)
    nans = torch.full((3,), float("nan"), dtype=half)
    # Eager matches float64 everywhere and compiled gives NaN: wrong.
    verdict, _ = compare.judge(torch.zeros(3, dtype=half), nans, reference)
    assert verdict == "wrong"
    # Eager's own rounding noise (0.76 where float64 says 0) feeds the
    # division that gives compiled's NaN: numerics, not evidence.
    noisy = torch.tensor([0.759, 0.241, 0.0], dtype=half)
    verdict, _ = compare.judge(noisy, nans, reference)
    assert verdict == "numerics"


def test_probe_sees_indices_picked_among_near_ties():
    import compare
    for values, tied in (([3.0, 1e-17, -2e-17, 2.0], True), ([3.0, 0.0, 1.0, 2.0], False),
                         ([1.0, 1.0, 2.0], False)):
        probe = compare.EagerProbe()
        with probe:
            torch.argmin(torch.tensor(values, dtype=torch.float64))
        assert probe.near_tie is tied, values


def test_classifier_flags_failures_the_fallback_hides(monkeypatch):
    import dynafuse
    counter = iter(range(10**6))
    monkeypatch.setattr(dynafuse, "stats", lambda: dict.fromkeys(oracle.COUNTERS, next(counter)))
    program = _program([("x0 * 2", "v0", None)], ["v0"])
    assert _check(program, lambda fn: fn).category == "hidden_compile_failure"


def test_workers_survive_crashes_and_hangs(tmp_path):
    crash = _program([("__import__('ctypes').string_at(0)", "v0", None)], ["v0"])
    hang = _program([("__import__('time').sleep(60)", "v0", None)], ["v0"])
    fine = _program([("x0 + 1", "v0", None)], ["v0"])
    with workers.Pool(1, timeout=5, log_dir=str(tmp_path)) as pool:
        results = dict(pool.run([(i, ("program", p)) for i, p in enumerate((crash, hang, fine))]))
    assert results[0].category == "crash" and "SIGSEGV" in results[0].detail, results[0]
    assert results[1].category == "hang", results[1]
    assert results[2].category == "ok_compiled", results[2]


def test_shrinker_keeps_the_bug_and_drops_the_rest():
    program = _program([("x0 + 1", "v0", None), ("v0.exp()", "v1", None), ("x0 * 3", "v2", None),
                        ("v2.flip(0)", "v3", None), ("v1 - v3", "v4", None)], ["v4", "v1"])
    program = dataclasses.replace(program, inputs=[dataclasses.replace(
        program.inputs[0], layout="transposed", specials=True)])

    def check(candidate):
        """A fake bug: any program that flips."""
        buggy = any("flip" in s.text for s in candidate.stmts)
        return oracle.Outcome("wrong" if buggy else "ok_compiled", call=0 if buggy else -1)
    small, outcome, _ = shrink.shrink(program, check(program), check)
    assert [s.text for s in small.stmts] == ["x0 * 3", "v2.flip(0)"], small.stmts
    assert small.inputs[0].layout == "contiguous" and not small.inputs[0].specials
    assert small.calls == 1 and outcome.category == "wrong"
    source = shrink.repro_source(small, outcome)
    compile(source, "repro.py", "exec")
    namespace = {}
    exec(source.split("\ncompiled = dynafuse.compile")[0], namespace)
    assert torch.equal(namespace["inputs"](0)[0], small.build_inputs(0)[0])
