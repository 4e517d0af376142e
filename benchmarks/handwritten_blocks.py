"""Hand-written transformer blocks in the styles library code uses (issue 14),
for benchmarks/library_models.py: a GPT-2 decoder (causal mask made with
factories on the input's device and dtype), a BERT encoder (an extended
attention mask from torch.finfo, keyword arguments forwarded through the
layers, a dataclass output) and a T5 encoder (RMS norm, bucketed relative
position bias). Small widths, random weights, batch 1."""
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS, LAYERS, SEQUENCE = 256, 4, 4, 64


def split_heads(x, heads):
    b, t, c = x.shape
    return x.view(b, t, heads, c // heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class GPT2StyleBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.c_attn, self.c_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.c_fc, self.mlp_proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        t = x.size(1)
        q, k, v = self.c_attn(self.ln_1(x)).split(WIDTH, dim=2)
        q, k, v = (split_heads(z, HEADS) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        causal = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        x = x + self.c_proj(merge_heads(F.softmax(scores, dim=-1) @ v))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2StyleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.position = nn.Embedding(SEQUENCE, WIDTH)
        self.blocks = nn.ModuleList(GPT2StyleBlock() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)

    def forward(self, x):
        positions = torch.arange(x.size(1), device=x.device)
        x = x + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    pooler_output: Optional[torch.Tensor] = None


class BertStyleLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.output, self.norm1 = nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH, eps=1e-12)
        self.intermediate = nn.Linear(WIDTH, 4 * WIDTH)
        self.out, self.norm2 = nn.Linear(4 * WIDTH, WIDTH), nn.LayerNorm(WIDTH, eps=1e-12)

    def forward(self, hidden, attention_mask=None, **kwargs):
        q, k, v = (split_heads(f(hidden), HEADS) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        if attention_mask is not None:
            scores = scores + attention_mask
        context = merge_heads(scores.softmax(-1) @ v)
        hidden = self.norm1(hidden + self.output(context))
        return self.norm2(hidden + self.out(F.gelu(self.intermediate(hidden))))


class BertStyleEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(BertStyleLayer() for _ in range(LAYERS))
        self.pooler = nn.Linear(WIDTH, WIDTH)

    def forward(self, hidden, attention_mask=None, return_dict=True, **kwargs):
        extended = None
        if attention_mask is not None:
            extended = attention_mask[:, None, None, :].to(hidden.dtype)
            extended = (1.0 - extended) * torch.finfo(hidden.dtype).min
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=extended, **kwargs)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        if not return_dict:
            return hidden, pooled
        return EncoderOutput(last_hidden_state=hidden, pooler_output=pooled)


class T5StyleNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(WIDTH)), eps

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def relative_position_bucket(relative, buckets=32, max_distance=128):
    """T5's bidirectional buckets: exact for small distances, logarithmic
    beyond."""
    buckets //= 2
    bucket = (relative > 0).to(torch.long) * buckets
    relative = torch.abs(relative)
    max_exact = buckets // 2
    is_small = relative < max_exact
    large = max_exact + (torch.log(relative.float() / max_exact)
                         / math.log(max_distance / max_exact)
                         * (buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return bucket + torch.where(is_small, relative, large)


class T5StyleLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = T5StyleNorm(), T5StyleNorm()
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(4))
        self.wi, self.wo = nn.Linear(WIDTH, 4 * WIDTH, bias=False), nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x, position_bias):
        h = self.norm1(x)
        q, k, v = (split_heads(f(h), HEADS) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) + position_bias  # T5 does not scale
        x = x + self.o(merge_heads(scores.softmax(-1) @ v))
        return x + self.wo(F.relu(self.wi(self.norm2(x))))


class T5StyleEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.relative_bias = nn.Embedding(32, HEADS)
        self.layers = nn.ModuleList(T5StyleLayer() for _ in range(LAYERS))
        self.final_norm = T5StyleNorm()

    def forward(self, x):
        t = x.size(1)
        context = torch.arange(t, dtype=torch.long, device=x.device)[:, None]
        memory = torch.arange(t, dtype=torch.long, device=x.device)[None, :]
        buckets = relative_position_bucket(memory - context)
        bias = self.relative_bias(buckets).permute(2, 0, 1).unsqueeze(0)
        for layer in self.layers:
            x = layer(x, bias)
        return self.final_norm(x)


def handwritten_blocks(selected, batch=1):
    """(name, make, inputs) for benchmarks/library_models.py, on `batch`
    sequences."""
    hidden = lambda: ((torch.randn(batch, SEQUENCE, WIDTH),), {})  # noqa: E731

    def with_mask():
        mask = torch.ones(batch, SEQUENCE)
        mask[:, SEQUENCE - 8:] = 0  # padding at the end
        return (torch.randn(batch, SEQUENCE, WIDTH),), {"attention_mask": mask}

    table = [("gpt2-style blocks", GPT2StyleModel, hidden),
             ("bert-style encoder", BertStyleEncoder, with_mask),
             ("t5-style encoder", T5StyleEncoder, hidden)]
    for name, make, inputs in table:
        if not selected or name in selected:
            yield name, lambda make=make: make().eval(), inputs
