"""A decode step's linear layers (decision 145): one row times a weight,
the weights cycled through more memory than the last-level cache holds
(as a decoder's are, layer after layer, step after step), eager
`F.linear` against Dynafuse (the matrix-vector-products pass: a fused
reduction) and torch.compile, in one process. Each row: microseconds per
product (median over --runs passes of the weight cycle, with the spread),
and the weight's bytes over that time against the machine's triad
bandwidth.

    .venv/bin/python benchmarks/decode_products.py [--runs 7] [--no-inductor]
        [--markdown FILE]
"""
import argparse
import os
import statistics
import sys
import time

# Weights are arguments here, a different one each call: no packed copy
# (in a model, weights of 2^18 elements and more keep oneDNN's packed copy
# and skip the pass), so every size runs the reduction.
os.environ["DYNAFUSE_PREPACK_WEIGHTS"] = "0"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dynafuse  # noqa: E402
from measure import MarkdownTable, spread, triad_gbs  # noqa: E402

# out x in, as nn.Linear stores them: a small decoder's q/o, k/v, gate/up
# and down projections, a base one's, and an lm head.
SHAPES = [(256, 256), (128, 256), (768, 256), (256, 768), (2048, 768),
          (768, 2048), (8000, 256)]
CYCLE_BYTES = 96 << 20


def linear(x, w):
    return F.linear(x, w)


def time_cycle(fn, x, weights, runs):
    for w in weights[:3]:
        fn(x, w)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for w in weights:
            fn(x, w)
        samples.append((time.perf_counter() - start) / len(weights) * 1e6)
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    bandwidth = triad_gbs(10)
    print(f"bandwidth (triad): {bandwidth:.1f} GB/s, threads {torch.get_num_threads()}")
    table = MarkdownTable("| weight (out x in) | how | us per product | GB/s | of triad |")
    torch.manual_seed(0)
    for out_features, in_features in SHAPES:
        count = max(4, CYCLE_BYTES // (out_features * in_features * 4))
        weights = [torch.randn(out_features, in_features) for _ in range(count)]
        x = torch.randn(1, 1, in_features)
        compilers = [("eager", linear), ("dynafuse", dynafuse.compile(linear))]
        if not args.no_inductor:
            compilers.append(("torch.compile", torch.compile(linear, dynamic=False)))
        expected = linear(x, weights[0])
        with torch.no_grad():
            for how, fn in compilers:
                torch.testing.assert_close(fn(x, weights[0]), expected,
                                           rtol=1e-4, atol=1e-4)
                samples = time_cycle(fn, x, weights, args.runs)
                us = statistics.median(samples)
                gbs = out_features * in_features * 4 / us / 1e3
                table.add(f"| {out_features} x {in_features} | {how} | {us:.1f} "
                          f"(±{spread(samples) * 100:.0f}%) | {gbs:.1f} | "
                          f"{gbs / bandwidth * 100:.0f}% |")
    table.append_to(args.markdown, f"one row, weights cycled through {CYCLE_BYTES >> 20} "
                    f"MB, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    sys.exit(main())
