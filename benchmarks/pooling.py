"""Max pooling on NCHW tensors (issues 16 and 18): eager PyTorch,
torch.compile and Dynafuse side by side in one process, for the pools of
resnet18 (training batch 8) and googlenet (batch 1), forward and, with
--backward, forward + backward.

Dynafuse runs ATen's pool as an extern, on a channels-last copy of an NCHW
input with 16 channels or more: ATen's NCHW CPU kernel is scalar, its NHWC
kernel vectorized over channels. Per shape: the median time over --runs
rounds in which every version runs once in turn, its spread (half the
interquartile range over the median) and the ratio to eager.

    .venv/bin/python benchmarks/pooling.py [--runs 30] [--backward] [--no-inductor]
"""
import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import dynafuse
from measure import spread

SHAPES = [  # (title, sizes, kernel, stride, padding, ceil_mode)
    ("resnet18 stem b8", (8, 64, 56, 56), 3, 2, 1, False),
    ("googlenet maxpool1 b1", (1, 64, 112, 112), 3, 2, 0, True),
    ("googlenet maxpool2 b1", (1, 192, 56, 56), 3, 2, 0, True),
    ("googlenet inception 4 branch b1", (1, 480, 28, 28), 3, 1, 1, True),
    ("googlenet maxpool4 b1", (1, 832, 14, 14), 2, 2, 0, True),
]


def pool_of(kernel, stride, padding, ceil_mode):
    def pool(x):
        return F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode)
    return pool


def timed(function, x, backward):
    start = time.perf_counter()
    y = function(x)
    if backward:
        y.sum().backward()
    return (time.perf_counter() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}; {torch.get_num_threads()} threads; "
          f"{'forward + backward' if args.backward else 'forward'}\n")
    print("| pool | compiler | ms (± spread) | vs eager |")
    print("| --- | --- | --- | --- |")
    for title, sizes, kernel, stride, padding, ceil_mode in SHAPES:
        x = torch.randn(*sizes, requires_grad=args.backward)
        eager = pool_of(kernel, stride, padding, ceil_mode)
        versions = {"eager": eager, "dynafuse": dynafuse.compile(eager)}
        if not args.no_inductor:
            versions["torch.compile"] = torch.compile(pool_of(kernel, stride, padding, ceil_mode))
        for function in versions.values():  # compile and warm
            for _ in range(3):
                timed(function, x, args.backward)
        samples = {name: [] for name in versions}
        for _ in range(args.runs):
            for name, function in versions.items():
                samples[name].append(timed(function, x, args.backward))
        eager_ms = statistics.median(samples["eager"])
        for name, values in samples.items():
            median = statistics.median(values)
            print(f"| {title} {list(sizes)} k{kernel} s{stride} | {name} | "
                  f"{median:.3f} ± {spread(values):.0%} | {eager_ms / median:.2f}x |",
                  flush=True)
        dynafuse.reset()


if __name__ == "__main__":
    main()
