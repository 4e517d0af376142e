"""Graph counts (issue 13): for the torchvision classification zoo and
hand-written transformer code, at batch 1, how many graphs Dynafuse compiles,
how many breaks it meets and how many frames still run eagerly, with graph
breaks resuming after themselves (the default) and without
(dynafuse.config.resume_after_breaks = False: a break runs its frame eagerly,
as before issue 13). Every result is checked against eager.

    .venv/bin/python benchmarks/graph_counts.py [--only resnet18 ...]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse

VISION = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "googlenet",
          "vit_b_16", "shufflenet_v2_x0_5", "densenet121", "efficientnet_b0",
          "regnet_x_400mf", "convnext_tiny", "squeezenet1_0", "mnasnet0_5", "alexnet",
          "swin_t"]


class CausalSelfAttention(nn.Module):
    """GPT-style attention with the causal mask built in forward."""

    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width=256):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Instrumented(nn.Module):
    """What users put in a forward: a shape check that prints, a statistic
    read with .item(), a branch on it."""

    def __init__(self, width=256):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        print("activations", tuple(x.shape), end="\r")
        if x.abs().mean().item() > 100.0:
            x = x / 100.0
        return x.softmax(-1)


def models(selected):
    import torchvision
    torch.manual_seed(0)
    table = [(name, lambda name=name: getattr(torchvision.models, name)().eval(),
              (1, 3, 224, 224)) for name in VISION]
    table += [
        ("TransformerEncoderLayer", lambda: nn.TransformerEncoderLayer(
            256, 4, 1024, batch_first=True).eval(), (1, 64, 256)),
        ("GPT block (causal mask)", lambda: Block().eval(), (1, 64, 256)),
        ("GPT blocks + print/item", lambda: Instrumented().eval(), (1, 64, 256)),
    ]
    return [(name, make, shape) for name, make, shape in table
            if not selected or name in selected]


def counts(model, x, resume):
    dynafuse.reset()
    dynafuse.config.resume_after_breaks = resume
    out = dynafuse.compile(model)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)
    stats = dynafuse.stats()
    return len(dynafuse.compiled_graphs()), stats["graph_breaks"], stats["eager_frames"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"{'model':26}{'graphs':>8}{'breaks':>8}{'eager frames':>14}"
          f"{'  |  without resume: graphs':>28}{'breaks':>8}{'eager frames':>14}")
    totals = [0, 0]
    with torch.no_grad():
        for name, make, shape in models(args.only):
            model, x = make(), torch.randn(shape)
            before = counts(model, x, resume=False)
            after = counts(model, x, resume=True)
            totals[0] += before[2]
            totals[1] += after[2]
            print(f"{name:26}{after[0]:8}{after[1]:8}{after[2]:14}{'':9}"
                  f"{before[0]:19}{before[1]:8}{before[2]:14}")
    dynafuse.config.resume_after_breaks = True
    print(f"frames run eagerly in all: {totals[1]} with resume, {totals[0]} without")


if __name__ == "__main__":
    main()
