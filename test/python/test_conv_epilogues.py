"""Batch norm and activations folded into prepacked convolutions
(fuse-conv-epilogues, lib/Graph/ConvolutionEpilogues.cpp; the runtime in
lib/Torch/TorchPrepackedWeights.cpp): compiled results against eager on
random data for each post-op activation, with and without a convolution
bias, over batch sizes and input layouts; dynafuse.stats()
["batch_norm_folds"] proves the folded path ran, once per parameter version:
an in-place update of any of the batch norm's tensors or of the weight is
seen; what stays unfolded (training, a batch norm read twice, the variable
set to 0)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import (INPUT_LAYOUTS, assert_close, assert_compiled, compile_and_compare,
                      infer_between_training_steps,
                      input_in_layout, run_python)

TOLERANCE = dict(rtol=1e-4, atol=1e-4)

ACTIVATIONS = {
    "none": nn.Identity(),
    "relu": nn.ReLU(),
    "relu6": nn.ReLU6(),
    "hardtanh": nn.Hardtanh(-0.5, 0.75),
    "silu": nn.SiLU(),
    "hardswish": nn.Hardswish(),
    "sigmoid": nn.Sigmoid(),
}


def randomize(norm):
    """Random statistics and affine parameters: never the identity."""
    with torch.no_grad():
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return norm


class ConvBlock(nn.Module):
    """conv (32 -> 64, 3x3: 9.4 MFLOP per 16x16 image, prepacked) -> batch
    norm -> activation, then a second op so the block's result is not the
    convolution's."""

    def __init__(self, activation="relu", bias=False, groups=1, channels=32):
        super().__init__()
        out = channels * 2 if groups == 1 else channels
        self.conv = nn.Conv2d(channels, out, 3, padding=1, bias=bias, groups=groups)
        self.norm = randomize(nn.BatchNorm2d(out))
        self.act = ACTIVATIONS[activation]

    def forward(self, x):
        return self.act(self.norm(self.conv(x))) * 2.0 + 1.0


