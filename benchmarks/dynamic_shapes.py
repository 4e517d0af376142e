"""Dynamic shapes (issue 15): one compiled graph for every size, against
static graphs compiled per size and torch.compile's automatic dynamic shapes,
in one process.

Three workloads, each called with 8 sizes and then with the same sizes again:
a GPT-2-style model (4 blocks, width 256; benchmarks/handwritten_blocks.py)
over sequence lengths, an MLP (LayerNorm, Linear 512->2048, GELU, Linear back)
over batch sizes, and a pointwise/normalization chain (x*a+b, layer_norm,
relu, *w+c over rows of 1024) over row counts.

Per workload and compiler (Dynafuse's default dynamic=None, torch.compile's
default): the first pass over all sizes (captures, compiles and runs, in
seconds), the captures and code-generator compiles it took, and whether the
second pass took any more. Then, per size, the speed of Dynafuse's symbolic
graph against a static Dynafuse graph compiled for that size, and eager's and
Inductor's time against it: medians over --runs rounds in which every version
runs once in turn (so a noisy stretch of the machine hits all of them), with
the spread (half the interquartile range over the median). The chain's rows
also give the symbolic graph's bandwidth as a fraction of the machine's
(triad) bandwidth.

    .venv/bin/python benchmarks/dynamic_shapes.py [--runs 20] [--no-inductor]
        [--only gpt2 mlp chain] [--no-suite] [--no-disk-cache] [--markdown FILE]

Last, the memory-bound rows of benchmarks/suite.py run with every dim
symbolic (dynamic=True) beside their static graphs.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

if "--no-disk-cache" in sys.argv:
    os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import dynafuse  # noqa: E402
import handwritten_blocks  # noqa: E402
import workloads  # noqa: E402
from measure import spread, triad_gbs  # noqa: E402


def gpt2_workload():
    handwritten_blocks.SEQUENCE = 1024
    model = handwritten_blocks.GPT2StyleModel().eval()
    sizes = [17, 31, 64, 97, 128, 200, 256, 512]
    return model, sizes, lambda t: (torch.randn(1, t, handwritten_blocks.WIDTH),), None


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(512)
        self.up, self.down = nn.Linear(512, 2048), nn.Linear(2048, 512)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def mlp_workload():
    sizes = [3, 8, 17, 32, 61, 128, 250, 512]
    return MLP().eval(), sizes, lambda b: (torch.randn(b, 512),), None


class NormChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(1024)), nn.Parameter(torch.randn(1024))

    def forward(self, x):
        y = F.layer_norm(x * 1.5 + 0.25, (1024,))
        return torch.relu(y) * self.weight + self.bias


def chain_workload():
    sizes = [1000, 2003, 3001, 4096, 5003, 6007, 7919, 8192]
    # Bytes a fused kernel must move: read x, write the result.
    return NormChain().eval(), sizes, lambda r: (torch.randn(r, 1024),), \
        lambda r: 2 * r * 1024 * 4


WORKLOADS = {"gpt2": gpt2_workload, "mlp": mlp_workload, "chain": chain_workload}


def first_pass(compiled, sizes, make_inputs, counters):
    """Calls compiled on every size, then again: the first pass's seconds and
    counts, and whether the second pass added any."""
    inputs = {size: make_inputs(size) for size in sizes}
    start = time.perf_counter()
    for size in sizes:
        compiled(*inputs[size])
    seconds = time.perf_counter() - start
    counts = counters()
    for size in sizes:
        compiled(*inputs[size])
    return seconds, counts, counters() != counts


def dynafuse_counters():
    stats = dynafuse.stats()
    return (stats["captures"], stats["backend_compiles"])


def inductor_counters():
    from torch._dynamo.utils import counters
    return (counters["stats"]["unique_graphs"], counters["stats"]["unique_graphs"])


def timed(call):
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def interleaved(calls, runs):
    """Per round, each call in turn, the order rotating from round to round
    (a call right after another that read the same input finds it in
    cache): seconds per call, per round. A sample repeats a call that takes
    under 5 ms enough times to last that long (timer and scheduler noise)."""
    for call in calls:
        call()
    repeats = [max(1, int(5e-3 / max(timed(call), 1e-6))) for call in calls]

    def sample(k):
        start = time.perf_counter()
        for _ in range(repeats[k]):
            calls[k]()
        return (time.perf_counter() - start) / repeats[k]

    times = [[] for _ in calls]
    for round in range(runs):
        for step in range(len(calls)):
            k = (round + step) % len(calls)
            times[k].append(sample(k))
    return times


def ratio(numerator, denominator):
    """Median and spread of numerator[i] / denominator[i] over rounds."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    return statistics.median(ratios), spread(ratios)


