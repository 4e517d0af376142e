"""State queries: torch calls whose answer capture knows without running
them, because the captured graph only ever runs where the answer holds
(plain tensors, no scripting or tracing, grad mode guarded, autocast off).
Answers: "false", "none", "zero", "grad_enabled" (the guarded grad mode).
A compiled graph does not run through Python dispatch modes: the dispatch
stack counts as empty."""
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
        torch.is_autocast_enabled: "false",
        torch._C._len_torch_dispatch_stack: "zero",
    }
    return queries


STATE_QUERIES = _tables()
