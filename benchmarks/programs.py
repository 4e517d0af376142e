"""Everyday training and inference programs (issue 43), eager against
Dynafuse and torch.compile in one process: autocast bf16 around and inside
a compiled function, activation checkpointing in a training step,
nn.TransformerEncoder in training and in eval with a padding mask,
diffusers' UNet2DConditionModel and AutoencoderKL.decode (small configs,
random weights), and training steps of a char-level GPT, resnet18, the
TransformerEncoder and the UNet with and without autocast bf16 and
checkpointing.

Per program and compiler: the graphs it made (Dynafuse: captures; its graph
breaks), the first call's time (compiles included), the median call over
--runs rounds in which every compiler runs once in turn, with its spread,
and the ratio to eager. Outputs (and for training rows the loss) are checked
against eager's at bf16 or f32 tolerance; a mismatch is printed.

    .venv/bin/python benchmarks/programs.py [--runs 10] [--no-inductor]
        [--only autocast_mlp ...] [--markdown FILE]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

# Cold compiles: both compilers get fresh, empty on-disk caches.
os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import dynafuse  # noqa: E402
from measure import MarkdownTable, spread  # noqa: E402


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, padding=1, stride=2), torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.body(x)


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class CheckpointedTower(torch.nn.Module):
    def __init__(self, width=256, depth=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


class CausalBlock(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class CharGPT(torch.nn.Module):
    """A character-level GPT (65 symbols, 4 blocks of width 128, context 64)
    whose forward returns the cross-entropy loss."""

    def __init__(self, checkpointed=False, vocab=65, width=128, depth=4, heads=4, context=64):
        super().__init__()
        self.tokens, self.positions = (torch.nn.Embedding(vocab, width),
                                       torch.nn.Embedding(context, width))
        self.blocks = torch.nn.ModuleList(CausalBlock(width, heads) for _ in range(depth))
        self.norm, self.head = torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab, bias=False)
        self.checkpointed = checkpointed

    def forward(self, idx, targets):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def training_step(model, loss_of, bf16=False):
    """A make(wrap) of one training step: zero the gradients, the compiled
    loss (under autocast bf16 inside the compiled function when asked), its
    backward."""
    def step(*inputs):
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return loss_of(*inputs)
        return loss_of(*inputs)

    def make(wrap):
        compiled = wrap(step)

        def run(*inputs):
            model.zero_grad(set_to_none=True)
            loss = compiled(*inputs)
            loss.backward()
            return loss
        return run
    return make


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 512))


def encoder():
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def padding_mask(batch, length):
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[1:, length * 3 // 4:] = True
    return mask


def programs():
    """name -> (make the callable for a compiler, inputs, training, bf16)."""
    torch.manual_seed(0)
    rows = {}

    def inference_under_autocast(model):
        def make(wrap):
            compiled = wrap(model)

            def run(x):
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                    return compiled(x)
            return run
        return make

    rows["autocast_mlp (around, inference b64)"] = (
        inference_under_autocast(mlp().eval()), (torch.randn(64, 512),), False, True)
    rows["autocast_convnet (around, inference b8)"] = (
        inference_under_autocast(ConvNet().eval()), (torch.randn(8, 3, 64, 64),), False, True)

    def autocast_step(model):
        def step(x, target):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return F.mse_loss(model(x), target)

        def make(wrap):
            compiled = wrap(step)

            def run(x, target):
                model.zero_grad(set_to_none=True)
                loss = compiled(x, target)
                loss.backward()
                return loss
            return run
        return make

    rows["autocast_mlp training step (inside, b64)"] = (
        autocast_step(mlp()), (torch.randn(64, 512), torch.randn(64, 512)), True, True)

    tower = CheckpointedTower()

    def checkpoint_step(wrap):
        compiled = wrap(tower)

        def run(x):
            tower.zero_grad(set_to_none=True)
            loss = compiled(x).square().mean()
            loss.backward()
            return loss
        return run

    rows["checkpointed tower training step (4 blocks d256, 8x64)"] = (
        checkpoint_step, (torch.randn(8, 64, 256),), True, False)

    train_encoder = encoder().train()

    def encoder_step(wrap):
        compiled = wrap(train_encoder)

        def run(x, mask):
            train_encoder.zero_grad(set_to_none=True)
            loss = compiled(x, src_key_padding_mask=mask).square().mean()
            loss.backward()
            return loss
        return run

    rows["TransformerEncoder training step (2 layers d128, 8x64, mask)"] = (
        encoder_step, (torch.randn(8, 64, 128), padding_mask(8, 64)), True, False)

    eval_encoder = encoder().eval()

    def encoder_eval(wrap):
        compiled = wrap(eval_encoder)

        def run(x, mask):
            with torch.no_grad():
                return compiled(x, src_key_padding_mask=mask)
        return run

    rows["TransformerEncoder eval (2 layers d128, 8x64, mask)"] = (
        encoder_eval, (torch.randn(8, 64, 128), padding_mask(8, 64)), False, False)

    tokens = (torch.randint(0, 65, (8, 64)), torch.randint(0, 65, (8, 64)))
    for label, checkpointed, bf16 in (("", False, False), (", autocast bf16", False, True),
                                      (", checkpointed blocks", True, False)):
        gpt = CharGPT(checkpointed)
        rows[f"char GPT training step (4 blocks d128, 8x64){label}"] = (
            training_step(gpt, gpt, bf16), tokens, True, bf16)

    import torchvision
    images = (torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,)))
    for label, bf16 in (("", False), (", autocast bf16", True)):
        resnet = torchvision.models.resnet18(num_classes=10).train()
        rows[f"resnet18 training step (b4, 64x64){label}"] = (
            training_step(resnet, lambda x, y, net=resnet: F.cross_entropy(net(x), y), bf16),
            images, True, bf16)

    bf16_encoder = encoder().train()
    rows["TransformerEncoder training step (2 layers d128, 8x64, mask), autocast bf16"] = (
        training_step(bf16_encoder, lambda x, mask: bf16_encoder(
            x, src_key_padding_mask=mask).float().square().mean(), True),
        (torch.randn(8, 64, 128), padding_mask(8, 64)), True, True)

    try:
        import diffusers
    except ImportError:
        return rows
    unet = diffusers.UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(64, 128), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=64,
        attention_head_dim=8, norm_num_groups=16).eval()

    def unet_call(wrap):
        compiled = wrap(unet)

        def run(sample, timestep, text):
            with torch.no_grad():
                return compiled(sample, timestep, text).sample
        return run

    rows["diffusers UNet2DConditionModel (b2, 32x32 latents)"] = (
        unet_call, (torch.randn(2, 4, 32, 32), torch.tensor([10, 10]), torch.randn(2, 8, 64)),
        False, False)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(64, 128),
        latent_channels=4, norm_num_groups=16, sample_size=64).eval()

    def vae_decode(wrap):
        compiled = wrap(vae.decode)

        def run(latents):
            with torch.no_grad():
                return compiled(latents).sample
        return run

    rows["diffusers AutoencoderKL.decode (32x32 latents)"] = (
        vae_decode, (torch.randn(1, 4, 32, 32),), False, False)

    unet_inputs = (torch.randn(2, 4, 32, 32), torch.tensor([10, 10]), torch.randn(2, 8, 64),
                   torch.randn(2, 4, 32, 32))
    for label, checkpointed in (("", False), (", gradient checkpointing", True)):
        trained = diffusers.UNet2DConditionModel(
            sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(64, 128),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=64,
            attention_head_dim=8, norm_num_groups=16).train()
        if checkpointed:
            trained.enable_gradient_checkpointing()
        rows[f"diffusers UNet training step (b2, 32x32 latents){label}"] = (
            training_step(trained, lambda sample, t, text, noise, net=trained: F.mse_loss(
                net(sample, t, text).sample, noise)), unet_inputs, True, False)
    return rows


def close(actual, expected, bf16):
    tolerance = 5e-2 if bf16 else 1e-3
    return torch.allclose(actual.float(), expected.float(), rtol=tolerance, atol=tolerance)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    table = MarkdownTable("| program | compiler | graphs (breaks) | first call s | ms (± spread) "
                          "| vs eager | matches eager |")
    for name, (make, inputs, training, bf16) in programs().items():
        if args.only and not any(key in name for key in args.only):
            continue
        dynafuse.reset()
        torch._dynamo.reset()
        runs = {"eager": make(lambda f: f)}
        first = {}
        graphs = {}
        expected = runs["eager"](*inputs).detach()
        start = time.perf_counter()
        runs["dynafuse"] = make(dynafuse.compile)
        actual = runs["dynafuse"](*inputs).detach()
        first["dynafuse"] = time.perf_counter() - start
        stats = dynafuse.stats()
        graphs["dynafuse"] = f"{stats['captures']} ({stats['graph_breaks']})"
        matches = {"dynafuse": close(actual, expected, bf16), "eager": True}
        if not args.no_inductor:
            from torch._dynamo.utils import counters
            counters.clear()
            start = time.perf_counter()
            runs["torch.compile"] = make(torch.compile)
            actual = runs["torch.compile"](*inputs).detach()
            first["torch.compile"] = time.perf_counter() - start
            graphs["torch.compile"] = (f"{counters['stats']['unique_graphs']} "
                                       f"({sum(counters['graph_break'].values())})")
            matches["torch.compile"] = close(actual, expected, bf16)
        samples = {key: [] for key in runs}
        for _ in range(args.runs):
            for key, run in runs.items():
                start = time.perf_counter()
                run(*inputs)
                samples[key].append((time.perf_counter() - start) * 1e3)
        eager_ms = statistics.median(samples["eager"])
        for key in runs:
            median = statistics.median(samples[key])
            table.add(f"| {name} | {key} | {graphs.get(key, '-')} | "
                      f"{first.get(key, 0):.2f} | {median:.2f} ± {spread(samples[key]):.0%} | "
                      f"{eager_ms / median:.2f}x | {'yes' if matches[key] else 'NO'} |")
    table.append_to(args.markdown, f"torch {torch.__version__}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    sys.exit(main())
