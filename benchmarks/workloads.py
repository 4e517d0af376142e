"""The workloads of the benchmark suite (issue 5), as plain PyTorch code.

Each workload is (name, fn, make_inputs, ideal_bytes or None). Workloads 1-4
are memory bound: ideal traffic is every input read once and the output
written once. Workloads 5-7 are nn.Modules (marked `module=True`): whatever
module capture cannot handle yet runs eagerly (Dynafuse's fallback), and the
table marks those rows EAGER FALLBACK.
"""
import dataclasses
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Workload:
    name: str
    fn: Callable
    make_inputs: Callable[[], tuple]
    ideal_bytes: Optional[int] = None
    module: bool = False


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


# --- 1-4: memory-bound pointwise and row reductions -------------------------

def gelu_affine(x, w, b):
    return F.gelu(x * w + b)


def layer_norm_f(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def layer_norm_hand(x, w, b):
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdim=True)
    return centered / torch.sqrt(var + 1e-5) * w + b


def softmax_f(x):
    return F.softmax(x, dim=-1)


def softmax_hand(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def rms_norm_hand(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def swiglu(a, b):
    return F.silu(a) * b


def column_sum(x):
    return x.sum(0)


def memory_bound():
    def inputs(*shapes):
        return lambda: tuple(torch.randn(*shape) for shape in shapes)

    def ideal(shapes, outputs=1):
        tensors = [torch.empty(*shape) for shape in shapes]
        return nbytes(*tensors) + outputs * tensors[0].numel() * 4

    n = 4096
    return [
        Workload("1 gelu(x*w+b) 4096x4096", gelu_affine,
                 inputs((n, n), (n,), (n,)), ideal([(n, n), (n,), (n,)])),
        Workload("2 F.layer_norm 8192x1024", layer_norm_f,
                 inputs((8192, 1024), (1024,), (1024,)),
                 ideal([(8192, 1024), (1024,), (1024,)])),
        Workload("2 layer_norm by hand 8192x1024", layer_norm_hand,
                 inputs((8192, 1024), (1024,), (1024,)),
                 ideal([(8192, 1024), (1024,), (1024,)])),
        Workload("3 F.softmax 4096x2048", softmax_f, inputs((4096, 2048)),
                 ideal([(4096, 2048)])),
        Workload("3 softmax by hand 4096x2048", softmax_hand,
                 inputs((4096, 2048)), ideal([(4096, 2048)])),
        Workload("4 rms-norm by hand 4096x4096", rms_norm_hand,
                 inputs((n, n), (n,)), ideal([(n, n), (n,)])),
        Workload("4 silu(a)*b 4096x4096", swiglu, inputs((n, n), (n, n)),
                 ideal([(n, n), (n, n)])),
        # A reduction over a non-contiguous dim (the tiling item).
        Workload("4 sum over dim 0 4096x4096", column_sum, inputs((n, n)),
                 n * n * 4 + n * 4),
    ]


# --- 5-7: modules ------------------------------------------------------------

class GPT2Block(nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        attention = F.softmax(scores, dim=-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def modules(include_vision=True):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(),
                        nn.Linear(4096, 1024)).eval()
    block = GPT2Block().eval()
    result = [
        Workload("5 MLP 1024-4096-1024 batch 512", mlp,
                 lambda: (torch.randn(512, 1024),), module=True),
        Workload("6 GPT-2 block d768 h12 seq256 b4", block,
                 lambda: (torch.randn(4, 256, 768),), module=True),
    ]
    if include_vision:
        try:
            import torchvision
        except Exception:  # noqa: BLE001 - torchvision is optional
            return result
        for name in ("resnet18", "mobilenet_v2"):
            model = getattr(torchvision.models, name)(weights=None).eval()
            result.append(Workload(f"7 {name} batch 8 224x224", model,
                                   lambda: (torch.randn(8, 3, 224, 224),),
                                   module=True))
    return result
