"""The "mlir" backend against the "llvm" backend on the memory-bound rows of
the benchmark suite (workloads 1-4 of benchmarks/workloads.py), in one
process, f32, under torch.no_grad().

The mlir backend exports Dynafuse's loop-IR kernels to MLIR
(func/scf/memref/arith/math) and compiles them with MLIR's own lowering
passes and ExecutionEngine; the llvm backend emits LLVM IR directly.

Per workload:

- compile, cold: dynafuse.reset(), then the first call of
  dynafuse.compile(fn, backend=B)(*inputs), which captures, lowers,
  compiles and runs once (ms, the call as a whole). The on-disk kernel cache
  is off (DYNAFUSE_DISK_CACHE=0, set before dynafuse is imported), so every
  compile is cold for both backends; median of --compile-runs repeats, the
  backends alternating, after one eager call (torch's own first-call costs).
- run: eager PyTorch, llvm and mlir, median ms over --runs rounds in which
  every version runs once in turn, the order rotating from round to round,
  after --warmup calls each; the spread is half the interquartile range
  over the median. mlir/llvm is the median of the per-round ratios of the
  two run times (above 1: mlir slower), with its spread.
- bandwidth: the workload's ideal traffic (inputs read once, output
  written once) over the median time, as a fraction of a STREAM-style triad
  (benchmarks/measure.py) measured in the same run.
- checks: both backends' outputs match eager (rtol = atol = 1e-3), each
  compile captured a graph and handed it to its code generator
  (stats: captures >= 1, backend_compiles >= 1, no compile_failures, no
  disk_cache_hits; compiled_graphs() not empty), and the timed calls ran
  compiled (no run_failures, cache_hits grew).

    .venv/bin/python benchmarks/mlir_backend.py [--runs 10] [--warmup 2]
        [--compile-runs 3] [--threads 2] [--only SUBSTRING|...] [--markdown FILE]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

# Cold compiles for both backends: the llvm backend's on-disk object cache
# off (lib/Support/Options.cpp reads it once, when dynafuse is imported).
os.environ["DYNAFUSE_DISK_CACHE"] = "0"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="timed rounds per workload")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per version")
    parser.add_argument("--compile-runs", type=int, default=3,
                        help="cold compiles per backend and workload (median reported)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="",
                        help="substring filter on workload names; several separated by |")
    parser.add_argument("--markdown", help="also write the table as markdown to FILE")
    return parser.parse_args()


args = parse_args()
# Before torch starts its thread pool (Dynafuse's kernels run on torch's
# intra-op threads unless DYNAFUSE_NUM_THREADS is set).
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402

import dynafuse  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402
from measure import spread, triad_gbs  # noqa: E402

BACKENDS = ("llvm", "mlir")
VERSIONS = ("eager",) + BACKENDS


def timed(fn, inputs):
    start = time.perf_counter()
    out = fn(*inputs)
    elapsed = time.perf_counter() - start
    del out
    return elapsed


def cold_compile(workload, inputs, backend):
    """One cold first call of dynafuse.compile(fn, backend=backend): seconds,
    or an error string when the compiled path did not run."""
    dynafuse.reset()
    compiled = dynafuse.compile(workload.fn, backend=backend)
    try:
        seconds = timed(compiled, inputs)
    except Exception as error:  # noqa: BLE001 - report and go on
        return f"{type(error).__name__}: {error}"
    problem = compiled_path_problem(dynafuse.stats(), dynafuse.compiled_graphs())
    return problem or seconds


def compiled_path_problem(stats, graphs, disk_hits_allowed=False):
    if stats.get("compile_failures", 0):
        return f"compile_failures={stats['compile_failures']}"
    if stats.get("run_failures", 0):
        return f"run_failures={stats['run_failures']}"
    if stats.get("captures", 0) < 1 or not graphs:
        return f"no capture (captures={stats.get('captures')}, graphs={len(graphs)})"
    if stats.get("backend_compiles", 0) < 1:
        return "no backend compile"
    if stats.get("disk_cache_hits", 0) and not disk_hits_allowed:
        return f"not cold: disk_cache_hits={stats['disk_cache_hits']}"
    return None


def compile_times(workload, inputs, repeats):
    """Median cold first-call seconds per backend (or an error string),
    the backends alternating so neither always goes first."""
    samples = {backend: [] for backend in BACKENDS}
    errors = {}
    for repeat in range(repeats):
        order = BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]
        for backend in order:
            if backend in errors:
                continue
            result = cold_compile(workload, inputs, backend)
            if isinstance(result, str):
                errors[backend] = result
            else:
                samples[backend].append(result)
    return {backend: errors.get(backend) or statistics.median(samples[backend])
            for backend in BACKENDS}


def interleaved(calls, runs, warmup):
    """Per round, each call once in turn, the order rotating from round to
    round (a call right after another that read the same input finds part
    of it in cache): seconds per call, per round."""
    for call in calls:
        for _ in range(warmup):
            call()
    times = [[] for _ in calls]
    for round_ in range(runs):
        for step in range(len(calls)):
            k = (round_ + step) % len(calls)
            start = time.perf_counter()
            out = calls[k]()
            times[k].append(time.perf_counter() - start)
            del out
    return times


def run_times(workload, inputs, row, runs, warmup):
    """Compiles every backend that compiled cold above (both live at once:
    Dynafuse keeps one entry per backend), checks them against eager, and
    times eager, llvm and mlir interleaved."""
    dynafuse.reset()
    versions = {"eager": workload.fn}
    with torch.no_grad():
        expected = workload.fn(*inputs)
    for backend in BACKENDS:
        if isinstance(row["compile"][backend], str):
            continue
        compiled = dynafuse.compile(workload.fn, backend=backend)
        try:
            got = compiled(*inputs)
            torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
            row["check"][backend] = "ok"
        except AssertionError as error:
            first = str(error).strip().splitlines()
            row["check"][backend] = "MISMATCH: " + " ".join(first[:3])
        except Exception as error:  # noqa: BLE001 - report and go on
            row["check"][backend] = f"{type(error).__name__}: {error}"
            continue
        versions[backend] = compiled
    before = dynafuse.stats()
    names = list(versions)
    times = interleaved([lambda fn=versions[n]: fn(*inputs) for n in names], runs, warmup)
    after = dynafuse.stats()
    problem = compiled_path_problem(after, dynafuse.compiled_graphs())
    compiled_calls = (len(names) - 1) * (warmup + runs)
    if problem is None and after["cache_hits"] - before["cache_hits"] < compiled_calls:
        problem = (f"cache_hits grew by {after['cache_hits'] - before['cache_hits']}, "
                   f"expected {compiled_calls}")
    if problem:
        row["timing_problem"] = problem
    for name, samples in zip(names, times):
        row["ms"][name] = statistics.median(samples) * 1e3
        row["spread"][name] = spread(samples)
    if "llvm" in versions and "mlir" in versions:
        ratios = [m / l for m, l in zip(times[names.index("mlir")], times[names.index("llvm")])]
        row["ratio"] = (statistics.median(ratios), spread(ratios))


def measure(workload, args):
    torch.manual_seed(0)
    inputs = workload.make_inputs()
    row = {"name": workload.name, "ideal_bytes": workload.ideal_bytes, "ms": {},
           "spread": {}, "check": {}}
    with torch.no_grad():
        workload.fn(*inputs)  # torch's own first-call costs are not ours
        row["compile"] = compile_times(workload, inputs, args.compile_runs)
        run_times(workload, inputs, row, args.runs, args.warmup)
    dynafuse.reset()
    return row


COLUMNS = ["workload", "compile llvm ms", "compile mlir ms", "-run llvm", "-run mlir",
           "eager ms", "llvm ms",
           "mlir ms", "mlir/llvm", "bw eager", "bw llvm", "bw mlir", "check"]


def cells(row, triad):
    def compile_cell(backend):
        value = row["compile"][backend]
        return "ERROR" if isinstance(value, str) else f"{value * 1e3:.0f}"

    def compile_only_cell(backend):
        # The first call less one steady run: compile (capture, lowering,
        # code generation) alone, estimated.
        value = row["compile"][backend]
        if isinstance(value, str) or backend not in row["ms"]:
            return "-"
        return f"{value * 1e3 - row['ms'][backend]:.0f}"

    def run_cell(name):
        if name not in row["ms"]:
            return "-"
        return f"{row['ms'][name]:.2f} ±{row['spread'][name]:.0%}"

    def bw_cell(name):
        if name not in row["ms"] or not row["ideal_bytes"]:
            return "-"
        gbs = row["ideal_bytes"] / (row["ms"][name] / 1e3) / 1e9
        return f"{gbs:.1f} ({gbs / triad:.0%})"

    ratio = row.get("ratio")
    ratio_cell = f"{ratio[0]:.2f}x ±{ratio[1]:.0%}" if ratio else "-"
    checks = [f"{b}: {row['check'].get(b) or row['compile'][b]}" for b in BACKENDS
              if row["check"].get(b) != "ok"]
    if "timing_problem" in row:
        checks.append("timing: " + row["timing_problem"])
    check = "ok" if not checks else "; ".join(checks)
    return [row["name"], compile_cell("llvm"), compile_cell("mlir"),
            compile_only_cell("llvm"), compile_only_cell("mlir"), run_cell("eager"),
            run_cell("llvm"), run_cell("mlir"), ratio_cell, bw_cell("eager"),
            bw_cell("llvm"), bw_cell("mlir"), check]


def plain_table(rows, triad):
    table = [COLUMNS] + [cells(row, triad) for row in rows]
    # The last column (check) is free text: not padded.
    widths = [max(len(line[k]) for line in table) for k in range(len(COLUMNS) - 1)]
    lines = []
    for i, line in enumerate(table):
        text = line[0].ljust(widths[0]) + "".join(
            "  " + cell.rjust(width) for cell, width in zip(line[1:-1], widths[1:]))
        lines.append(text + "  " + line[-1])
        if i == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def markdown_table(rows, triad):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(row, triad)) + " |" for row in rows]
    return "\n".join(lines)


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    selected = [w for w in workloads.memory_bound()
                if any(part in w.name for part in args.only.split("|"))]
    start = time.perf_counter()
    with torch.no_grad():
        triad_before = triad_gbs(20)
    rows = []
    for workload in selected:
        print(f"{workload.name} ...", flush=True)
        rows.append(measure(workload, args))
    with torch.no_grad():
        triad = max(triad_before, triad_gbs(20))
    title = (f"mlir vs llvm backend: f32, {torch.get_num_threads()} threads, torch "
             f"{torch.__version__}, triad {triad:.1f} GB/s, disk cache off\n"
             f"compile: cold first call incl. its run, median of {args.compile_runs}; "
             f"-run: the same less the median run (compile alone, estimated)\n"
             f"run: median of {args.runs} interleaved rounds ±half IQR; "
             f"mlir/llvm: per-round ratio (>1: mlir slower); "
             f"bw: GB/s of ideal traffic (fraction of triad)")
    print()
    print(title)
    print(plain_table(rows, triad))
    errors = [(row["name"], b, row["compile"][b]) for row in rows for b in BACKENDS
              if isinstance(row["compile"][b], str)]
    for name, backend, message in errors:
        print(f"\n{backend} failed on {name}: {message}")
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(title.replace("\n", "  \n") + "\n\n" + markdown_table(rows, triad) + "\n")
        print(f"markdown: {args.markdown}")


if __name__ == "__main__":
    main()
