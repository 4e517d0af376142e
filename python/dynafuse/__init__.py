"""Dynafuse: a graph-capturing JIT compiler for PyTorch programs.

    model = dynafuse.compile(model)          # an nn.Module or a function
    @dynafuse.compile(fullgraph=True)        # or as a decorator
    def f(x, w): ...

The first call captures the Python bytecode of the function (or the module's
forward) into a tensor graph, fuses it into LLVM-compiled kernels and caches
them behind guards; later calls with the same kinds of inputs run the cached
kernels. Whatever cannot be captured runs eagerly, unchanged.
"""
import functools
import sys

import torch  # Loads torch's shared libraries before the extension.

from . import config, functional, ops  # noqa: F401 - functional: see storeSubscript

_REBUILD = "rebuild it in this environment: pip install --no-build-isolation -e <dynafuse checkout>"
try:
    from . import _C
except ImportError as error:
    raise ImportError(
        f"dynafuse's extension does not load beside torch {torch.__version__} "
        f"on CPython {sys.version.split()[0]} ({error}); it must be built against "
        f"the torch and CPython it runs with: {_REBUILD}") from error

__all__ = ["compile", "CompiledModule", "compiled_graphs", "config", "explain", "mark_dynamic", "mark_static", "memory_stats",
           "reset", "stats", "Unsupported", "IRError"]
__version__ = _C.version

if torch.__version__ != _C.torch_version:
    raise ImportError(
        f"dynafuse was built against torch {_C.torch_version} but torch "
        f"{torch.__version__} is installed; {_REBUILD}")

Unsupported = _C.Unsupported
IRError = _C.IRError

from . import compiled  # noqa: E402 - needs the extension loaded

_C.set_op_tables(ops.FUNCTIONS, ops.METHODS, ops.STATE_QUERIES, ops.POLYFILLS,
                 ops.AUTOCAST)
config._apply(_C, compiled.SKIP_PREFIXES)

CompiledModule = compiled.CompiledModule


def compile(model=None, *, fullgraph=False, dynamic=None, backend="auto", mode=None,
            options=None, disable=False):
    """Compiles a function or nn.Module; usable as @compile or @compile(...).
    The arguments are torch.compile's, with these meanings:

    fullgraph: raise dynafuse.Unsupported instead of falling back to eager
    when the code cannot be captured as one graph.
    dynamic: None (automatic: sizes are static at the first capture; a dim
    whose size changed between calls is a symbol at the next one, and one
    graph then serves every size), True (every dim of the tensor arguments
    is a symbol from the start; parameters stay static), False (every new
    size compiles anew). Sizes 0 and 1 are always specialized.
    mark_dynamic and mark_static decide per tensor.
    backend: Dynafuse's code generator: "auto" (by device, per call:
    "cuda" when a tensor argument is on a CUDA device, else "cpu"; with no
    tensor argument a module's first parameter or buffer decides), "cpu"
    (LLVM when built, else the interpreter), "llvm", "interp", "mlir"
    (kernels exported to MLIR and compiled by MLIR's own passes and
    ExecutionEngine: an independent check of the LLVM backend, slower to
    compile), "cuda" (NVRTC-compiled kernels on cuda:0, on torch's current
    stream). A graph
    whose tensors are on another device than the backend runs eagerly,
    with the reason logged.
    mode: torch.compile's names ("default", "reduce-overhead",
    "max-autotune", "max-autotune-no-cudagraphs"); dynafuse.compiled.MODES
    says what each does here.
    options: a dict of dynafuse.config settings for this callable only
    (dump_dir, recompile_limit, resume_after_breaks, log,
    automatic_dynamic_shapes); other keys raise ValueError.
    disable: True returns model unchanged.
    """
    settings = compiled.CompileSettings.checked(backend, fullgraph, dynamic, mode, options)
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic,
                                 backend=backend, mode=mode, options=options,
                                 disable=disable)
    if disable:
        return model
    if isinstance(model, torch.nn.Module):
        return compiled.CompiledModule(model, settings)
    if not callable(model):
        raise TypeError(f"dynafuse.compile expects a function or nn.Module, got {type(model).__name__}")
    return compiled.compiled_function(model, settings)


def mark_dynamic(tensor, dim):
    """Makes dim (an int or a list of ints) of tensor symbolic at the next
    capture that reads it, whatever compile's dynamic= says (except False).
    The same mark as torch._dynamo.mark_dynamic."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(tensor, "_dynamo_dynamic_indices", set()))
    tensor._dynamo_dynamic_indices = marked | set(dims)


def mark_static(tensor, dim):
    """Keeps dim (an int or a list of ints) of tensor static: every new size
    of it compiles anew. The same mark as torch._dynamo.mark_static."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(tensor, "_dynamo_static_indices", set()))
    tensor._dynamo_static_indices = marked | set(dims)


def reset():
    """Forgets every compiled graph and zeroes the counters."""
    _C.reset()


