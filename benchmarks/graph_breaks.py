"""Graph-break benchmark (issue 13): functions with one break in the middle
(a data-dependent branch, .item(), a logging call), run side by side in one
process by eager PyTorch, Dynafuse (two graphs joined by a resume function)
and torch.compile (which splits them the same way), plus Dynafuse on each
half compiled as a function of its own ("halves": what the two graphs cost
without the break). Reports medians, speedups over eager with half the
interquartile range, and achieved bandwidth as a fraction of a triad's.

    .venv/bin/python benchmarks/graph_breaks.py [--runs 30] [--no-inductor]
"""
import argparse
import logging
import statistics
import sys
import time

import torch

import dynafuse

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from measure import spread, triad_gbs  # noqa: E402

logger = logging.getLogger("dynafuse.benchmarks.graph_breaks")


def first_half(x):
    y = torch.sigmoid(x) * 1.5 + torch.tanh(x)
    return y * y - x


def second_half(y, x, scale):
    z = torch.relu(y) * scale + torch.exp(-x * x)
    return z / (1.0 + z.abs())


def branch(x):
    y = first_half(x)
    if y.mean() > 0:  # data-dependent: a break, one resume function per side
        scale = 2.0
    else:
        scale = 0.5
    return second_half(y, x, scale)


def item(x):
    y = first_half(x)
    scale = y.amax().item()  # a Python float: a break
    return second_half(y, x, scale)


def logs(x):
    y = first_half(x)
    logger.debug("intermediate %s", tuple(y.shape))  # a call: a break
    return second_half(y, x, 2.0)


CASES = {"branch": branch, "item": item, "logging": logs}


def halves_of(name):
    """The same work without the break: two compiled functions and the
    Python in between (the comparison the issue's number is about)."""
    first = dynafuse.compile(first_half)
    second = dynafuse.compile(second_half)

    def run(x):
        y = first(x)
        if name == "branch":
            scale = 2.0 if y.mean() > 0 else 0.5
        elif name == "item":
            scale = y.amax().item()
        else:
            logger.debug("intermediate %s", tuple(y.shape))
            scale = 2.0
        return second(y, x, scale)

    return run


def time_interleaved(variants, x, runs, warmup=5):
    for fn in variants.values():
        for _ in range(warmup):
            fn(x)
    samples = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn(x)
            samples[name].append(time.perf_counter() - start)
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--numel", type=int, default=1 << 22)
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    triad = triad_gbs(20)
    print(f"triad bandwidth {triad:.1f} GB/s; {args.numel} float32 elements; "
          f"{torch.get_num_threads()} threads")
    print(f"{'case':10} {'eager ms':>9} {'dynafuse':>17} {'halves':>17} "
          f"{'inductor':>17} {'dyn/ind':>8} {'bw':>5} {'graphs':>6}")
    x = torch.randn(args.numel)
    # Minimal traffic: x read, y written and read back across the break, the
    # result written (4 passes of 4 bytes per element).
    ideal_bytes = 4 * 4 * args.numel
    with torch.no_grad():
        for name, fn in CASES.items():
            dynafuse.reset()
            variants = {"eager": fn, "dynafuse": dynafuse.compile(fn),
                        "halves": halves_of(name)}
            torch.testing.assert_close(variants["dynafuse"](x), fn(x))
            graphs = dynafuse.stats()["captures"]
            if not args.no_inductor:
                torch._dynamo.reset()
                variants["inductor"] = torch.compile(fn)
                torch.testing.assert_close(variants["inductor"](x), fn(x))
            samples = time_interleaved(variants, x, args.runs)
            eager = statistics.median(samples["eager"])

            def cell(variant):
                if variant not in samples:
                    return f"{'-':>17}"
                ratios = [e / v for e, v in zip(samples["eager"], samples[variant])]
                return (f"{statistics.median(samples[variant]) * 1e3:7.2f} "
                        f"{statistics.median(ratios):4.2f}x+-{spread(ratios) * 100:2.0f}%")

            ours = statistics.median(samples["dynafuse"])
            versus = (f"{statistics.median(samples['inductor']) / ours:7.2f}x"
                      if "inductor" in samples else f"{'-':>8}")
            bandwidth = ideal_bytes / ours / 1e9 / triad
            print(f"{name:10} {eager * 1e3:9.2f} {cell('dynafuse')} {cell('halves')} "
                  f"{cell('inductor')} {versus} {bandwidth:5.2f} {graphs:6}")
    print("dynafuse / halves / inductor: median ms, then speedup over eager "
          "(+- half IQR); dyn/ind: inductor time / dynafuse time; bw: ideal "
          "traffic / dynafuse time / triad bandwidth")


if __name__ == "__main__":
    main()