def run(model, x):
    return compile_and_compare(model, x, **TOLERANCE)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_folded_block_matches_eager(activation, bias, batch):
    model = ConvBlock(activation, bias).eval()
    x = torch.randn(batch, 32, 16, 16)
    compiled = run(model, x)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1, dynafuse.stats()
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(batch, 32, 16, 16)
            assert_close(compiled(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["batch_norm_folds"] == 1, "folded again per call"


@pytest.mark.parametrize("layout", INPUT_LAYOUTS)
def test_input_layouts(layout):
    model = ConvBlock("relu6").eval()
    x = input_in_layout(layout, 32)
    run(model, x)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1


@pytest.mark.parametrize("layout", INPUT_LAYOUTS)
@pytest.mark.parametrize("groups", [1, 4])
def test_a_convolution_after_a_folded_block(layout, groups):
    """conv-bn-relu, then a convolution of its result: the folded result
    takes the convolution's layout (channels-last of a channels-last input),
    and what reads it is retyped to match (this failed to compile)."""
    model = nn.Sequential(
        nn.Conv2d(32, 32, 3, padding=1, groups=groups, bias=False), randomize(nn.BatchNorm2d(32)),
        nn.ReLU(), nn.Conv2d(32, 48, 3, stride=2, padding=1, groups=groups), nn.ReLU()).eval()
    x = input_in_layout(layout, 32)
    run(model, x)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1


def test_large_depthwise_convolution_folds():
    # 64 channels 3x3 at 48x48: 1.3M multiply-adds, past the window taps.
    model = ConvBlock("relu6", groups=64, channels=64).eval()
    run(model, torch.randn(1, 64, 48, 48))
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1


@pytest.mark.parametrize("tensor", ["running_mean", "running_var", "weight", "bias",
                                    "conv_weight"])
def test_in_place_update_of_any_folded_tensor_is_seen(tensor):
    model = ConvBlock("silu", bias=True).eval()
    x = torch.randn(1, 32, 16, 16)
    compiled = run(model, x)
    assert dynafuse.stats()["batch_norm_folds"] == 1
    with torch.no_grad():
        if tensor == "conv_weight":
            model.conv.weight.mul_(-0.5)
        else:
            getattr(model.norm, tensor).add_(0.25)
        assert_close(compiled(x), model(x), **TOLERANCE)
    assert dynafuse.stats()["batch_norm_folds"] == 2
    assert dynafuse.stats()["captures"] == 1


def test_optimizer_steps_and_running_statistics_between_inference_calls():
    """Training steps run eagerly move the weights and the running
    statistics; each compiled inference call after one folds again."""
    model = ConvBlock("relu")
    infer_between_training_steps(model, dynafuse.compile(model),
                                 torch.randn(2, 32, 16, 16), **TOLERANCE)
    assert dynafuse.stats()["batch_norm_folds"] == 4


def residual_adds():
    return dynafuse.stats()["conv_residual_adds"]


def test_residual_block_folds_both_convolutions():
    """Residual block: conv-bn-relu, conv-bn, add, relu: the first fold takes
    the activation, the second the add of the block's input and the relu
    after it (oneDNN's binary post-op)."""

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.na = randomize(nn.BatchNorm2d(64))
            self.b = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.nb = randomize(nn.BatchNorm2d(64))

        def forward(self, x):
            y = F.relu(self.na(self.a(x)))
            return F.relu(self.nb(self.b(y)) + x)

    x = torch.randn(2, 64, 12, 12)
    kept = x.clone()
    run(Residual().eval(), x)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 2
    assert residual_adds() == 1
    assert torch.equal(x, kept), "the residual (an input) is read, not written"


class Bottleneck(nn.Module):
    """torchvision's bottleneck order: the main branch's last batch norm is
    computed before the downsampling branch it is added to."""

    def __init__(self, channels=32, bias=False, relu_after=True):
        super().__init__()
        wide = channels * 2
        self.a = nn.Conv2d(channels, channels, 1, bias=bias)
        self.na = randomize(nn.BatchNorm2d(channels))
        self.b = nn.Conv2d(channels, wide, 3, padding=1, bias=bias)
        self.nb = randomize(nn.BatchNorm2d(wide))
        self.down = nn.Conv2d(channels, wide, 1, bias=bias)
        self.nd = randomize(nn.BatchNorm2d(wide))
        self.relu_after = relu_after

    def forward(self, x):
        out = self.nb(self.b(F.relu(self.na(self.a(x)))))
        out += self.nd(self.down(x))
        return F.relu(out) if self.relu_after else out


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("relu_after", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_bottleneck_adds_its_downsampled_input_in_the_convolution(bias, relu_after, batch):
    model = Bottleneck(bias=bias, relu_after=relu_after).eval()
    compiled = run(model, torch.randn(batch, 32, 16, 16))
    assert_compiled()
    assert residual_adds() == 1
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(batch, 32, 16, 16)
            assert_close(compiled(x), model(x), **TOLERANCE)
    assert residual_adds() == 3, "every run adds in the convolution"


@pytest.mark.parametrize("layout", INPUT_LAYOUTS)
def test_residual_from_an_input_in_any_layout(layout):
    """The residual is the block's input: channels-last, a strided slice, or
    expanded over the batch (stride 0), so oneDNN gets it converted."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(32, 32, 3, padding=1)
            self.norm = randomize(nn.BatchNorm2d(32))

        def forward(self, x):
            return x + self.norm(self.conv(x))  # residual on the left

    x = input_in_layout(layout, 32)
    run(Block().eval(), x)
    assert_compiled()
    assert residual_adds() == 1


def test_residual_then_an_activation_oneDNN_cannot_add_after_it():
    """Only relu may follow the add as a post-op: a sigmoid stays a kernel of
    its own after the fused convolution."""
    class Gated(Bottleneck):
        def forward(self, x):
            return torch.sigmoid(super().forward(x))

    run(Gated(relu_after=False).eval(), torch.randn(2, 32, 16, 16))
    assert_compiled()
    assert residual_adds() == 1


def test_broadcast_residual_is_added_by_a_kernel():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(32, 64, 3, padding=1)
            self.norm = randomize(nn.BatchNorm2d(64))

        def forward(self, x, r):
            return F.relu(self.norm(self.conv(x)) + r)

    model = Block().eval()
    x, r = torch.randn(2, 32, 16, 16), torch.randn(1, 64, 1, 16)
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        assert_close(compiled(x, r), model(x, r), **TOLERANCE)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1
    assert residual_adds() == 0


def test_torchvision_resnets_add_every_residual_in_a_convolution():
    torchvision = pytest.importorskip("torchvision")
    for make, blocks in ((torchvision.models.resnet18, 8), (torchvision.models.resnet50, 16)):
        dynafuse.reset()
        model = make(num_classes=10).eval()
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                randomize(module)
        run(model, torch.randn(2, 3, 64, 64))
        assert_compiled()
        assert residual_adds() == blocks, (make.__name__, dynafuse.stats())


def test_batch_norm_read_twice_keeps_its_activation_apart():
    class Gated(ConvBlock):
        def forward(self, x):
            y = self.norm(self.conv(x))
            return torch.sigmoid(y) * y

    run(Gated().eval(), torch.randn(1, 32, 16, 16))
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 1


def test_training_graphs_fold_nothing():
    model = ConvBlock("relu").train()
    compiled = dynafuse.compile(model)
    compiled(torch.randn(2, 32, 16, 16)).sum().backward()
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 0


def test_a_torchvision_network_with_relu6_folds():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            randomize(module)
    run(model, torch.randn(2, 3, 96, 96))
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] >= 10, dynafuse.stats()


@pytest.mark.parametrize("setting,folds", [("0", False), ("1", True)])
def test_the_variable_turns_folding_off(setting, folds):
    code = (
        "import torch, dynafuse, torch.nn as nn\n"
        "m = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64),\n"
        "                  nn.ReLU(), nn.Conv2d(64, 8, 1)).eval()\n"
        "m[1].running_var.uniform_(0.5, 2.0)\n"
        "x = torch.randn(1, 64, 16, 16)\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(dynafuse.compile(m)(x), m(x), rtol=1e-4, atol=1e-4)\n"
        "s = dynafuse.stats()\n"
        "assert s['captures'] == 1 and s['weight_prepacks'] >= 1, s\n"
        "print(s['batch_norm_folds'])\n")
    printed = run_python(code, DYNAFUSE_FOLD_BATCH_NORM=setting)
    assert (int(printed) > 0) == folds


def test_two_instances_of_one_model_keep_their_own_folded_weights():
    """Two instances of one class share the compiled entry (same code, same
    guards): each keeps its own folded copy instead of folding again on
    every call that alternates between them."""
    first, second = ConvBlock("relu").eval(), ConvBlock("relu").eval()
    compiled = [dynafuse.compile(first), dynafuse.compile(second)]
    x = torch.randn(1, 32, 16, 16)
    with torch.no_grad():
        for _ in range(3):
            for model, fast in zip((first, second), compiled):
                assert_close(fast(x), model(x), **TOLERANCE)
    assert_compiled()
    assert dynafuse.stats()["batch_norm_folds"] == 2, dynafuse.stats()


class LargeResidual(nn.Module):
    """A 1x1 conv-bn-act over a 64x128x128 map (2^20 output elements: the
    size whose first calls time the packed weight against at::conv2d),
    then a 3x3 conv-bn with the block's input added and relu."""

    def __init__(self, activation):
        super().__init__()
        self.a = nn.Conv2d(64, 64, 1, bias=True)
        self.na = randomize(nn.BatchNorm2d(64))
        self.act = ACTIVATIONS[activation]
        self.b = nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.nb = randomize(nn.BatchNorm2d(64))

    def forward(self, x):
        y = self.act(self.na(self.a(x)))
        return F.relu(self.nb(self.b(y)) + x)


@pytest.mark.parametrize("activation", ["none", "relu", "silu", "hardtanh"])
def test_large_convolutions_time_both_paths_and_both_match_eager(activation):
    """The first calls alternate between the packed weight and at::conv2d
    (with the folded batch norm, the activation and the residual applied
    after it); every call matches eager, then each convolution keeps the
    faster."""
    model = LargeResidual(activation).eval()
    compiled = dynafuse.compile(model)
    x = torch.randn(1, 64, 128, 128).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = model(x)
        for _ in range(10):
            assert_close(compiled(x), expected, **TOLERANCE)
    assert_compiled()
    assert dynafuse.stats()["convolution_choices"] == 2, dynafuse.stats()
    assert residual_adds() == 10, "every run adds the residual in the convolution step"
