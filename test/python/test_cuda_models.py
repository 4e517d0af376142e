"""Whole models on CUDA tensors through the cuda backend: each is captured as
one graph whose guards name the device, runs NVRTC-compiled kernels on
torch's current stream with ATen's CUDA kernels for the externs
(convolutions, matmuls), and matches eager torch on the same GPU. They need
a GPU and skip elsewhere; benchmarks/gpu/check.sh runs them first thing on
a GPU machine (with backend "auto" and "cuda")."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_outputs_close, randomize_batch_norm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device")
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}  # TF32-free, but kernels reassociate


@pytest.fixture(autouse=True)
def exact_matmuls():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def assert_ran_on_cuda(graphs=1):
    stats = dynafuse.stats()
    assert stats["graph_breaks"] == 0 and stats["compile_failures"] == 0, stats
    infos = dynafuse.compiled_graphs()
    assert len(infos) == graphs, infos
    for info in infos:
        # CPU backends refuse CUDA tensors (a graph break): a graph guarded
        # on cuda inputs, with kernels, ran the cuda backend.
        assert any(" on cuda" in guard for guard in info["guards"]), info["guards"]
        assert info["kernels"] >= 1, info


def run_both(model, *inputs, backend):
    with torch.no_grad():
        expected = model(*inputs)
        compiled = dynafuse.compile(model, backend=backend)
        actual = compiled(*inputs)
        again = compiled(*inputs)  # the cached entry
    torch.cuda.synchronize()
    assert_outputs_close(actual, expected, **TOLERANCE)
    assert_outputs_close(again, expected, **TOLERANCE)
    assert dynafuse.stats()["cache_hits"] >= 1
    return actual


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return torch.softmax(self.head(y), dim=-1)


class AttentionBlock(nn.Module):
    def __init__(self, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        return x + self.out(y)


@pytest.mark.parametrize("backend", ["auto", "cuda"])
@pytest.mark.parametrize("batch", [1, 7])
def test_mlp(backend, batch):
    model = MLP().cuda().eval()
    x = torch.randn(batch, 33, 64, device="cuda")
    run_both(model, x, backend=backend)
    assert_ran_on_cuda()


@pytest.mark.parametrize("backend", ["auto", "cuda"])
def test_conv_net(backend):
    model = ConvNet().cuda().eval()
    randomize_batch_norm(model)
    x = torch.randn(4, 3, 20, 20, device="cuda")
    run_both(model, x, backend=backend)
    assert_ran_on_cuda()


@pytest.mark.parametrize("backend", ["auto", "cuda"])
def test_attention_block_non_contiguous_input(backend):
    model = AttentionBlock().cuda().eval()
    x = torch.randn(2, 64, 19, device="cuda").transpose(1, 2)  # (2, 19, 64)
    run_both(model, x, backend=backend)
    assert_ran_on_cuda()


def test_resnet18():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18().cuda().eval()
    randomize_batch_norm(model)
    image = torch.randn(2, 3, 64, 64, device="cuda")
    run_both(model, image, backend="cuda")
    assert_ran_on_cuda()
    (info,) = dynafuse.compiled_graphs()
    # ATen's CUDA kernels: 20 convolutions, the stem's max pool and fc; the
    # global average pool is a mean, a fused reduction (decision 72).
    assert info["extern_calls"] == 22
