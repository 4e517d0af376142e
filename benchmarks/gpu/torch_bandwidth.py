"""Bandwidth of eager torch and torch.compile on the computations of
benchmarks/gpu/bench/memory_bound.graph, for the GPU check (check.sh runs
it beside `dynafuse-run --bench`). Each row: median time of one call
(CUDA events, back-to-back calls), GB/s of the ideal traffic (inputs read
once, output written once) and its fraction of a device-to-device copy
moving the same bytes. Needs torch with a CUDA device; exits 0 with a note
when there is none (the GPU check then reports only Dynafuse's kernels).

    python benchmarks/gpu/torch_bandwidth.py [--iterations 50] [--no-compile]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

ELEMENTS = 64 * 1024 * 1024


def cases():
    rows, cols = 16384, 4096
    yield ("gelu_chain", lambda x, w, b: F.gelu(x * w + b),
           lambda: (torch.randn(rows, cols, device="cuda"),
                    torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")))
    for cols in (1024, 2048, 4096, 8192):
        rows = ELEMENTS // cols
        yield (f"softmax_{cols}", lambda x: torch.softmax(x, -1),
               lambda rows=rows, cols=cols: (torch.randn(rows, cols, device="cuda"),))
    for cols in (1024, 2048, 4096, 8192):
        rows = ELEMENTS // cols
        yield (f"layer_norm_{cols}",
               lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
               lambda rows=rows, cols=cols: (torch.randn(rows, cols, device="cuda"),
                                             torch.randn(cols, device="cuda"),
                                             torch.randn(cols, device="cuda")))
    rows, cols = 16384, 4096
    yield ("gelu_chain_bf16", lambda x, w, b: F.gelu(x * w + b),
           lambda: tuple(t.bfloat16() for t in (torch.randn(rows, cols, device="cuda"),
                                                torch.randn(cols, device="cuda"),
                                                torch.randn(cols, device="cuda"))))


def seconds_per_call(fn, iterations):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / iterations)
    return statistics.median(samples)


def copy_seconds(nbytes, iterations):
    half = max(nbytes // 2, 1)
    a = torch.empty(half, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return seconds_per_call(lambda: b.copy_(a), iterations)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_bandwidth: no CUDA device visible to torch; skipped")
        return
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'computation':18}{'MB':>8}{'eager us':>10}{'GB/s':>7}{'%copy':>7}"
          f"{'compile us':>12}{'GB/s':>7}{'%copy':>7}")
    with torch.no_grad():
        for name, fn, make in cases():
            inputs = make()
            out = fn(*inputs)
            nbytes = sum(t.numel() * t.element_size() for t in inputs) + \
                out.numel() * out.element_size()
            copy = copy_seconds(nbytes, args.iterations)
            eager = seconds_per_call(lambda: fn(*inputs), args.iterations)
            line = (f"{name:18}{nbytes / 1e6:8.1f}{eager * 1e6:10.1f}"
                    f"{nbytes / eager / 1e9:7.0f}{100 * copy / eager:6.0f}%")
            if not args.no_compile:
                try:
                    compiled = torch.compile(fn)
                    compiled(*inputs)
                    inductor = seconds_per_call(lambda: compiled(*inputs), args.iterations)
                    line += (f"{inductor * 1e6:12.1f}{nbytes / inductor / 1e9:7.0f}"
                             f"{100 * copy / inductor:6.0f}%")
                except Exception as error:  # noqa: BLE001 - report, go on
                    line += f"  torch.compile failed: {type(error).__name__}"
            print(line + f"   (copy {nbytes / copy / 1e9:.0f} GB/s)", flush=True)
            del inputs, out


if __name__ == "__main__":
    main()
