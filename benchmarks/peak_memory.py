"""Peak memory per model (issue 18): how much each way of running a model
raises the process's peak resident set, eager against Dynafuse against
torch.compile (Inductor), each in a fresh process so one cannot inherit
another's pages.

A child process builds the model and its input (the models of
library_models.py), reads its peak RSS (getrusage's ru_maxrss), runs the
first call (capture and compile included) and --calls more, and reads the
peak again: the table gives the difference, in MB (and in parentheses the
difference after the first call alone). With --repeat N each eager and
Dynafuse figure is the median of N fresh processes, with their range in
brackets (eager's own figure moves by tens of MB between processes);
Inductor, whose first call takes minutes, is measured once. For Dynafuse
it also gives the caching allocator's mapped, cached and in-use bytes
after the calls (dynafuse.memory_stats()) and the reordered convolution
weights it keeps (prepacked weights count in the peak: one copy of each).

    .venv/bin/python benchmarks/peak_memory.py [--only resnet50 mobilenet_v2 ...]
        [--batch 8] [--image-size 224] [--calls 20] [--repeat 3] [--no-inductor]
        [--markdown FILE]
"""
import argparse
import json
import os
import resource
import subprocess
import sys

BACKENDS = ("eager", "dynafuse", "inductor")
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "googlenet", "vit_b_16",
                  "shufflenet_v2_x0_5", "densenet121", "efficientnet_b0",
                  "mobilenet_v3_small", "regnet_x_400mf", "convnext_tiny")


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(name, backend, batch, calls, image_size):
    """Runs in the fresh process: prints one JSON line."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(2)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from library_models import zoo, transformers_models
    from handwritten_blocks import handwritten_blocks
    found = None
    for source in (zoo([name], batch, image_size), handwritten_blocks([name], batch),
                   transformers_models([name], batch)):
        for entry in source:
            if entry[0] == name:
                found = entry
                break
        if found:
            break
    if not found:
        raise SystemExit(f"no model {name}")
    _, make, inputs = found
    torch.manual_seed(0)
    model = make()
    positional, keywords = inputs()
    if backend == "dynafuse":
        import dynafuse
        run = dynafuse.compile(model)
    elif backend == "inductor":
        run = torch.compile(model)
    else:
        run = model
    before = peak_mb()
    with torch.no_grad():
        run(*positional, **keywords)
        first = peak_mb() - before
        for _ in range(calls):
            run(*positional, **keywords)
    result = {"peak_mb": peak_mb() - before, "first_mb": first}
    if backend == "dynafuse":
        import dynafuse
        memory = dynafuse.memory_stats()
        result["cached_mb"] = memory.get("bytes_cached", 0) / 2**20
        result["mapped_mb"] = memory.get("bytes_mapped", 0) / 2**20
        result["in_use_mb"] = memory.get("bytes_in_use", 0) / 2**20
    print(json.dumps(result))


def measure(name, backend, args):
    command = [sys.executable, os.path.abspath(__file__), "--child", name, backend,
               "--batch", str(args.batch), "--calls", str(args.calls)]
    if args.image_size:
        command += ["--image-size", str(args.image_size)]
    environment = dict(os.environ)
    if backend == "inductor":
        environment.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:100]}
    return json.loads(lines[-1])


def measure_repeated(name, backend, args):
    """The median run of --repeat fresh processes (Inductor: one), by peak,
    with the lowest and highest peaks."""
    times = 1 if backend == "inductor" else max(1, args.repeat)
    runs = [measure(name, backend, args) for _ in range(times)]
    good = sorted((r for r in runs if "error" not in r), key=lambda r: r["peak_mb"])
    if not good:
        return runs[0]
    median = dict(good[len(good) // 2])
    median["low_mb"], median["high_mb"] = good[0]["peak_mb"], good[-1]["peak_mb"]
    return median


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"))
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--image-size", type=int,
                        help="pixels a side for the vision models (default 128)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fresh processes per eager and Dynafuse figure (median)")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.batch, args.calls, args.image_size)
        return
    backends = [b for b in BACKENDS if not (args.no_inductor and b == "inductor")]
    header = ("| model | " + " | ".join(f"{b} peak RSS +MB (after the first call)"
                                         for b in backends) +
              " | Dynafuse pool mapped / cached / in use (MB) |")
    rule = "|---" * (len(backends) + 2) + "|"
    lines = [header, rule]
    print(header)
    print(rule, flush=True)
    for name in args.only or DEFAULT_MODELS:
        results = {b: measure_repeated(name, b, args) for b in backends}
        cells = [name]
        for b in backends:
            r = results[b]
            if "error" in r:
                cells.append(f"error: {r['error']}")
                continue
            spread = (f" [{r['low_mb']:.0f}-{r['high_mb']:.0f}]"
                      if r["high_mb"] > r["low_mb"] else "")
            cells.append(f"{r['peak_mb']:.0f}{spread} ({r['first_mb']:.0f})")
        d = results.get("dynafuse", {})
        cells.append(f"{d['mapped_mb']:.0f} / {d['cached_mb']:.0f} / {d['in_use_mb']:.0f}"
                     if "cached_mb" in d else "-")
        line = "| " + " | ".join(cells) + " |"
        lines.append(line)
        print(line, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
