"""The two ways a packed convolution can run (decision 136): oneDNN's
packed weight (mkldnn::_convolution_pointwise, what a prepacked conv2d
step runs) against at::conv2d (torch.conv2d, which reorders the weight on
every call), per shape, in NCHW and channels-last, and the same layer
compiled by Dynafuse (which times both on its first calls and keeps the
faster) beside eager, in one process.

Per shape: the median time over --runs rounds in which every version runs
once in turn, its spread (half the interquartile range over the median).
Neither path wins everywhere: this is what the measured choice is for.

    .venv/bin/python benchmarks/convolution_paths.py [--runs 20] [--threads 2]
"""
import argparse
import statistics
import time

import torch

import dynafuse
from measure import spread

SHAPES = [  # (title, input sizes, weight sizes, stride, padding, groups)
    ("mobilevit 1x1 64->128 at 128x128, b2", (2, 64, 128, 128), (128, 64, 1, 1), 1, 0, 1),
    ("1x1 32->64 at 128x128, b2", (2, 32, 128, 128), (64, 32, 1, 1), 1, 0, 1),
    ("1x1 16->32 at 256x256, b2", (2, 16, 256, 256), (32, 16, 1, 1), 1, 0, 1),
    ("depthwise 3x3 128 at 64x64, b2", (2, 128, 64, 64), (128, 1, 3, 3), 1, 1, 128),
    ("3x3 64->64 at 56x56, b2", (2, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ("1x1 256->512 at 14x14, b2", (2, 256, 14, 14), (512, 256, 1, 1), 1, 0, 1),
    ("3x3 96->192 at 32x32, b2", (2, 96, 32, 32), (192, 96, 3, 3), 1, 1, 1),
    ("VAE decoder 3x3 128->128 at 32x32, b1", (1, 128, 32, 32), (128, 128, 3, 3), 1, 1, 1),
    ("VAE decoder 3x3 128->128 at 64x64, b1", (1, 128, 64, 64), (128, 128, 3, 3), 1, 1, 1),
    ("VAE decoder 3x3 128->64 at 64x64, b1", (1, 128, 64, 64), (64, 128, 3, 3), 1, 1, 1),
    ("VAE decoder 3x3 64->64 at 64x64, b1", (1, 64, 64, 64), (64, 64, 3, 3), 1, 1, 1),
    ("VAE decoder 1x1 128->64 at 64x64, b1", (1, 128, 64, 64), (64, 128, 1, 1), 1, 0, 1),
]


class Convolution(torch.nn.Module):
    def __init__(self, weight, bias, stride, padding, groups):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = torch.nn.Parameter(bias, requires_grad=False)
        self.options = (stride, padding, 1, groups)

    def forward(self, x):
        return torch.conv2d(x, self.weight, self.bias, *self.options) + 1.0


def timed(versions, runs):
    samples = {name: [] for name in versions}
    for name, call in versions.items():  # warm: packing, the measured choice
        for _ in range(10):
            call()
    for _ in range(runs):
        for name, call in versions.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: (statistics.median(s) * 1e3, spread(s)) for name, s in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    print("| shape | layout | torch.conv2d ms | packed ms | packed / conv2d "
          "| eager layer ms | Dynafuse layer ms | eager / Dynafuse |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for title, sizes, weight_sizes, stride, padding, groups in SHAPES:
        weight, bias = torch.randn(weight_sizes), torch.randn(weight_sizes[0])
        packed = torch.ops.mkldnn._reorder_convolution_weight(
            weight, [padding] * 2, [stride] * 2, [1, 1], groups, list(sizes))
        layer = Convolution(weight, bias, stride, padding, groups).eval()
        compiled = dynafuse.compile(layer)
        for layout in ("nchw", "channels_last"):
            x = torch.randn(sizes)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad():
                result = timed({
                    "conv2d": lambda: torch.conv2d(x, weight, bias, stride, padding, 1, groups),
                    "packed": lambda: torch.ops.mkldnn._convolution_pointwise(
                        x, packed, bias, [padding] * 2, [stride] * 2, [1, 1], groups,
                        "none", [], None),
                    "eager": lambda: layer(x),
                    "dynafuse": lambda: compiled(x),
                }, options.runs)
            (conv, s1), (pack, s2) = result["conv2d"], result["packed"]
            (eager, s3), (ours, s4) = result["eager"], result["dynafuse"]
            print(f"| {title} | {layout} | {conv:.2f} ±{s1:.0%} | {pack:.2f} ±{s2:.0%} "
                  f"| {pack / conv:.2f} | {eager:.2f} ±{s3:.0%} | {ours:.2f} ±{s4:.0%} "
                  f"| {eager / ours:.2f}x |")
    print(f"\nconvolution choices made: {dynafuse.stats()['convolution_choices']}")


if __name__ == "__main__":
    main()
