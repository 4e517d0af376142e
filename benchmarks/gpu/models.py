"""Whole models on a GPU: eager torch, Dynafuse's cuda backend and
torch.compile (Inductor) side by side in one process, for the GPU check
(benchmarks/gpu/check.sh --models runs it after the Python tests).

Per model: the first call of each compiled version (capture and compile
included, wall clock after a device synchronize), then --rounds rounds in
which each version runs --calls back-to-back calls timed with CUDA events,
versions in turn; the table gives each version's median time per call and
its speedup over eager (median of the rounds' ratios, with their range).
Dynafuse's row also says how many graphs, kernels and extern calls it
compiled and how far its result is from eager's (largest absolute
difference), so a model that fell back to eager shows it.

    python benchmarks/gpu/models.py [--only resnet18_b8 gpt2_block ...]
        [--rounds 5] [--calls 20] [--no-compile] [--device cuda]

--device cpu runs the same on the CPU (a smoke test where no GPU is).
Models that fail (in any version) print the error and the table goes on.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workloads import GPT2Block  # noqa: E402


def torchvision_model(name):
    import torchvision
    return torchvision.models.get_model(name, weights=None).eval()


def mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).eval()


# name -> (make model, make inputs on a device)
MODELS = {
    "resnet18_b8": (lambda: torchvision_model("resnet18"),
                    lambda d: (torch.randn(8, 3, 224, 224, device=d),)),
    "gpt2_block": (lambda: GPT2Block().eval(),
                   lambda d: (torch.randn(4, 256, 768, device=d),)),
    "mlp_b512": (mlp, lambda d: (torch.randn(512, 1024, device=d),)),
    "mobilenet_v2_b8": (lambda: torchvision_model("mobilenet_v2"),
                        lambda d: (torch.randn(8, 3, 224, 224, device=d),)),
    "resnet18_b1": (lambda: torchvision_model("resnet18"),
                    lambda d: (torch.randn(1, 3, 224, 224, device=d),)),
    "vit_b_16_b8": (lambda: torchvision_model("vit_b_16"),
                    lambda d: (torch.randn(8, 3, 224, 224, device=d),)),
}


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def seconds_per_call(fn, inputs, calls, device):
    """Back-to-back calls: CUDA events on a GPU, the wall clock elsewhere."""
    if device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(*inputs)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls
    begin = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    return (time.perf_counter() - begin) / calls


def first_call(fn, inputs, device):
    synchronize(device)
    begin = time.perf_counter()
    result = fn(*inputs)
    synchronize(device)
    return result, time.perf_counter() - begin


def largest_difference(actual, expected):
    if isinstance(expected, torch.Tensor):
        return (actual.float() - expected.float()).abs().max().item()
    return max(largest_difference(a, e) for a, e in zip(actual, expected))


def measure(name, args):
    import dynafuse
    make_model, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model = make_model().to(args.device)
    inputs = make_inputs(args.device)
    dynafuse.reset()
    versions = {"eager": model,
                "dynafuse": dynafuse.compile(model, backend=args.device
                                             if args.device == "cuda" else "auto")}
    if not args.no_compile:
        versions["torch.compile"] = torch.compile(model)
    firsts, results = {}, {}
    with torch.no_grad():
        for version, fn in versions.items():
            results[version], firsts[version] = first_call(fn, inputs, args.device)
        graphs = dynafuse.compiled_graphs()
        difference = largest_difference(results["dynafuse"], results["eager"])
        times = {version: [] for version in versions}
        for _ in range(args.rounds):
            for version, fn in versions.items():
                fn(*inputs)  # one untimed call: the previous version's caches go
                times[version].append(seconds_per_call(fn, inputs, args.calls, args.device))
    stats = dynafuse.stats()
    eager = times["eager"]
    cells = [f"{name:16s}", f"eager {statistics.median(eager) * 1e3:8.3f} ms"]
    for version in versions:
        if version == "eager":
            continue
        ratios = [e / t for e, t in zip(eager, times[version])]
        cells.append(f"{version} {statistics.median(times[version]) * 1e3:8.3f} ms "
                     f"{statistics.median(ratios):5.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] "
                     f"first {firsts[version]:6.2f} s")
    cells.append(f"graphs {len(graphs)} kernels {sum(g['kernels'] for g in graphs)} "
                 f"externs {sum(g['extern_calls'] for g in graphs)} "
                 f"breaks {stats['graph_breaks']} |diff| {difference:.2e}")
    print(" | ".join(cells), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true",
                        help="leave torch.compile out")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("models.py: torch sees no CUDA device; nothing measured")
        return 0
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"device: {where}, torch {torch.__version__}; {args.rounds} rounds of "
          f"{args.calls} calls; speedups over eager, median [range] of rounds", flush=True)
    failed = 0
    for name in args.only or MODELS:
        try:
            measure(name, args)
        except Exception as error:  # noqa: BLE001 - one model's failure is reported
            failed += 1
            print(f"{name:16s} | failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
