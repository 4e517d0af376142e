"""Backend selection end to end: "auto" picks by the tensors' device,
"cuda" on CPU tensors (or a CPU backend on CUDA tensors) runs eagerly with
the reason logged, unknown names are refused. The GPU tests need torch with
a CUDA device and a CPython that capture supports (3.11); they skip
elsewhere (benchmarks/gpu/check.sh is the GPU check of the kernels). On a
GPU they prove the compiled CUDA path ran (assert_compiled_for_cuda) and
compare with eager on random data, several shapes and non-contiguous
inputs."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="needs a CUDA device")


def fused(x, w):
    return F.gelu(x * w + 0.5).sum(-1, keepdim=True) * x


def test_auto_compiles_cpu_tensors_with_the_cpu_backend():
    x, w = torch.randn(37, 129), torch.randn(129)
    assert_close(dynafuse.compile(fused)(x, w), fused(x, w), rtol=1e-5, atol=1e-5)
    assert_compiled()
    assert dynafuse.compiled_graphs()[0]["kernels"] >= 1


def test_auto_is_the_default_and_resolves_modules_by_their_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU()).eval()
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_close(dynafuse.compile(model)(x), model(x), rtol=1e-5, atol=1e-5)
    assert_compiled()


def test_cuda_backend_on_cpu_tensors_runs_eagerly_and_says_why():
    x, w = torch.randn(8, 33), torch.randn(33)
    explanation = dynafuse.explain(fused, backend="cuda")(x, w)
    assert explanation.graph_break_count == 1
    assert "backend 'cuda' cannot run %" in explanation.break_reasons[0]
    assert "on cpu" in explanation.break_reasons[0]
    dynafuse.reset()
    assert_close(dynafuse.compile(fused, backend="cuda")(x, w), fused(x, w))
    dynafuse.reset()  # the frame is remembered as eager until then
    with pytest.raises(dynafuse.Unsupported, match="backend 'cuda' cannot run"):
        dynafuse.compile(fused, backend="cuda", fullgraph=True)(x, w)


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match="'auto', 'cpu', 'llvm', 'interp', 'cuda'"):
        dynafuse.compile(fused, backend="tpu")


def assert_compiled_for_cuda(kernels=True):
    """The compiled CUDA path ran: one graph captured and compiled with no
    break (a graph on CUDA tensors compiled for a CPU backend breaks), its
    guards see the inputs on a CUDA device, and it has kernels."""
    assert_compiled()
    (graph,) = dynafuse.compiled_graphs()
    assert any(" on cuda" in guard for guard in graph["guards"]), graph["guards"]
    if kernels:
        assert graph["kernels"] >= 1, graph


def cuda_input(shape, layout):
    """Random data on the GPU: contiguous, transposed, or every other column."""
    if layout == "transposed":
        return torch.randn(shape[::-1], device="cuda").t()
    if layout == "strided":
        return torch.randn(shape[0], 2 * shape[1], device="cuda")[:, ::2]
    return torch.randn(shape, device="cuda")


@needs_gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape", [(1, 1), (37, 129), (1024, 1000), (3, 7), (0, 7)], ids=str)
@pytest.mark.parametrize("backend", ["auto", "cuda"])
def test_cuda_tensors_compile_with_the_cuda_backend(backend, shape, layout):
    x = cuda_input(shape, layout)
    w = torch.randn(shape[-1:], device="cuda")
    if layout != "contiguous" and x.numel() > 1:
        assert not x.is_contiguous()
    out = dynafuse.compile(fused, backend=backend)(x, w)
    assert_compiled_for_cuda(kernels=x.numel() > 0)
    assert out.is_cuda
    assert_close(out, fused(x, w), rtol=1e-5, atol=1e-5)
    assert_close(out.cpu(), fused(x.cpu(), w.cpu()), rtol=1e-4, atol=1e-4)


@needs_gpu
def test_cuda_kernels_order_with_torch_on_a_side_stream():
    """Kernels are queued on torch's current stream: work queued before on
    the same stream is visible to them, and torch sees their results."""
    compiled = dynafuse.compile(lambda x, w: torch.softmax(x @ w, -1) * 2)
    x = torch.randn(256, 300, device="cuda")
    w = torch.randn(300, 300, device="cuda").t()  # non-contiguous
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = x * 3  # queued on the side stream before the compiled call
        out = compiled(y, w)
        expected = torch.softmax(y @ w, -1) * 2
    stream.synchronize()
    assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert_compiled_for_cuda()


@needs_gpu
def test_cpu_backend_on_cuda_tensors_runs_eagerly():
    x = torch.randn(8, 33, device="cuda")
    w = torch.randn(33, device="cuda")
    explanation = dynafuse.explain(fused, backend="cpu")(x, w)
    assert explanation.graph_break_count == 1
    assert "CPU backends run CPU tensors" in explanation.break_reasons[0]
    dynafuse.reset()
    out = dynafuse.compile(fused, backend="cpu")(x, w)
    assert out.is_cuda
    assert_close(out, fused(x, w))
    assert dynafuse.compiled_graphs() == []


@needs_gpu
def test_auto_looks_inside_list_arguments():
    xs = [torch.randn(4, 8, device="cuda").t().contiguous().t(), torch.randn(8, device="cuda")]
    out = dynafuse.compile(lambda xs: xs[0] * xs[1] + 1)(xs)
    assert_compiled_for_cuda()
    assert out.is_cuda
    assert_close(out, xs[0] * xs[1] + 1)


class NoArguments(torch.nn.Module):
    """forward() takes no tensor: "auto" asks the module's first parameter."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 5))

    def forward(self):
        return torch.tanh(self.weight) * 2


def test_auto_without_tensor_arguments_uses_the_modules_parameters():
    model = NoArguments()
    with torch.no_grad():
        assert_close(dynafuse.compile(model)(), model())
    assert_compiled()


@needs_gpu
def test_auto_without_tensor_arguments_follows_a_cuda_module():
    model = NoArguments().cuda()
    with torch.no_grad():
        out = dynafuse.compile(model)()
        assert_compiled_for_cuda()
        assert out.is_cuda
        assert_close(out, model())
