"""Training steps (issue 16): forward, loss and backward of a model with
fresh gradients each step (the optimizer's step stays outside), eager
PyTorch, torch.compile (its default training mode: AOTAutograd and Inductor)
and Dynafuse side by side in one process.

Rows: the suite's MLP (1024-4096-1024, batch 512) and GPT-2 block (d768,
12 heads, sequence 256, batch 4), and a memory-bound block (layer_norm ->
gelu -> dropout 0.1 -> residual add over 8192 x 1024; dropout masks are
each compiler's own, so losses differ between them, not the work). Per row and compiler: the median
step time over --runs rounds in which every version runs once in turn (a
noisy stretch of the machine hits all of them), with its spread (half the
interquartile range over the median) and the ratio to eager; the compile
time of the first step (forward and backward graphs); and the bytes the
step saves for its backward, counted by a saved_tensors_hooks pack hook
(distinct storages that are neither parameters nor the step's inputs),
which sees eager's, AOTAutograd's and Dynafuse's saved tensors alike. The
memory-bound row also gives Dynafuse's step as a fraction of the
machine's bandwidth (triad), from the bytes a fused step must move.

Compile times are cold: both compilers get fresh, empty on-disk caches
(unless --warm-caches).

    .venv/bin/python benchmarks/training.py [--runs 15] [--no-inductor]
        [--only mlp gpt2 resnet18 memory] [--markdown FILE] [--warm-caches]
        [--autocast off|bf16|both]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

if "--warm-caches" not in sys.argv:  # before torch and dynafuse read them
    os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import dynafuse  # noqa: E402
import workloads  # noqa: E402
from measure import spread, triad_gbs  # noqa: E402


class MemoryBoundBlock(nn.Module):
    """x + dropout(gelu(layer_norm(x))): memory-bound ops only."""

    def __init__(self, width, p=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return x + self.dropout(F.gelu(self.norm(x)))


def rows(only):
    """(title, model, input shape, loss, bytes a fused step moves or None)."""
    torch.manual_seed(0)
    result = []
    if "mlp" in only:
        mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
        result.append(("MLP 1024-4096-1024 b512", mlp, (512, 1024), "mse", None))
    if "gpt2" in only:
        result.append(("GPT-2 block d768 seq256 b4", workloads.GPT2Block(),
                       (4, 256, 768), "mse", None))
    if "resnet18" in only:
        import torchvision
        resnet = torchvision.models.resnet18(num_classes=100).train()
        result.append(("resnet18 b8 112x112 (train-mode batch norm)", resnet,
                       (8, 3, 112, 112), "cross_entropy", None))
    if "memory" in only:
        n, width = 8192, 1024
        # Forward reads x and writes y; backward reads the tangent, x and the
        # weight's rows, writes the input's gradient: 2 + 3 passes of f32.
        result.append(("memory-bound block 8192x1024", MemoryBoundBlock(width).train(),
                       (n, width), "mse", 5 * n * width * 4))
    return result


def loss_function(model, loss, autocast=False):
    """The forward and the loss, as one function for the compilers; with
    autocast, inside a `torch.autocast("cpu", dtype=torch.bfloat16)` block
    of its own (the loss then runs in f32 where autocast says so)."""
    if loss == "cross_entropy":
        def plain(x, target):
            return F.cross_entropy(model(x), target)
    else:
        def plain(x, target):
            return ((model(x) - target) ** 2).mean()
    if not autocast:
        return plain

    def loss_of(x, target):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return plain(x, target)
    return loss_of


def make_target(model, x, loss):
    with torch.no_grad():
        out = model(x)
    if loss == "cross_entropy":
        return torch.randint(0, out.shape[1], (out.shape[0],))
    return torch.randn(out.shape)


def step_function(loss_of):
    def step(x, target):
        loss = loss_of(x, target)
        loss.backward()
        return loss
    return step


def saved_bytes(model, loss_of, inputs):
    """Bytes of the distinct storages saved for backward during one step,
    other than parameters and the step's inputs."""
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
    excluded |= {t.untyped_storage().data_ptr() for t in inputs}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_of(*inputs)
    loss.backward()
    return sum(storages.values())


