"""diffusers (issue 43): a UNet2DConditionModel and an AutoencoderKL's
decode, built from small configs (no weights), are one graph each and match
eager; their attention processors (callable objects whose signatures the
caller inspects) and output dataclasses are interpreted."""
import warnings

import pytest
import torch

import dynafuse
from conftest import assert_close, assert_compiled

diffusers = pytest.importorskip("diffusers")


def small_unet():
    return diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8).eval()


def small_vae():
    return diffusers.AutoencoderKL(
        in_channels=3, out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(32, 64), latent_channels=4, norm_num_groups=8,
        sample_size=32).eval()


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("batch", [1, 2])
def test_unet_is_one_graph(batch):
    torch.manual_seed(0)
    unet = small_unet()
    sample = torch.randn(batch, 4, 16, 16)
    timestep = torch.tensor([10] * batch)
    text = torch.randn(batch, 7, 32)
    compiled = dynafuse.compile(unet)
    with torch.no_grad():
        actual = compiled(sample, timestep, text).sample
        expected = unet(sample, timestep, text).sample
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert_compiled()


def test_vae_decode_is_one_graph():
    torch.manual_seed(1)
    vae = small_vae()
    latents = torch.randn(1, 4, 16, 16)
    compiled = dynafuse.compile(vae.decode)
    with torch.no_grad():
        actual = compiled(latents).sample
        expected = vae.decode(latents).sample
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert_compiled()


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_a_unet_training_step_is_one_graph(checkpointing):
    """Its upsampling (F.interpolate by 2) is traced as a repeat of its
    input in place and differentiates as those views do, with no torch
    call left for torch's autograd; with gradient checkpointing, diffusers hands
    `block.__call__` to torch.utils.checkpoint, a call of the module."""
    torch.manual_seed(0)
    unet = small_unet().train()
    if checkpointing:
        unet.enable_gradient_checkpointing()
    sample, noise = torch.randn(2, 4, 16, 16), torch.randn(2, 4, 16, 16)
    timestep, text = torch.tensor([10, 10]), torch.randn(2, 7, 32)

    def step(sample, timestep, text, noise):
        return torch.nn.functional.mse_loss(unet(sample, timestep, text).sample, noise)

    def gradients(fn):
        unet.zero_grad(set_to_none=True)
        loss = fn(sample, timestep, text, noise)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in unet.parameters()]

    expected_loss, expected = gradients(step)
    loss, actual = gradients(dynafuse.compile(step))
    assert_close(loss, expected_loss, rtol=1e-5, atol=1e-5)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert_close(got, want, rtol=1e-3, atol=1e-4)
    assert_compiled()
    assert dynafuse.stats()["torch_call_gradients"] == 0
