"""torch.autocast's CPU cast policy, as data for capture: which torch
callables and Tensor methods autocast runs in its lower precision type
("lower_precision_fp": floating arguments other than float64 are cast to it),
in float32 ("fp32": they are cast up), or in the widest type among their
floating arguments ("promote": cat, stack, index_copy). Capture casts a
call's arguments by this table while autocast is on (in the frame's caller or
in a `with torch.autocast(...)` inside it), so the graph carries the casts
and never depends on the thread state when it runs.

The ops come from the dispatcher of the installed torch: every aten op with
an AutocastCPU kernel. ATen's source sorts them into the three policies;
the two short lists below name the lower precision and promote ones, and
every other op with a kernel is fp32. Each aten op is found under the names
torch exposes it by: torch.X, torch.nn.functional.X, torch._C._nn.X,
torch.linalg.Y and torch.fft.Y (for linalg_Y and fft_Y), and Tensor.X.

Composite callables without a kernel of their own whose ATen decomposition
reaches a listed op (einsum's bmm, tensordot's mm) take that op's policy:
COMPOSITES lists them. torch.nn.functional.pad is fp32 in its reflect and
replicate modes only (their aten ops are listed; constant padding is not):
capture decides it from the mode (PAD_MODES_FP32).
"""
import torch
import torch.nn.functional as F

LOWER_PRECISION = {
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm",
    "addmm", "addbmm", "linear", "_convolution", "matmul", "conv_tbc",
    "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "prelu", "scaled_dot_product_attention",
    "_native_multi_head_attention", "_addmm_activation",
}
PROMOTE = {"cat", "stack", "index_copy"}
# aten ops whose Python names differ from theirs.
PYTHON_NAMES = {"cross_entropy_loss": ["cross_entropy"]}
COMPOSITES = {
    torch.einsum: "lower_precision_fp",
    torch.tensordot: "lower_precision_fp",
    torch.inner: "lower_precision_fp",
    torch.chain_matmul: "lower_precision_fp",
    torch.linalg.multi_dot: "lower_precision_fp",
    F.bilinear: "lower_precision_fp",
    torch.bilinear: "lower_precision_fp",
}
PAD_MODES_FP32 = ("reflect", "replicate")


def _aten_ops_with_autocast_kernels():
    names = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "AutocastCPU"):
                names.add(qualified[len("aten::"):].split(".")[0])
        except RuntimeError:
            pass
    return names


def _python_callables(name):
    found = []
    for python_name in PYTHON_NAMES.get(name, [name]):
        for namespace in (torch, F, torch._C._nn, torch._C._VariableFunctions):
            callable_ = getattr(namespace, python_name, None)
            if callable_ is not None and callable(callable_):
                found.append(callable_)
        for prefix, namespace in (("linalg_", torch.linalg), ("fft_", torch.fft)):
            if python_name.startswith(prefix):
                callable_ = getattr(namespace, python_name[len(prefix):], None)
                if callable_ is not None:
                    found.append(callable_)
    return found


def _tables():
    functions, methods = {}, {}
    for name in sorted(_aten_ops_with_autocast_kernels()):
        policy = ("lower_precision_fp" if name in LOWER_PRECISION else
                  "promote" if name in PROMOTE else "fp32")
        for callable_ in _python_callables(name):
            functions[callable_] = policy
        method = getattr(torch.Tensor, name, None)
        if method is not None:
            methods[name] = policy
            functions[method] = policy
    functions.update(COMPOSITES)
    # x @ y and y.__rmatmul__(x) are matmul.
    methods["__matmul__"] = methods["__rmatmul__"] = methods.get("matmul", "lower_precision_fp")
    return functions, methods


FUNCTIONS, METHODS = _tables()
AUTOCAST = {"functions": FUNCTIONS, "methods": METHODS, "pad": F.pad,
            "pad_modes_fp32": PAD_MODES_FP32}