def timed_step(model, step, inputs):
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    step(*inputs)
    return time.perf_counter() - start


def run_row(title, model, shape, loss, traffic, args, bandwidth, autocast=False):
    x = torch.randn(*shape)
    inputs = (x, make_target(model, x, loss))
    eager = loss_function(model, loss, autocast)
    compilers = {"eager": eager}
    compile_s = {}
    compiled = dynafuse.compile(loss_function(model, loss, autocast))
    start = time.perf_counter()
    timed_step(model, step_function(compiled), inputs)
    compile_s["dynafuse"] = time.perf_counter() - start
    training = [g for g in dynafuse.compiled_graphs() if g["training"]]
    if not training:
        print(f"  {title}: Dynafuse did not compile a training graph: "
              f"{dynafuse._C.break_reasons()}")
    compilers["dynafuse"] = compiled
    if not args.no_inductor:
        inductor = torch.compile(loss_function(model, loss, autocast))
        start = time.perf_counter()
        timed_step(model, step_function(inductor), inputs)
        compile_s["torch.compile"] = time.perf_counter() - start
        compilers["torch.compile"] = inductor
    steps = {name: step_function(loss_of) for name, loss_of in compilers.items()}
    for name, step in steps.items():  # warm
        timed_step(model, step, inputs)
    samples = {name: [] for name in steps}
    for _ in range(args.runs):
        for name, step in steps.items():
            samples[name].append(timed_step(model, step, inputs) * 1e3)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    saved = {name: saved_bytes(model, loss_of, inputs)
             for name, loss_of in compilers.items()}
    lines = []
    for name in steps:
        ratio = medians["eager"] / medians[name]
        extra = ""
        if name == "dynafuse" and traffic:
            extra = f", {traffic / (medians[name] / 1e3) / 1e9 / bandwidth:.0%} of triad"
        lines.append(
            f"| {title} | {name} | {medians[name]:.2f} ± {spread(samples[name]):.0%} | "
            f"{ratio:.2f}x{extra} | {compile_s.get(name, 0):.2f} | "
            f"{saved[name] / 1e6:.1f} |")
    kernels = ""
    if training:
        kernels = (f" (Dynafuse: forward {training[0]['kernels']} kernels + "
                   f"{training[0]['extern_calls']} ATen calls, backward "
                   f"{training[0]['backward_kernels']} kernels + "
                   f"{training[0]['backward_extern_calls']} ATen calls)")
    return lines, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", nargs="*", default=["mlp", "gpt2", "resnet18", "memory"])
    parser.add_argument("--markdown")
    parser.add_argument("--warm-caches", action="store_true")
    parser.add_argument("--autocast", choices=["off", "bf16", "both"], default="off",
                        help="rows in f32, under torch.autocast(cpu, bfloat16), or both")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    bandwidth = triad_gbs(20)
    header = [f"triad bandwidth {bandwidth:.1f} GB/s; torch {torch.__version__}; "
              f"{torch.get_num_threads()} threads; step = forward + loss (mse; cross entropy for resnet18; compiled "
              "together) + backward",
              "",
              "| workload | compiler | step ms (± spread) | vs eager | compile s | saved MB |",
              "| --- | --- | --- | --- | --- | --- |"]
    print("\n".join(header))
    out = list(header)
    notes = []
    variants = {"off": [False], "bf16": [True], "both": [False, True]}[args.autocast]
    for title, model, shape, loss, traffic in rows(args.only):
        for autocast in variants:
            dynafuse.reset()
            torch._dynamo.reset()
            named = title + (" autocast bf16" if autocast else "")
            lines, kernels = run_row(named, model, shape, loss, traffic if not autocast else None,
                                     args, bandwidth, autocast)
            print("\n".join(lines), flush=True)
            out += lines
            notes.append(f"- {named}{kernels}")
    print("\n".join(notes))
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write("\n".join(out + [""] + notes) + "\n")


if __name__ == "__main__":
    sys.exit(main())
