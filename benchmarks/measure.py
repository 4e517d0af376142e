"""Measurements the benchmarks share: the machine's bandwidth (a triad, as
the reference for memory-bound kernels), the spread of a set of samples, and
a table's rows printed as they come and appended to a markdown file."""
import statistics
import time

import torch


def triad_gbs(runs):
    n = 16 * 1024 * 1024
    a, b, c = torch.empty(n), torch.randn(n), torch.randn(n)
    for _ in range(3):
        torch.add(b, c, alpha=3.0, out=a)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        times.append(time.perf_counter() - start)
    return 3 * n * 4 / statistics.median(times) / 1e9


def spread(samples):
    """Half the interquartile range, relative to the median."""
    q = statistics.quantiles(samples, n=4)
    return (q[2] - q[0]) / 2 / statistics.median(samples)


class MarkdownTable:
    """Rows printed as they are measured, and kept to append to a file."""

    def __init__(self, header):
        columns = header.count("|") - 1
        self.lines = [header, "|" + "---|" * columns]
        print(header, flush=True)

    def add(self, line):
        self.lines.append(line)
        print(line, flush=True)

    def append_to(self, path, preamble):
        if path:
            with open(path, "a") as out:
                out.write(f"\n{preamble}\n\n" + "\n".join(self.lines) + "\n")
