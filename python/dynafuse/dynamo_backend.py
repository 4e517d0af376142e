"""Dynafuse as a torch.compile backend: torch.compile(model, backend="dynafuse").

TorchDynamo captures the user's code and hands each FX graph it made to
dynafuse_backend. An FX GraphModule's forward is generated Python: one
straight-line call per node (torch functions, Tensor methods, operators).
Dynafuse converts it to its graph IR by capturing that code with its own
frame hook, so the graph goes through the same op tables, the same shape
rules and the same guards as code Dynafuse captures itself: ops outside the
op table become call_torch externs (ATen runs them inside the compiled
graph), and what cannot be captured at all runs eagerly behind a graph break,
never an error.

Before that, sizes Dynamo passes as SymInt placeholders are read from the
tensor they belong to (x.size(d)), so that Dynafuse sees them as sizes and
its automatic dynamic shapes make them symbolic rather than compiling anew
for every value.

Registered through the torch_dynamo_backends entry point (pyproject.toml):
torch finds "dynafuse" without an import.
"""
import torch

from . import compile as dynafuse_compile


def dynafuse_backend(gm, example_inputs, *, mode=None, options=None):
    """A TorchDynamo backend: returns a callable running gm through
    Dynafuse. mode and options are dynafuse.compile's (torch.compile
    passes its own mode= and options= here)."""
    del example_inputs  # Dynafuse compiles at the first call, from the real inputs.
    _read_sizes_from_tensors(gm)
    forward = _generated_forward(gm)
    return dynafuse_compile(forward, mode=mode, options=options)


def _generated_forward(gm):
    """gm's forward as generated Python code (a lazily recompiled
    GraphModule generates it now)."""
    real_recompile = getattr(gm, "real_recompile", None)
    if real_recompile is not None:
        real_recompile()
    return gm.forward


def _symbol_of(size):
    """The sympy expression behind a SymInt, or None for a plain int."""
    if isinstance(size, torch.SymInt):
        return size.node.expr
    return None


def _read_sizes_from_tensors(gm):
    """Replaces every use of a SymInt placeholder by x.size(d) of a tensor
    placeholder whose size d is that symbol (placeholders without such a
    tensor stay arguments)."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    dims_of_symbol = {}
    for node in placeholders:
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                symbol = _symbol_of(size)
                if symbol is not None:
                    dims_of_symbol.setdefault(symbol, (node, dim))
    changed = False
    for node in placeholders:
        symbol = _symbol_of(node.meta.get("example_value"))
        if symbol is None or symbol not in dims_of_symbol or not node.users:
            continue
        tensor, dim = dims_of_symbol[symbol]
        with gm.graph.inserting_after(placeholders[-1]):
            size = gm.graph.call_method("size", (tensor, dim))
        node.replace_all_uses_with(size)
        changed = True
    if changed:
        gm.recompile()