def compiled_graphs():
    """One dict per graph compiled since the last reset: name, where (the
    user's file:line), kernels (kernel calls a run makes), distinct_kernels
    (those compiled: identical kernels of repeated layers are one),
    extern_calls, peak_intermediate_bytes (the
    most intermediate storage live at once, for the captured shapes)."""
    return _C.graphs()


def settled_reasons():
    """Code objects that run eagerly from now on because a guard of theirs
    can never hold twice (an argument made afresh for every call), with
    why; counted by stats()["settled_frames"]."""
    return _C.settled_reasons()


class Explanation:
    """What dynafuse.explain found: graph_count, graph_break_count,
    break_reasons, ops_per_graph, kernels_per_graph, guards (per graph),
    settled (code objects settled into eager, with why)."""

    def __init__(self, graphs, reasons, settled=()):
        self.graphs = graphs
        self.settled = list(settled)
        self.graph_count = len(graphs)
        self.break_reasons = reasons
        self.graph_break_count = len(reasons)
        self.ops_per_graph = [g["ops"] for g in graphs]
        self.kernels_per_graph = [g["kernels"] for g in graphs]
        self.guards = [g["guards"] for g in graphs]

    def __repr__(self):
        lines = [f"{self.graph_count} graph(s), {self.graph_break_count} graph break(s)"]
        for graph in self.graphs:
            lines.append(f"  {graph['name']} ({graph['where']}): {graph['ops']} ops, "
                         f"{graph['kernels']} kernels, {graph['extern_calls']} extern calls")
        lines += [f"  break: {reason}" for reason in self.break_reasons]
        lines += [f"  settled: {reason}" for reason in self.settled]
        return "\n".join(lines)


def explain(fn, *, backend="auto", calls=1):
    """explain(fn)(*args): forgets compiled code (like reset()), runs fn
    compiled `calls` times (more than once to see recompiles and code that
    settles into eager) and reports what was captured and why anything was
    not."""
    def run(*args, **kwargs):
        reset()
        compiled = compile(fn, backend=backend)
        for _ in range(calls):
            compiled(*args, **kwargs)
        return Explanation(_C.graphs(), _C.break_reasons(), _C.settled_reasons())

    return run


def stats():
    """Counters: captures (successful), cache_hits (compiled entries run),
    graph_breaks, compile_failures, eager_frames (frames run eagerly: at a
    break or failure, and each later call its negative entry sends to eager),
    recompile_limit_hits, settled_frames (code objects that run eagerly
    from then on because a guard of theirs can never hold twice: an object
    made afresh for every call; why: settled_reasons()), unhooked_codes
    (code objects that run eagerly, skipped or settled, and whose last runs
    compiled nothing under them: they and what they call run with the
    frame hook off, at eager's speed), run_failures (compiled runs that failed; those
    calls reran eagerly), backend_compiles (graphs handed to a code
    generator: an LLVM or NVRTC compile unless the disk cache had it),
    symbolic_captures (captures with symbolic sizes), disk_cache_hits
    (compiled modules the on-disk kernel cache had: backend_compiles minus
    these were compiled by LLVM in this process), weight_prepacks
    (convolution weights of inference graphs reordered into oneDNN's
    layout: once per parameter version, not per call), batch_norm_folds (of
    those, weights with the batch norm after them folded in),
    conv_residual_adds (convolution runs that added a residual block's input
    in oneDNN's post-op: every run counts), convolution_choices (large
    packed convolutions timed against ATen's on their first calls, the
    faster kept: once per packing), packed_gemms (inference linear
    layers run by the GEMM library, MKL's packed sgemm or oneDNN: every run
    counts), linear_prepacks (their weights packed for it: once per
    parameter version and input size), onednn_products (products of two
    computed tensors run through oneDNN's matmul: every run counts),
    pointwise_conv_products (small 1x1 convolutions of channels-last inputs
    run as a matrix product: every run counts), allocation_plans (plans of
    where a compiled run's large blocks go, made from a run's trace: the
    first run's, then one per run that strayed from its plan, a few at most
    per compiled graph), in_place_updates (in-place tensor methods such as a
    static KV cache's index_copy_ run in place on the caller's tensor
    rather than out of place and copied back: every run counts),
    torch_call_gradients (gradients of torch calls kept in a training graph,
    computed by torch's autograd on a recomputation: every run counts)"""
    return _C.stats()


def memory_stats():
    """The caching allocator behind compiled graphs' tensors (their outputs,
    intermediates, and ATen's results inside a compiled run): bytes_in_use,
    bytes_cached (free and resident), bytes_mapped (the large blocks' extent:
    the most ever in use at once plus fragmentation), hits, misses,
    trimmed, planned_allocations (large blocks of compiled runs placed by
    their program's allocation plan) and plan_conflicts (blocks a plan
    would have placed while a block sharing its bytes was still live)."""
    return _C.memory_stats()
