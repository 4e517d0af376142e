"""The Dynafuse demo: compile gelu(x * w + b) on a few million elements,
check it against eager, time it beside eager PyTorch and torch.compile
(Inductor, measured side by side in this process), and dump every stage."""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import dynafuse


def gelu_affine(x, w, b):
    return F.gelu(x * w + b)


def median_ms(fn, args, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def interleaved(candidates, args, rounds, repeats):
    """Median per candidate over rounds that alternate between them."""
    samples = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            samples[name].append(median_ms(fn, args, repeats))
    return {name: statistics.median(values) for name, values in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=2048)
    parser.add_argument("--dump-dir", default=os.path.abspath("dynafuse_dump"))
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    os.environ.setdefault("DYNAFUSE_NUM_THREADS", "2")
    torch.manual_seed(0)

    x = torch.randn(args.rows, args.cols)
    w = torch.randn(args.cols)
    b = torch.randn(args.cols)
    inputs = (x, w, b)
    print(f"gelu(x * w + b), x {args.rows}x{args.cols} f32 ({x.numel() / 1e6:.1f}M elements)")

    dynafuse.config.dump_dir = args.dump_dir
    compiled = dynafuse.compile(gelu_affine, fullgraph=True)
    with torch.no_grad():
        start = time.perf_counter()
        ours = compiled(*inputs)
        compile_s = time.perf_counter() - start
        expected = gelu_affine(*inputs)
        error = (ours - expected).abs().max().item()
        torch.testing.assert_close(ours, expected, rtol=2e-6, atol=2e-6)
        print(f"dynafuse vs eager: max abs error {error:.2e} (allclose: yes); "
              f"first call incl. compile {compile_s * 1e3:.0f} ms; stats {dynafuse.stats()}")

        candidates = {"eager": gelu_affine, "dynafuse": compiled}
        if not args.no_inductor:
            try:
                inductor = torch.compile(gelu_affine)
                start = time.perf_counter()
                inductor(*inputs)
                print(f"torch.compile warm-up (its compile): {time.perf_counter() - start:.1f} s")
                candidates["torch.compile"] = inductor
            except Exception as error:  # noqa: BLE001 - the demo goes on without it
                print(f"torch.compile unavailable: {type(error).__name__}: {error}")
        results = interleaved(candidates, inputs, rounds=5, repeats=5)

    print(f"\n{'':16}{'median ms':>10}{'vs eager':>10}")
    for name, ms in results.items():
        print(f"{name:16}{ms:10.2f}{results['eager'] / ms:9.2f}x")
    print("\n(the full suite: benchmarks/suite.py, see README's benchmark section)")

    print(f"\nkernel dump in {args.dump_dir}:")
    for folder in sorted(os.listdir(args.dump_dir)):
        files = sorted(os.listdir(os.path.join(args.dump_dir, folder)))
        print(f"  {folder}/: {', '.join(files)}")


if __name__ == "__main__":
    main()
