"""The Dynafuse benchmark suite (issue 5): eager PyTorch, torch.compile
(Inductor, default mode, warmed up) and Dynafuse side by side in one
process, interleaved, median of --runs calls after warm-up, under
torch.no_grad(), every call returning a fresh output.

For the memory-bound workloads 1-4 it reports achieved bandwidth (ideal
traffic: inputs read once, output written once) as a fraction of a
STREAM-style triad (torch.add(b, c, alpha=s, out=a) on 64 MiB arrays)
measured in the same run; also Dynafuse's cold compile time and its warm
one (disk cache, in a new process), torch.compile's cold compile time
(empty Inductor caches),
and the per-call overhead on a
tiny input. Prints a table, writes JSON and a PNG chart.

    .venv/bin/python benchmarks/suite.py [--threads 2] [--runs 20] [--out DIR]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

THREADS_DEFAULT = 2

# torch.compile's compile time is reported cold: Inductor's on-disk caches
# (FX graph and kernel caches) start empty in a fresh folder per run, as
# Dynafuse's cold column starts with an empty object cache.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=THREADS_DEFAULT)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="benchmark-results")
    parser.add_argument("--only", default="", help="substring filter on workload names; several separated by |")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--max-autotune", action="store_true",
                        help="also torch.compile(mode='max-autotune-no-cudagraphs') "
                             "on workloads 5-7, where it differs from the default "
                             "(its GEMM/conv templates); slow to compile")
    parser.add_argument("--no-modules", action="store_true", help="skip workloads 5-7")
    parser.add_argument("--no-vision", action="store_true", help="skip workload 7")
    return parser.parse_args()


args = parse_args()
# Before torch starts its thread pool (Dynafuse's kernels run on torch's
# intra-op threads unless DYNAFUSE_NUM_THREADS is set).
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
cache_dir = tempfile.mkdtemp(prefix="dynafuse-bench-cache-")
os.environ["DYNAFUSE_CACHE_DIR"] = cache_dir

import torch  # noqa: E402

import dynafuse  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402
from measure import spread, triad_gbs  # noqa: E402,F401


def timed(fn, inputs):
    start = time.perf_counter()
    out = fn(*inputs)
    elapsed = time.perf_counter() - start
    del out
    return elapsed


WARM_SCRIPT = r"""
import sys, time, torch, dynafuse
sys.path.insert(0, sys.argv[1])
import workloads
torch.set_num_threads(int(sys.argv[3]))
torch.manual_seed(0)
vision = sys.argv[2].startswith("7")
found = [w for w in workloads.memory_bound() + workloads.modules(vision)
         if w.name == sys.argv[2]]
workload = found[0]
inputs = workload.make_inputs()
with torch.no_grad():
    workload.fn(*inputs)  # torch's own first-call costs are not ours
    compiled = dynafuse.compile(workload.fn)
    start = time.perf_counter()
    compiled(*inputs)
    print(time.perf_counter() - start)
