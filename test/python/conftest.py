"""Shared fixtures: every test starts with no compiled code and zeroed
counters, so each can prove which path (compiled or eager) ran."""
import pytest
import torch

import dynafuse


@pytest.fixture(autouse=True)
def fresh_compiler():
    dynafuse.reset()
    config = dynafuse.config
    saved = {name: getattr(config, name) for name in config.SETTINGS}
    torch.manual_seed(0)
    yield
    for name, value in saved.items():
        setattr(config, name, value)


def assert_compiled(captures=1):
    """Proves the compiled path ran: `captures` frames were captured, and
    each one lowered and compiled (a capture is counted before lowering; a
    graph is listed by compiled_graphs() only once its kernels are built),
    with no graph break and no compile failure."""
    stats = dynafuse.stats()
    assert stats["captures"] == captures, stats
    assert stats["graph_breaks"] == 0 and stats["compile_failures"] == 0, stats
    graphs = dynafuse.compiled_graphs()
    assert len(graphs) == captures, (stats, graphs)


def assert_close(actual, expected, **tolerances):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances)


def assert_outputs_close(actual, expected, where="output", **tolerances):
    """Compares nested results: tuples, lists and dicts of the same kind and
    length (nothing is silently truncated, as zip would), tensors with
    assert_close, anything else with ==."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), (where, type(actual))
        try:
            assert_close(actual, expected, **tolerances)
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}") from None
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), (where, type(actual), type(expected))
        assert isinstance(actual, list) == isinstance(expected, list), \
            (where, type(actual), type(expected))
        assert len(actual) == len(expected), (where, len(actual), len(expected))
        for index, (got, want) in enumerate(zip(actual, expected)):
            assert_outputs_close(got, want, f"{where}[{index}]", **tolerances)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), (where, actual)
        for key in expected:
            assert_outputs_close(actual[key], expected[key], f"{where}[{key!r}]", **tolerances)
    else:
        assert actual == expected, (where, actual, expected)


def compile_and_compare(model, x, **tolerances):
    """dynafuse.compile(model), its first inference call checked against
    eager's; returns the compiled callable."""
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        expected = model(x)
        actual = compiled(x)
    assert_close(actual, expected, **tolerances)
    return compiled


INPUT_LAYOUTS = ("channels_last", "sliced", "expanded_batch")


def input_in_layout(layout, channels, size=16):
    """An image batch [2 or 3, channels, size, size] laid out as `layout`:
    channels-last, a strided slice of a wider image, or one image expanded
    over the batch (batch stride 0)."""
    if layout == "channels_last":
        return torch.randn(2, channels, size, size).contiguous(
            memory_format=torch.channels_last)
    if layout == "sliced":
        return torch.randn(2, channels, size, 2 * size + 8)[:, :, :, 3:3 + 2 * size:2]
    return torch.randn(1, channels, size, size).expand(3, channels, size, size)


def infer_between_training_steps(model, compiled, x, steps=3, **tolerances):
    """Compiled inference calls against eager, with an eager SGD step (a
    new weight version, and new running statistics for batch norms)
    between each two."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model.eval()
        with torch.no_grad():
            assert_close(compiled(x), model(x), **tolerances)
        model.train()
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        assert_close(compiled(x), model(x), **tolerances)


def run_python(code, **environment):
    """Runs code in a fresh interpreter with only these DYNAFUSE_* variables
    (and no disk cache); returns the last line it printed."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "DYNAFUSE_DISK_CACHE": "0",
                                 **environment})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[-1]


def intel_cpu():
    try:
        with open("/proc/cpuinfo") as info:
            return "GenuineIntel" in info.read()
    except OSError:
        return False


def cpu_runs_onednn_matmul():
    """Whether ATen's mkldnn_matmul runs float32 on this CPU (its bf16
    device check: AVX-512 BW, VL and DQ, or AVX-NE-CONVERT; x86 only)."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = set(next((line.split(":", 1)[1].split() for line in info
                              if line.startswith("flags")), []))
    except OSError:
        return False
    return {"avx512bw", "avx512vl", "avx512dq"} <= flags or "avx_ne_convert" in flags


def default_gemm_library():
    """DYNAFUSE_GEMM_LIBRARY=auto's choice (TorchPackedGemms.cpp): MKL on
    Intel CPUs, oneDNN elsewhere, the other when ATen lacks one; None with
    neither."""
    mkl, onednn = torch.backends.mkl.is_available(), torch.backends.mkldnn.is_available()
    if (intel_cpu() and mkl) or not onednn:
        return "mkl" if mkl else None
    return "onednn"


#: The library this process's inference matrix products run through.
GEMM_LIBRARY = default_gemm_library()


def linear_routed(rows, library=GEMM_LIBRARY, weight_elements=512 * 1024):
    """Whether the library runs an inference linear layer of this many rows
    (MKL's packed sgemm 4..1024, oneDNN 2 and up, and 1 for a weight of
    2^18 elements or more)."""
    if library is None:
        return False
    if library == "mkl":
        return 4 <= rows <= 1024
    return rows >= 2 or (rows == 1 and weight_elements >= 2 ** 18)


def linear_packed(rows, library=GEMM_LIBRARY, weight_elements=512 * 1024):
    """Whether it keeps a packed copy of the weight for them (up to 1024)."""
    return linear_routed(rows, library, weight_elements) and rows <= 1024


def randomize_batch_norm(model):
    """Random running statistics, so eval-mode batch norm is not identity."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model


# Per-OpInfo coverage, filled by test_opinfo.py: name -> {outcome: count};
# printed at the end of the session.
OPINFO_COVERAGE = {}
# The differential run of the OpInfo samples (test_opinfo.py): backends ->
# how many samples compiled with every one of them and agreed.
OPINFO_DIFFERENTIAL = {}


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    if OPINFO_DIFFERENTIAL:
        terminalreporter.section("OpInfo differential")
    for backends, count in sorted(OPINFO_DIFFERENTIAL.items()):
        write(f"{count} OpInfo samples compiled by {', '.join(backends)} and agreed")
    if not OPINFO_COVERAGE:
        return
    terminalreporter.section("OpInfo coverage (samples per outcome)")
    columns = ("compiled", "eager", "rejected", "failed")
    write(f"{'op':<44}" + "".join(f"{c:>10}" for c in columns))
    totals = dict.fromkeys(columns, 0)
    for name in sorted(OPINFO_COVERAGE):
        counts = OPINFO_COVERAGE[name]
        write(f"{name:<44}" + "".join(f"{counts.get(c, 0):>10}" for c in columns))
        for column in columns:
            totals[column] += counts.get(column, 0)
    write(f"{'total':<44}" + "".join(f"{totals[c]:>10}" for c in columns))
    write("compiled: captured, compiled and matched eager; eager: not captured "
          "(a graph break before any graph), ran eagerly and matched; rejected: "
          "eager itself raises on the sample; failed: a failure (the strict xfails of known "
          "compiler bugs among them)")
