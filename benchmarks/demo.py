"""The Dynafuse demo: compile two real models, a torchvision ResNet-18 and a
GPT-2 transformer block, check them against eager PyTorch, time them side
by side with eager and torch.compile (Inductor) in this process, run them
through torch.compile(backend="dynafuse") too, and dump every kernel.

Compile times are cold: both compilers get fresh, empty on-disk caches
(a temporary folder each) unless --warm-caches is given.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump-dir", default=os.path.abspath("dynafuse_dump"))
    parser.add_argument("--no-inductor", action="store_true",
                        help="skip torch.compile's Inductor (its compile takes a minute)")
    parser.add_argument("--warm-caches", action="store_true",
                        help="keep both compilers' on-disk caches (compile times are then warm)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    return parser.parse_args()


ARGS = parse_arguments()
if not ARGS.warm_caches:  # before torch and dynafuse read them
    os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-demo-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-demo-cache-")
os.environ.setdefault("DYNAFUSE_NUM_THREADS", str(ARGS.threads))

import torch  # noqa: E402

import dynafuse  # noqa: E402

sys.path.insert(0, HERE)
from workloads import GPT2Block  # noqa: E402


def models():
    torch.manual_seed(0)
    result = []
    try:
        import torchvision
        result.append(("resnet18 b1 224x224", torchvision.models.resnet18(weights=None).eval(),
                       (torch.randn(1, 3, 224, 224),)))
    except ImportError:
        print("torchvision is not installed: the demo runs the transformer block only")
    result.append(("GPT-2 block d768 seq128 b1", GPT2Block().eval(), (torch.randn(1, 128, 768),)))
    return result


def median_ms(fn, inputs, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def first_call_s(fn, inputs):
    start = time.perf_counter()
    result = fn(*inputs)
    return result, time.perf_counter() - start


def check(name, result, expected):
    error = (result - expected).abs().max().item()
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)
    return error


def run_model(title, model, inputs, dump_dir):
    candidates = {"eager": model}
    compile_s = {}
    errors = {}
    expected = model(*inputs)

    ours = dynafuse.compile(model, options={"dump_dir": dump_dir})
    result, compile_s["dynafuse"] = first_call_s(ours, inputs)
    errors["dynafuse"] = check("dynafuse", result, expected)
    graphs = dynafuse.compiled_graphs()
    candidates["dynafuse"] = ours

    via_dynamo = torch.compile(model, backend="dynafuse")
    result, compile_s["torch.compile(backend=dynafuse)"] = first_call_s(via_dynamo, inputs)
    errors["torch.compile(backend=dynafuse)"] = check("dynamo", result, expected)
    candidates["torch.compile(backend=dynafuse)"] = via_dynamo

    if not ARGS.no_inductor:
        inductor = torch.compile(model)
        result, compile_s["torch.compile"] = first_call_s(inductor, inputs)
        errors["torch.compile"] = check("inductor", result, expected)
        candidates["torch.compile"] = inductor

    samples = {name: [] for name in candidates}
    for _ in range(ARGS.rounds):  # interleaved: the machine's drift hits all alike
        for name, fn in candidates.items():
            samples[name].append(median_ms(fn, inputs))
    times = {name: statistics.median(values) for name, values in samples.items()}

    print(f"\n{title}: {graphs[0]['kernels']} kernel calls "
          f"({graphs[0]['distinct_kernels']} distinct), {graphs[0]['extern_calls']} ATen calls "
          f"in {len(graphs)} graph(s)")
    print(f"  {'':34}{'run ms':>9}{'vs eager':>10}{'compile s':>11}{'max abs err':>13}")
    for name, ms in times.items():
        compile_text = f"{compile_s[name]:11.2f}" if name in compile_s else f"{'':11}"
        error_text = f"{errors[name]:13.1e}" if name in errors else f"{'':13}"
        print(f"  {name:34}{ms:9.2f}{times['eager'] / ms:9.2f}x{compile_text}{error_text}")
    return times


def main():
    torch.set_num_threads(ARGS.threads)
    print(f"Dynafuse {dynafuse.__version__}, torch {torch.__version__}, "
          f"{ARGS.threads} threads; compile times "
          f"{'warm' if ARGS.warm_caches else 'cold (fresh on-disk caches)'}")
    with torch.no_grad():
        for title, model, inputs in models():
            dynafuse.reset()
            torch._dynamo.reset()
            run_model(title, model, inputs, os.path.join(ARGS.dump_dir, title.split()[0]))
    print("\n(whole tables: benchmarks/suite.py and benchmarks/library_models.py, "
          "docs/performance.md)")
    print(f"\nkernel dumps in {ARGS.dump_dir}:")
    for model_folder in sorted(os.listdir(ARGS.dump_dir)):
        for folder in sorted(os.listdir(os.path.join(ARGS.dump_dir, model_folder))):
            files = sorted(os.listdir(os.path.join(ARGS.dump_dir, model_folder, folder)))
            print(f"  {model_folder}/{folder}/: {', '.join(files)}")


if __name__ == "__main__":
    main()