def run_workload(name, args, triad):
    model, sizes, make_inputs, bytes_moved = WORKLOADS[name]()
    rows, summary = [], {"workload": name}
    with torch.no_grad():
        dynafuse.reset()
        symbolic = dynafuse.compile(model)
        seconds, counts, more = first_pass(symbolic, sizes, make_inputs, dynafuse_counters)
        summary.update(first=seconds, captures=counts[0], compiles=counts[1],
                       recaptured=more)
        symbolic_captures = dynafuse.stats()["symbolic_captures"]
        inductor = None
        if args.inductor:
            from torch import _dynamo
            _dynamo.reset()
            inductor = torch.compile(model)
            seconds, counts, more = first_pass(inductor, sizes, make_inputs,
                                               inductor_counters)
            summary.update(tc_first=seconds, tc_graphs=counts[0], tc_recaptured=more)
        print(f"{name}: first pass over {len(sizes)} sizes: Dynafuse {summary['first']:.1f} s "
              f"({summary['captures']} captures, {summary['compiles']} compiles, "
              f"{symbolic_captures} symbolic)"
              + (f", Inductor {summary['tc_first']:.1f} s ({summary['tc_graphs']} graphs)"
                 if inductor is not None else ""), flush=True)
        # Past the first size: that one ran the first, static, capture.
        for size in sizes[1::2] if name != "chain" else sizes[1::3]:
            inputs = make_inputs(size)
            expected = model(*inputs)
            got = symbolic(*inputs)
            correct = torch.allclose(got, expected, rtol=1e-3, atol=1e-3)
            static = dynafuse.compile(model, dynamic=False)
            static(*inputs)
            calls = [lambda: model(*inputs), lambda: symbolic(*inputs),
                     lambda: static(*inputs)]
            if inductor is not None:
                calls.append(lambda: inductor(*inputs))
            times = interleaved(calls, args.runs)
            row = {"size": size, "correct": correct,
                   "vs_static": ratio(times[2], times[1]),
                   "vs_eager": ratio(times[0], times[1]),
                   "symbolic_ms": statistics.median(times[1]) * 1e3}
            if inductor is not None:
                row["tc_vs_eager"] = ratio(times[0], times[3])
                row["vs_tc"] = ratio(times[3], times[1])
            if bytes_moved:
                row["bandwidth"] = bytes_moved(size) / statistics.median(times[1]) / 1e9 / triad
            rows.append(row)
            print(format_row(name, row, inductor is not None), flush=True)
    return summary, rows


def suite_rows(args, triad):
    """The memory-bound rows of benchmarks/suite.py (workloads 1-4) with
    every dim symbolic (dynamic=True) against their static graphs: bandwidth
    as a fraction of the triad, and the symbolic graph's speed over the
    static one's."""
    lines = ["", "| suite workload (dynamic=True) | static bw | symbolic bw "
             "| symbolic vs static | symbolic captures |", "|---|---|---|---|---|"]
    with torch.no_grad():
        for workload in workloads.memory_bound():
            torch.manual_seed(0)
            inputs = workload.make_inputs()
            # The symbolic graph first: a dynamic=True call would also run a
            # static graph whose guards hold; dynamic=False never runs a
            # symbolic one.
            dynafuse.reset()
            symbolic = dynafuse.compile(workload.fn, dynamic=True)
            got = symbolic(*inputs)
            symbolic_captures = dynafuse.stats()["symbolic_captures"]
            static = dynafuse.compile(workload.fn, dynamic=False)
            static(*inputs)
            assert torch.allclose(got, workload.fn(*inputs), rtol=1e-3, atol=1e-3)
            times = interleaved([lambda: static(*inputs), lambda: symbolic(*inputs)],
                                args.runs)
            bandwidth = [workload.ideal_bytes / statistics.median(t) / 1e9 / triad
                         for t in times]
            vs = ratio(times[0], times[1])
            line = (f"| {workload.name} | {bandwidth[0]:.0%} | {bandwidth[1]:.0%} "
                    f"| {vs[0]:.2f}x ±{vs[1]:.0%} | {symbolic_captures} |")
            print(line, flush=True)
            lines.append(line)
    return lines


def format_row(name, row, inductor):
    text = (f"| {name} | {row['size']} | {'yes' if row['correct'] else 'NO'} "
            f"| {row['symbolic_ms']:.3f} | {row['vs_static'][0]:.2f}x ±{row['vs_static'][1]:.0%} "
            f"| {row['vs_eager'][0]:.2f}x ±{row['vs_eager'][1]:.0%} |")
    if inductor:
        text += (f" {row['tc_vs_eager'][0]:.2f}x ±{row['tc_vs_eager'][1]:.0%} "
                 f"| {row['vs_tc'][0]:.2f}x ±{row['vs_tc'][1]:.0%} |")
    text += f" {row['bandwidth']:.0%} |" if "bandwidth" in row else " |"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-inductor", dest="inductor", action="store_false")
    parser.add_argument("--no-disk-cache", action="store_true")
    parser.add_argument("--no-suite", dest="suite", action="store_false",
                        help="skip the memory-bound suite rows with symbolic sizes")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    triad = triad_gbs(20)
    print(f"triad bandwidth {triad:.1f} GB/s")
    header = ("| workload | size | correct | symbolic (ms) | symbolic vs static "
              "| symbolic vs eager |"
              + (" Inductor dynamic vs eager | symbolic vs Inductor |" if args.inductor else "")
              + " bandwidth |")
    rule = "|---|---|---|---|---|---|" + ("---|---|" if args.inductor else "") + "---|"
    summaries, lines = [], [header, rule]
    for name in args.only or list(WORKLOADS):
        summary, rows = run_workload(name, args, triad)
        summaries.append(summary)
        lines += [format_row(name, row, args.inductor) for row in rows]
    first = ["", "| workload | Dynafuse first pass (s) | captures | compiles | second pass added "
             + ("| Inductor first pass (s) | Inductor graphs | Inductor second pass added |"
                if args.inductor else "|"),
             "|---|---|---|---|---|" + ("---|---|---|" if args.inductor else "")]
    for s in summaries:
        line = (f"| {s['workload']} | {s['first']:.1f} | {s['captures']} | {s['compiles']} "
                f"| {'yes' if s['recaptured'] else 'no'} |")
        if args.inductor:
            line += (f" {s['tc_first']:.1f} | {s['tc_graphs']} "
                     f"| {'yes' if s['tc_recaptured'] else 'no'} |")
        first.append(line)
    if args.suite:
        first += suite_rows(args, triad)
    text = "\n".join(lines + first) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