"""


def warm_compile_in_new_process(workload, threads):
    """The first call of a new process whose disk cache holds the objects
    (the cold compile above filled it): capture, lowering, cache lookup and
    linking, and the first run. None when the script fails."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        result = subprocess.run(
            [sys.executable, "-c", WARM_SCRIPT, here, workload.name, str(threads)],
            capture_output=True, text=True, timeout=600, env=dict(os.environ))
        return float(result.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def dynafuse_compile_times(workload):
    """Cold compile in this process (empty object cache), then warm in a new
    process. Run for every workload before any torch.compile: Inductor's
    compile worker processes stay alive afterwards and slowed the new
    process's first call 3x."""
    torch.manual_seed(0)
    inputs = workload.make_inputs()
    row = {"name": workload.name, "module": workload.module}
    dynafuse.reset()
    before = dynafuse.stats()
    compiled = dynafuse.compile(workload.fn)
    row["dynafuse_cold_compile_s"] = timed(compiled, inputs)
    after = dynafuse.stats()
    row["dynafuse_captured"] = after.get("captures", 0) > before.get("captures", 0)
    if row["dynafuse_captured"]:
        row["dynafuse_warm_compile_s"] = warm_compile_in_new_process(
            workload, torch.get_num_threads())
    return row


def compile_with_inductor(workload, inputs, row, candidates, name, key, **options):
    """torch.compile(workload, **options), timed on its first call into
    row[key + "_compile_s"] and added to candidates as `name`; a failure is
    reported in row[key + "_error"]."""
    try:
        compiled = torch.compile(workload.fn, **options)
        row[f"{key}_compile_s"] = timed(compiled, inputs)
        candidates[name] = compiled
    except Exception as error:  # noqa: BLE001 - report and go on
        row[f"{key}_error"] = f"{type(error).__name__}: {error}"[:200]


def measure(workload, row, runs, warmup, use_inductor, max_autotune):
    torch.manual_seed(0)
    inputs = workload.make_inputs()
    candidates = {"eager": workload.fn}

    dynafuse.reset()
    compiled = dynafuse.compile(workload.fn)
    if row["dynafuse_captured"]:
        expected, ours = workload.fn(*inputs), compiled(*inputs)
        row["max_abs_error"] = (expected - ours).abs().max().item()
    candidates["dynafuse"] = compiled

    if use_inductor:
        compile_with_inductor(workload, inputs, row, candidates, "torch.compile",
                              "inductor")
    if use_inductor and max_autotune and workload.module:
        compile_with_inductor(workload, inputs, row, candidates, "max-autotune",
                              "inductor_max_autotune",
                              mode="max-autotune-no-cudagraphs")

    for fn in candidates.values():
        for _ in range(warmup):
            timed(fn, inputs)
    samples = {name: [] for name in candidates}
    for _ in range(runs):
        for name, fn in candidates.items():
            samples[name].append(timed(fn, inputs))
    for name, values in samples.items():
        row[f"{name}_ms"] = statistics.median(values) * 1e3
        row[f"{name}_spread"] = spread(values)
    if workload.ideal_bytes:
        for name in candidates:
            row[f"{name}_gbs"] = workload.ideal_bytes / (row[f"{name}_ms"] / 1e3) / 1e9


def call_overhead(runs):
    """Median time of a cached call on a 1x8 input (eager and Dynafuse)."""
    tiny = (torch.randn(1, 8), torch.randn(8), torch.randn(8))
    dynafuse.reset()
    compiled = dynafuse.compile(workloads.gelu_affine)
    compiled(*tiny)
    result = {}
    for name, fn in (("eager", workloads.gelu_affine), ("dynafuse", compiled)):
        for _ in range(100):
            fn(*tiny)
        times = []
        for _ in range(max(runs, 200)):
            times.append(timed(fn, tiny))
        result[name + "_us"] = statistics.median(times) * 1e6
    return result


def print_table(rows, triad, threads):
    print(f"\nf32, {threads} threads, triad {triad:.1f} GB/s; median ms "
          "(+-half IQR); 'bw' = achieved / triad bandwidth")
    header = (f"{'workload':36}{'eager':>14}{'torch.compile':>16}{'dynafuse':>14}"
              f"{'vs eager':>14}{'vs t.c':>12}{'bw':>6}  note")
    print(header)
    print("-" * len(header))
    for row in rows:
        def cell(name, width):
            if f"{name}_ms" not in row:
                return f"{'-':>{width}}"
            text = f"{row[name + '_ms']:.2f}+-{100 * row[name + '_spread']:.0f}%"
            return f"{text:>{width}}"
        ours = row["dynafuse_ms"]

        def ratio(name):
            # The spread of a ratio: the two medians' relative spreads added.
            if f"{name}_ms" not in row:
                return "-"
            spread = 100 * (row[f"{name}_spread"] + row["dynafuse_spread"])
            return f"{row[name + '_ms'] / ours:.2f}x+-{spread:.0f}%"
        vs_eager, vs_tc = ratio("eager"), ratio("torch.compile")
        bw = f"{row['dynafuse_gbs'] / triad:.0%}" if "dynafuse_gbs" in row else ""
        note = ""
        if "max-autotune_ms" in row:
            note = (f"max-autotune {cell('max-autotune', 0).strip()} "
                    f"({ratio('max-autotune')})")
        if not row["dynafuse_captured"]:
            note = "EAGER FALLBACK (module capture pending)" if row["module"] else "EAGER FALLBACK"
        print(f"{row['name']:36}{cell('eager', 14)}{cell('torch.compile', 16)}"
              f"{cell('dynafuse', 14)}{vs_eager:>14}{vs_tc:>12}{bw:>6}  {note}")
    print("\ncompile times (s), first call incl. its run: dynafuse cold / warm "
          "(disk cache, new process) / torch.compile cold")
    for row in rows:
        cold = row.get("dynafuse_cold_compile_s")
        warm = row.get("dynafuse_warm_compile_s")
        inductor = row.get("inductor_compile_s")
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        tuned = row.get("inductor_max_autotune_compile_s")
        extra = f"   (max-autotune {fmt(tuned)})" if tuned is not None else ""
        print(f"  {row['name']:36}{fmt(cold):>8}{fmt(warm):>8}{fmt(inductor):>8}{extra}")


def write_chart(rows, triad, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    names = [row["name"] for row in rows]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 2))
    height = 0.27
    for i, (name, color) in enumerate((("eager", "#999999"),
                                       ("torch.compile", "#4c72b0"),
                                       ("dynafuse", "#dd8452"))):
        speedups = [row["eager_ms"] / row[f"{name}_ms"] if f"{name}_ms" in row else 0
                    for row in rows]
        ax.barh([k + (i - 1) * height for k in range(len(rows))], speedups,
                height, label=name, color=color)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([n + ("  [eager fallback]" if not r["dynafuse_captured"] else "")
                        for n, r in zip(names, rows)], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel("speedup over eager (higher is better)")
    ax.set_title(f"Dynafuse benchmark suite, f32, {args.threads} threads "
                 f"(triad {triad:.1f} GB/s)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


def main():
    torch.set_num_threads(args.threads)
    selected = workloads.memory_bound()
    if not args.no_modules:
        selected += workloads.modules(include_vision=not args.no_vision)
    selected = [w for w in selected
                if any(part in w.name for part in args.only.split("|"))]
    rows = []
    with torch.no_grad():
        triad_before = triad_gbs(args.runs)
        for workload in selected:
            print(f"compiling {workload.name} ...", flush=True)
            rows.append(dynafuse_compile_times(workload))
        for workload, row in zip(selected, rows):
            print(f"measuring {workload.name} ...", flush=True)
            measure(workload, row, args.runs, args.warmup, not args.no_inductor,
                    args.max_autotune)
        triad = max(triad_before, triad_gbs(args.runs))
        overhead = call_overhead(args.runs)
    print_table(rows, triad, args.threads)
    print(f"\ncached-call overhead on a 1x8 gelu(x*w+b): eager "
          f"{overhead['eager_us']:.1f} us, dynafuse {overhead['dynafuse_us']:.1f} us")
    os.makedirs(args.out, exist_ok=True)
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "threads": args.threads,
                    "torch": torch.__version__, "python": platform.python_version()},
        "triad_gbs": triad,
        "call_overhead": overhead,
        "rows": rows,
    }
    with open(os.path.join(args.out, "results.json"), "w") as file:
        json.dump(result, file, indent=1)
    print(f"json: {os.path.join(args.out, 'results.json')}")
    write_chart(rows, triad, os.path.join(args.out, "results.png"))
    shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
