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


def models():
    import torchvision
    torch.manual_seed(0)
    return [
        ("resnet18", torchvision.models.resnet18().eval(), torch.randn(1, 3, 224, 224)),
        ("mobilenet_v2", torchvision.models.mobilenet_v2().eval(), torch.randn(1, 3, 224, 224)),
        ("MLP 1024-4096-1024", nn.Sequential(nn.Linear(1024, 4096), nn.GELU(),
                                             nn.Linear(4096, 1024)).eval(), torch.randn(512, 1024)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inductor", action="store_true",
                        help="also time torch.compile's first call (minutes on 2 cores)")
    parser.add_argument("--no-disk-cache", action="store_true",
                        help="point DYNAFUSE_CACHE_DIR at an empty folder (cold compiles)")
    args = parser.parse_args()
    if args.no_disk_cache:
        os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")
    torch.set_num_threads(2)
    print(f"{'model':24}{'dynafuse first call s':>24}{'graphs':>8}{'breaks':>8}"
          f"{'torch.compile first call s':>30}")
    with torch.no_grad():
        for name, model, x in models():
            dynafuse.reset()
            ours = first_call_seconds(dynafuse.compile(model), x)
            stats = dynafuse.stats()
            theirs = "-"
            if args.inductor:
                theirs = f"{first_call_seconds(torch.compile(model), x):.1f}"
            print(f"{name:24}{ours:24.3f}{stats['captures']:8d}{stats['graph_breaks']:8d}{theirs:>30}")

        x = torch.randn(4)
        tiny = lambda t: t + 1  # noqa: E731 - the tiny function is the point
        rows = [("eager", tiny), ("dynafuse", dynafuse.compile(tiny))]
        if args.inductor:
            rows.append(("torch.compile", torch.compile(tiny)))
        print("\ncached-call overhead on x + 1 (4 elements):")
        for label, fn in rows:
            print(f"  {label:14} {per_call_microseconds(fn, x):6.2f} us")


if __name__ == "__main__":
    main()
