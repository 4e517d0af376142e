"""The device of a captured tensor: part of its guard, and checked against
the backend (what can be tested without a GPU; test_backends.py runs CUDA
tensors on a GPU machine)."""
import torch

import dynafuse


def test_tensor_guard_names_the_device():
    f = dynafuse.compile(lambda x: x * 2 + 1)
    f(torch.randn(3))
    (graph,) = dynafuse.compiled_graphs()
    assert any("tensor of size [3] on cpu" in guard for guard in graph["guards"]), graph


def test_tensor_on_an_unsupported_device_runs_eagerly_with_the_device_named():
    # (Eager meta kernels import modules lazily: their frames are seen too.)
    f = dynafuse.compile(lambda x: x * 2 + 1)
    out = f(torch.empty(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)
    reasons = dynafuse._C.break_reasons()
    assert reasons[0].startswith("graph break in ") and "<lambda>" in reasons[0]
    assert "tensor on device meta" in reasons[0], reasons[0]


def test_cuda_backend_refuses_cpu_tensors_and_runs_eagerly():
    f = dynafuse.compile(lambda x: x * 2 + 1, backend="cuda")
    x = torch.randn(3)
    assert torch.equal(f(x), x * 2 + 1)
    reasons = dynafuse._C.break_reasons()
    assert any("backend 'cuda' cannot run" in reason and "on cpu" in reason
               for reason in reasons), reasons
