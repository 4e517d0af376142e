"""Capture benchmarks (issue 3): time to capture and compile real models on
the first call, and the overhead of a cached call, each next to eager and
(optionally, it takes minutes on 2 cores) torch.compile measured in the same
process.

    .venv/bin/python benchmarks/capture.py [--inductor] [--no-disk-cache]
"""
import argparse
import os
import statistics
import tempfile
import time

import sys

# Dynafuse reads its settings once, at import: a cold run's empty cache
# folder must be set before.
if "--no-disk-cache" in sys.argv:
    os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")

import torch
import torch.nn as nn

import dynafuse


def first_call_seconds(compiled, *args):
    start = time.perf_counter()
    compiled(*args)
    return time.perf_counter() - start


def per_call_microseconds(fn, *args, calls=20000):
    for _ in range(200):
        fn(*args)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn(*args)
        samples.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(samples)


class SelfAttention(nn.Module):
    """nn.MultiheadAttention called as self-attention (q is k is v)."""

    def __init__(self, width, heads):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def models(selected=None):
    import torchvision
    torch.manual_seed(0)
    table = [
        ("resnet18", lambda: torchvision.models.resnet18().eval(), (1, 3, 224, 224)),
        ("mobilenet_v2", lambda: torchvision.models.mobilenet_v2().eval(), (1, 3, 224, 224)),
        ("vit_b_16", lambda: torchvision.models.vit_b_16().eval(), (1, 3, 224, 224)),
        ("TransformerEncoderLayer", lambda: nn.TransformerEncoderLayer(
            512, 8, 2048, batch_first=True).eval(), (8, 128, 512)),
        ("MultiheadAttention", lambda: SelfAttention(512, 8).eval(), (8, 128, 512)),
        ("MLP 1024-4096-1024", lambda: nn.Sequential(nn.Linear(1024, 4096), nn.GELU(),
                                                     nn.Linear(4096, 1024)).eval(), (512, 1024)),
    ]
    return [(name, make(), torch.randn(shape)) for name, make, shape in table
            if not selected or name in selected]


def overhead_rows(inductor):
    """Per-call time of tiny inputs, where guards and dispatch dominate."""
    torch.manual_seed(0)
    tiny = lambda t: t + 1  # noqa: E731 - the tiny function is the point
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    cases = [("x + 1 (4 elements)", tiny, torch.randn(4)),
             ("TransformerEncoderLayer d=16, 2 tokens", layer, torch.randn(1, 2, 16))]
    for label, fn, x in cases:
        rows = [("eager", fn), ("dynafuse", dynafuse.compile(fn))]
        if inductor:
            rows.append(("torch.compile", torch.compile(fn)))
        yield label, [(name, per_call_microseconds(f, x, calls=2000 if fn is layer else 20000))
                      for name, f in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inductor", action="store_true",
                        help="also time torch.compile's first call (minutes on 2 cores)")
    parser.add_argument("--no-disk-cache", action="store_true",
                        help="point DYNAFUSE_CACHE_DIR at an empty folder (cold compiles)")
    parser.add_argument("--only", nargs="*", help="model names to capture")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"{'model':26}{'dynafuse first call s':>23}{'graphs':>8}{'breaks':>8}"
          f"{'kernels':>9}{'externs':>9}{'guards':>8}{'eager call s':>14}"
          f"{'torch.compile first call s':>28}")
    with torch.no_grad():
        for name, model, x in models(args.only):
            dynafuse.reset()
            ours = first_call_seconds(dynafuse.compile(model), x)
            stats = dynafuse.stats()
            graphs = dynafuse.compiled_graphs()
            kernels = sum(g["kernels"] for g in graphs)
            externs = sum(g["extern_calls"] for g in graphs)
            guards = sum(len(g["guards"]) for g in graphs)
            eager = first_call_seconds(model, x)
            theirs = "-"
            if args.inductor:
                theirs = f"{first_call_seconds(torch.compile(model), x):.1f}"
            print(f"{name:26}{ours:23.3f}{stats['captures']:8d}{stats['graph_breaks']:8d}"
                  f"{kernels:9d}{externs:9d}{guards:8d}{eager:14.3f}{theirs:>28}")

        for label, rows in overhead_rows(args.inductor):
            print(f"\ncached-call time on {label}:")
            for name, micros in rows:
                print(f"  {name:14} {micros:8.2f} us")


if __name__ == "__main__":
    main()
