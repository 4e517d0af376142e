"""Small 1x1 convolutions as matrix products (lib/Torch/TorchExternOps.cpp,
pointwiseConvolutionAsProduct): a 1x1, stride-1, unpadded, ungrouped float32
convolution of a channels-last input under 4 MFLOP runs as at::mm (at::addmm
with a bias) of the input viewed [N*H*W, Cin]; compiled results against
eager on random data over batch sizes (1 and empty dims included), bias,
channels-last, sliced and NCHW inputs, training; the convolutions it leaves
to ATen; dynafuse.stats()["pointwise_conv_products"] proves which ran."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, randomize_batch_norm

TOLERANCE = dict(rtol=1e-4, atol=1e-4)


class ShuffleUnit(nn.Module):
    """shufflenet_v2's branch: 1x1 conv, batch norm, relu, depthwise 3x3,
    batch norm, 1x1 conv, batch norm, relu; channels-last after the first
    convolution."""

    def __init__(self, channels=24, bias=False):
        super().__init__()
        self.expand = nn.Conv2d(channels, channels, 1, bias=bias)
        self.bn1 = nn.BatchNorm2d(channels)
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1,
                                   groups=channels, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.project = nn.Conv2d(channels, channels, 1, bias=bias)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.expand(x)))
        y = self.bn2(self.depthwise(y))
        return F.relu(self.bn3(self.project(y))) + x


def products():
    return dynafuse.stats()["pointwise_conv_products"]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_small_pointwise_convolutions_match_eager(bias, batch):
    model = randomize_batch_norm(ShuffleUnit(bias=bias).eval())
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(batch, 24, 16, 16).contiguous(
                memory_format=torch.channels_last)
            assert_close(compiled(x), model(x), **TOLERANCE)
    assert_compiled()
    assert products() == 4, dynafuse.stats()  # two per call


@pytest.mark.parametrize("layout", ["nchw", "sliced", "one_pixel", "empty_batch"])
def test_other_inputs_match_eager(layout):
    model = randomize_batch_norm(ShuffleUnit().eval())
    x = {"nchw": torch.randn(2, 24, 8, 8),
         "sliced": torch.randn(2, 24, 8, 12).contiguous(
             memory_format=torch.channels_last)[..., 2:10],
         "one_pixel": torch.randn(3, 24, 1, 1),
         "empty_batch": torch.randn(0, 24, 8, 8)}[layout]
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x), model(x), **TOLERANCE)
    if layout == "empty_batch":
        assert products() == 0, "an empty batch stays with ATen"


def test_what_stays_a_convolution():
    """Strided, padded, grouped and 3x3 convolutions, and 1x1 ones of 4
    MFLOP or more, are left to ATen (or oneDNN's prepacked path)."""
    x = torch.randn(2, 32, 16, 16).contiguous(memory_format=torch.channels_last)
    for conv in (nn.Conv2d(32, 32, 1, stride=2), nn.Conv2d(32, 32, 1, padding=1),
                 nn.Conv2d(32, 32, 1, groups=2), nn.Conv2d(32, 32, 3, padding=1),
                 nn.Conv2d(32, 256, 1)):  # 2 x 32 x 256 x 512 = 8.4 MFLOP
        dynafuse.reset()
        compiled = dynafuse.compile(conv.eval())
        with torch.no_grad():
            assert_close(compiled(x), conv(x), **TOLERANCE)
        assert products() == 0, conv
    dynafuse.reset()
    small = nn.Conv2d(32, 32, 1).eval()  # 1 MFLOP
    compiled = dynafuse.compile(small)
    with torch.no_grad():
        assert_close(compiled(x), small(x), **TOLERANCE)
    assert products() == 1


def test_training_steps_match_eager():
    torch.manual_seed(0)
    model = ShuffleUnit(bias=True)
    reference = ShuffleUnit(bias=True)
    reference.load_state_dict(model.state_dict())
    compiled = dynafuse.compile(model)
    for _ in range(3):
        x = torch.randn(4, 24, 8, 8).contiguous(memory_format=torch.channels_last)
        got, expected = compiled(x), reference(x)
        assert_close(got, expected, **TOLERANCE)
        got.square().mean().backward()
        expected.square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
