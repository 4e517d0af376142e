"""Activation checkpointing (issue 43): torch.utils.checkpoint.checkpoint,
reentrant or not, and checkpoint_sequential are one graph; the compiled
backward recomputes the region instead of the forward saving its inner
values (fewer saved bytes, counted by a saved_tensors_hooks pack hook as
for eager), and the gradients equal eager's."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import dynafuse
from conftest import assert_compiled


class Block(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Tower(torch.nn.Module):
    def __init__(self, depth=3, width=32, mode=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.mode = mode

    def forward(self, x):
        for block in self.blocks:
            if self.mode is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.mode == "reentrant")
        return x.square().mean()


def saved_bytes(loss_of):
    """Bytes of the distinct storages saved for the backward of loss_of()."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_of()
    loss.backward()
    return sum(storages.values())


def assert_gradients_equal(model, reference):
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("mode", ["non_reentrant", "reentrant"])
@pytest.mark.parametrize("batch", [1, 6])
def test_checkpointed_tower_is_one_graph_and_recomputes(mode, batch):
    torch.manual_seed(0)
    model = Tower(mode=mode)
    reference = copy.deepcopy(model)
    plain = copy.deepcopy(model)
    plain.mode = None
    x = torch.randn(batch, 16, 32, requires_grad=True)
    x_reference = x.detach().clone().requires_grad_()

    compiled = dynafuse.compile(model)
    checkpointed_bytes = saved_bytes(lambda: compiled(x))
    loss = reference(x_reference)
    loss.backward()
    assert_gradients_equal(model, reference)
    torch.testing.assert_close(x.grad, x_reference.grad, rtol=1e-4, atol=1e-5)
    assert_compiled()

    # The same model without checkpoints, compiled, saves more: the
    # region's activations (each block's 4x wide hidden layer).
    dynafuse.reset()
    plain_bytes = saved_bytes(lambda: dynafuse.compile(plain)(x.detach().requires_grad_()))
    hidden = batch * 16 * 128 * 4
    assert checkpointed_bytes + 2 * hidden <= plain_bytes, (checkpointed_bytes, plain_bytes)
    assert_compiled()


def test_reentrant_checkpoint_without_inputs_requiring_grad_detaches():
    """Eager's reentrant checkpoint gives results that require no grad when
    no input does (the parameters inside get no gradient): kept."""
    block = Block()

    def f(x):
        return checkpoint(block, x, use_reentrant=True).sum() + x.sum()

    x = torch.randn(2, 32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = dynafuse.compile(f)(x)
        expected = f(x)
    assert actual.requires_grad == expected.requires_grad == False  # noqa: E712
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert_compiled()


def test_non_reentrant_checkpoint_with_keywords_and_dropout_in_training():
    """Keyword arguments reach the function; a dropout inside the region is
    recomputed with the same mask (the backward's gradient is zero exactly
    where the forward dropped)."""
    torch.manual_seed(3)
    linear = torch.nn.Linear(16, 16)

    def region(x, scale=1.0):
        return F.dropout(linear(x) * scale, p=0.5, training=True)

    def f(x):
        return checkpoint(region, x, use_reentrant=False, scale=2.0)

    x = torch.randn(8, 16, requires_grad=True)
    out = dynafuse.compile(f)(x)
    dropped = out == 0
    out.backward(torch.ones_like(out))
    grad_wrt_output = torch.autograd.grad(
        (linear(x) * 2.0).sum(), x, retain_graph=True)[0]
    assert x.grad.shape == grad_wrt_output.shape
    # Kept elements scale by 2 (1 / (1 - p)) times the region's scale 2.
    assert 0.3 < dropped.float().mean().item() < 0.7
    linear.weight.grad = None
    kept = (~dropped).float() * 4.0
    expected = torch.autograd.grad((linear(x) * kept).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected, rtol=1e-5, atol=1e-5)
    assert_compiled()


def test_checkpoint_sequential():
    torch.manual_seed(4)
    layers = torch.nn.Sequential(*[Block(16) for _ in range(4)])
    reference = copy.deepcopy(layers)

    def f(x, model):
        return checkpoint_sequential(model, 2, x, use_reentrant=False).sum()

    x = torch.randn(3, 16)
    dynafuse.compile(f)(x, layers).backward()
    f(x, reference).backward()
    assert_gradients_equal(layers, reference)
    assert_compiled()


class CallTower(Tower):
    """Checkpoints `block.__call__` (the bound nn.Module.__call__, as
    diffusers' gradient checkpointing passes it) rather than the block."""

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block.__call__, x, use_reentrant=False)
        return x.square().mean()


def test_a_checkpointed_module_call_method_is_one_graph():
    torch.manual_seed(0)
    model = CallTower()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 16, 32)
    dynafuse.compile(model)(x).backward()
    reference(x).backward()
    assert_gradients_equal(model, reference)
    assert_compiled()
