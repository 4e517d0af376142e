"""PyTorch's own OpInfo sample inputs for the reductions, views, data
movement and extern ops Dynafuse lowers, variant OpInfos included (e.g.
nn.functional.pad.reflect, max.binary).

Each sample runs compiled afresh and must match eager, outputs compared in
full (same structure and length, every tensor's dtype, shape and values).
A compiled sample is also compiled by the interpreter and the MLIR backend,
which must agree with the LLVM backend (differential testing).
A sample the tracer does not capture runs eagerly (a graph break before
any graph) and counts as "eager"; a sample that is captured must lower,
compile and match: a lowering or compile failure fails the test. The
per-op coverage (compiled / eager / rejected by eager / failed, known
compiler bugs included) is printed at the end of the session
(conftest.OPINFO_COVERAGE). One test case per sample, so a known compiler
bug is one strict xfail (COMPILER_BUGS) and the op's other samples still
count."""
import pytest
import torch

import dynafuse
from conftest import OPINFO_COVERAGE, OPINFO_DIFFERENTIAL, assert_outputs_close

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = [
    "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp",
    "any", "all", "softmax", "log_softmax", "nn.functional.layer_norm",
    "nn.functional.group_norm", "reshape", "view", "permute", "transpose", "t", "expand",
    "expand_as", "view_as", "reshape_as",
    "squeeze", "unsqueeze", "flatten", "select", "narrow", "split", "chunk", "unbind", "cat",
    "stack", "nn.functional.pad", "flip", "roll", "repeat", "index_select", "gather", "tril",
    "triu", "nn.functional.embedding", "matmul", "mm", "bmm", "addmm", "nn.functional.linear",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "max", "min",
]


def _full_name(opinfo):
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


OPINFOS = {_full_name(op): op for op in common.op_db if op.name in OPS}
DTYPES = (torch.float32, torch.int64)
SAMPLES_PER_DTYPE = 8

# Samples that are captured and then fail in the compiler: (op, dtype,
# sample index) -> the bug. Each is a strict expected failure: it fails the
# suite once the bug is fixed, so the entry gets removed.
COMPILER_BUGS = {}


def test_every_op_has_an_opinfo():
    assert {op.name for op in OPINFOS.values()} == set(OPS)


def _samples(opinfo, dtype):
    if dtype not in opinfo.supported_dtypes("cpu"):
        return []
    try:
        samples = list(opinfo.sample_inputs("cpu", dtype))
    except Exception:  # noqa: BLE001 - an OpInfo that cannot sample this dtype
        return []
    return samples[:SAMPLES_PER_DTYPE]


def _cases():
    """One case per sample; its id names the op, the dtype and the index."""
    cases, keys = [], set()
    for name in sorted(OPINFOS):
        for dtype in DTYPES:
            for index, sample in enumerate(_samples(OPINFOS[name], dtype)):
                key = (name, dtype, index)
                keys.add(key)
                marks = ()
                if key in COMPILER_BUGS:
                    marks = pytest.mark.xfail(reason=COMPILER_BUGS[key], strict=True)
                cases.append(pytest.param(name, sample, marks=marks,
                                          id=f"{name}-{str(dtype)[6:]}-{index}"))
    return cases, keys


with torch.random.fork_rng():  # the same sample values in every session
    torch.manual_seed(0)
    CASES, CASE_KEYS = _cases()


def test_every_op_has_samples_and_every_known_bug_a_case():
    assert {case.values[0] for case in CASES} == set(OPINFOS)
    assert set(COMPILER_BUGS) <= CASE_KEYS, set(COMPILER_BUGS) - CASE_KEYS


@pytest.mark.parametrize("name,sample", CASES)
def test_opinfo_sample_matches_eager(name, sample, tmp_path):
    opinfo = OPINFOS[name]
    coverage = OPINFO_COVERAGE.setdefault(
        name, {"compiled": 0, "eager": 0, "rejected": 0, "failed": 0})
    args, kwargs, op = sample.args, sample.kwargs, opinfo.op

    def fn(x):
        return op(x, *args, **kwargs)

    what = f"{name}: {sample}"
    try:
        with torch.no_grad():
            expected = fn(sample.input)
    except Exception:  # noqa: BLE001 - eager rejects the sample too
        coverage["rejected"] += 1
        return
    coverage["failed"] += 1  # until the sample has passed
    with torch.no_grad():
        actual = dynafuse.compile(fn)(sample.input)
    stats, graphs = dynafuse.stats(), dynafuse.compiled_graphs()
    assert not stats["compile_failures"], (what, stats, dynafuse._C.break_reasons())
    assert len(graphs) == stats["captures"], \
        (what, "captured but not compiled", stats, dynafuse._C.break_reasons())
    assert_outputs_close(actual, expected, what, rtol=1e-4, atol=1e-5)
    compiled = bool(graphs) and not stats["graph_breaks"]
    if compiled and len(DIFFERENTIAL_BACKENDS) == 3:
        agree_across_backends(fn, sample.input, actual, what, tmp_path)
    coverage["failed"] -= 1
    coverage["compiled" if compiled else "eager"] += 1


# Differential testing: every compiled sample is compiled again by the
# reference interpreter and the MLIR backend (an independent compiler from
# loop IR; docs/ir-reference.md), which must take the same path and agree
# closely with the LLVM backend's result above. A disagreement dumps the
# sample's kernels and names the dynafuse-diff command that finds the
# kernel.
DIFFERENTIAL_BACKENDS = tuple(b for b in ("interp", "llvm", "mlir")
                              if b in dynafuse._C.backends())


def agree_across_backends(fn, x, llvm_result, what, replay_dir):
    for backend in ("interp", "mlir"):
        dynafuse.reset()
        with torch.no_grad():
            result = dynafuse.compile(fn, backend=backend)(x)
        stats = dynafuse.stats()
        assert not stats["compile_failures"] and not stats["graph_breaks"] \
            and dynafuse.compiled_graphs(), (what, backend, "took another path", stats)
        try:
            assert_outputs_close(result, llvm_result, f"{what} [{backend} vs llvm]",
                                 rtol=1e-5, atol=1e-6)
        except AssertionError as disagreement:
            dynafuse.reset()
            dynafuse.config.dump_dir = str(replay_dir)
            with torch.no_grad():
                dynafuse.compile(fn, backend="mlir")(x)
            raise AssertionError(f"{disagreement}\nreplay: dynafuse-diff "
                                 f"{replay_dir}/*/kernels.loop") from None
    OPINFO_DIFFERENTIAL[DIFFERENTIAL_BACKENDS] = \
        OPINFO_DIFFERENTIAL.get(DIFFERENTIAL_BACKENDS, 0) + 1

