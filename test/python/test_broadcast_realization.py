"""Small values that a larger result broadcasts are computed once
(lib/Lowering/RealizationPolicy.cpp, decision 90): swin_v2's relative
position bias (16 * sigmoid of a permuted gather of an MLP's table) and its
shifted-window mask (a window partition of an image mask), added to every
window's attention scores, against eager PyTorch on several window counts,
heads and window sizes, non-contiguous q/k/v and empty batches. Each test
proves the compiled path ran, and where the bias is broadcast enough to pay
for a kernel of its own, that the softmax's kernel no longer computes it."""
import math
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled


class WindowAttentionV2(nn.Module):
    """The attention of torchvision's ShiftedWindowAttentionV2 on
    already-partitioned windows: cosine scores, a learned logit scale, the
    continuous position bias MLP, an optional shifted-window mask."""

    def __init__(self, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, heads, bias=False))
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))
        span = torch.arange(-(window - 1), window, dtype=torch.float32)
        table = torch.stack(torch.meshgrid(span, span, indexing="ij"), dim=-1)
        table = torch.sign(table) * torch.log2(table.abs() + 1.0) / 3.0
        self.register_buffer("coords_table", table.unsqueeze(0))
        grid = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                          indexing="ij")).flatten(1)
        relative = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0) + (window - 1)
        index = relative[:, :, 0] * (2 * window - 1) + relative[:, :, 1]
        self.register_buffer("position_index", index.flatten())

    def forward(self, q, k, v, image_mask=None):
        n = self.window * self.window
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scores = scores * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        table = self.cpb_mlp(self.coords_table).view(-1, self.heads)
        bias = table[self.position_index].view(n, n, -1).permute(2, 0, 1).contiguous()
        scores = scores + (16 * torch.sigmoid(bias)).unsqueeze(0)
        if image_mask is not None:
            height, width = image_mask.shape
            w = self.window
            windows = (height // w) * (width // w)
            parts = image_mask.view(height // w, w, width // w, w).permute(0, 2, 1, 3)
            parts = parts.reshape(windows, n)
            mask = parts.unsqueeze(1) - parts.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            scores = scores.view(-1, windows, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            scores = scores.view(-1, self.heads, n, n)
        return torch.softmax(scores, dim=-1) @ v


def qkv(windows, heads, n, dim=8):
    """q, k and v as torchvision makes them: views of one projection."""
    packed = torch.randn(windows, n, 3, heads, dim).permute(2, 0, 3, 1, 4)
    return packed[0], packed[1], packed[2]


def image_mask(height, width, window):
    """The shifted-window regions of torchvision's mask, as floats."""
    mask = torch.zeros(height, width)
    shift = window // 2
    regions = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for rows in regions:
        for cols in regions:
            mask[rows, cols] = label
            label += 1
    return mask


def softmax_kernels(dump_dir):
    """The texts of the dumped loop kernels holding a row maximum."""
    kernels = []
    for path in pathlib.Path(dump_dir).glob("*/kernels.loop"):
        for text in path.read_text().split("\nkernel @")[1:]:
            if "reduce max" in text:
                kernels.append(text)
    return kernels


def run(module, *args, dump_dir=None):
    if dump_dir is not None:
        dynafuse.config.dump_dir = str(dump_dir)
    compiled = dynafuse.compile(module)
    with torch.no_grad():
        actual, expected = compiled(*args), module(*args)
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert_compiled()
    return compiled


@pytest.mark.parametrize("windows,heads,window", [
    (16, 3, 8), (4, 2, 8), (1, 3, 8), (9, 1, 4), (1, 1, 1)])
def test_position_bias_matches_eager(windows, heads, window, tmp_path):
    module = WindowAttentionV2(heads, window).eval()
    n = window * window
    run(module, *qkv(windows, heads, n), dump_dir=tmp_path)
    (softmax,) = softmax_kernels(tmp_path)
    broadcast = windows * heads * n * n
    if broadcast - heads * n * n >= 1 << 16:
        # Computed once per element of its own, before the softmax.
        assert "sigmoid" not in softmax, softmax


@pytest.mark.parametrize("height,width,window,heads", [
    (64, 64, 8, 3), (32, 16, 8, 2), (8, 8, 8, 2), (12, 8, 4, 1)])
def test_shifted_window_mask_matches_eager(height, width, window, heads, tmp_path):
    module = WindowAttentionV2(heads, window).eval()
    n = window * window
    windows = (height // window) * (width // window)
    run(module, *qkv(windows, heads, n), image_mask(height, width, window), dump_dir=tmp_path)
    (softmax,) = softmax_kernels(tmp_path)
    if windows * heads * n * n - windows * n * n >= 1 << 16:
        # The partitioned mask is read as a buffer, not through the
        # partition's divisions and remainders.
        assert "//" not in softmax and "sigmoid" not in softmax, softmax


def test_empty_batch_of_windows():
    run(WindowAttentionV2(2, 4).eval(), *qkv(0, 2, 16))


def test_bias_follows_weight_updates():
    module = WindowAttentionV2(3, 8).eval()
    args = qkv(16, 3, 64)
    compiled = run(module, *args)
    with torch.no_grad():
        for parameter in module.cpb_mlp.parameters():
            parameter.mul_(-1.5)
        assert_close(compiled(*args), module(*args), rtol=1e-4, atol=1e-4)
    assert dynafuse.stats()["captures"] == 1
