"""State queries: torch calls whose answer capture knows without running
them, because the captured graph only ever runs where the answer holds
(plain tensors, no scripting or tracing, grad mode guarded).
Answers: "false", "true", "none", "zero", "grad_enabled" (the guarded grad
mode), and autocast's ("autocast_enabled", "autocast_dtype", for the
device the call names, or for the one after the colon: answered from the
autocast state the capture traces under, AutocastCasts.h). `torch.compiler.is_compiling()` answers True while capturing, as under
TorchDynamo: libraries take their compile-friendly paths (no warnings, no
pytree registration), which compute the same values. Stream capture (CUDA
graphs) never holds around a captured CPU graph; a CUDA graph recorded
through a compiled entry is not supported.
A compiled graph does not run through Python dispatch modes: the dispatch
stack counts as empty."""
import sys

import torch
import torch.overrides


def _tables():
    queries = {
        torch.is_grad_enabled: "grad_enabled",
        torch.jit.is_scripting: "false",
        torch.jit.is_tracing: "false",
        torch._C._get_tracing_state: "none",
        torch.overrides.has_torch_function: "false",
        torch.overrides.has_torch_function_unary: "false",
        torch.overrides.has_torch_function_variadic: "false",
        torch._C._len_torch_dispatch_stack: "zero",
    }
    for module, name, answer in [
        ("torch.compiler", "is_compiling", "true"),
        ("torch.compiler", "is_dynamo_compiling", "true"),
        ("torch._dynamo", "is_compiling", "true"),
        ("torch._C", "_cuda_isCurrentStreamCapturing", "false"),
        ("torch._C", "_xpu_isCurrentStreamCapturing", "false"),
        ("torch", "is_autocast_enabled", "autocast_enabled"),
        ("torch", "is_autocast_cpu_enabled", "autocast_enabled:cpu"),
        ("torch", "get_autocast_dtype", "autocast_dtype"),
        ("torch", "get_autocast_cpu_dtype", "autocast_dtype:cpu"),
        ("torch", "get_autocast_gpu_dtype", "autocast_dtype:cuda"),
    ]:
        # Only modules torch has loaded (importing torch._dynamo would load
        # the competitor's compiler).
        function = getattr(sys.modules.get(module), name, None)
        if function is not None:
            queries[function] = answer
    return queries


STATE_QUERIES = _tables()
