"""Every transformers architecture built from a tiny config (issue 41): the
base model class of each model type in transformers' auto mapping
(MODEL_MAPPING_NAMES), with a config shrunk to a few layers of width 64,
random weights, nothing downloaded, and inputs made from the model's
main input (token ids, pixels, audio). Each is measured by
model_suite.py (graphs, breaks, settled frames, correctness, first call,
speed against eager and torch.compile's graph count and, with --inductor,
its speed).

Architectures that cannot be built this way (a config field the shrinking
breaks, a model needing extra inputs) are listed with why, and counted
apart: they say nothing of either compiler.

    .venv/bin/python benchmarks/transformers_suite.py [--only gemma bloom ...]
        [--limit N] [--sample N] [--inductor] [--runs 5] [--warmup 8]
        [--markdown docs/transformers-suite.md]
"""
import inspect
import sys

import torch

import model_suite

WIDTH, LAYERS, HEADS = 64, 2, 4
TINY = {
    # decoder-only and encoder models
    "hidden_size": WIDTH, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": 2, "intermediate_size": 2 * WIDTH, "head_dim": WIDTH // HEADS,
    "vocab_size": 256, "max_position_embeddings": 128, "n_positions": 128,
    "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS, "n_inner": 2 * WIDTH,
    "num_layers": LAYERS, "num_heads": HEADS, "d_model": WIDTH, "d_ff": 2 * WIDTH,
    "d_kv": WIDTH // HEADS, "embed_dim": WIDTH, "ffn_dim": 2 * WIDTH,
    # seq2seq
    "encoder_layers": LAYERS, "decoder_layers": LAYERS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS,
    "encoder_ffn_dim": 2 * WIDTH, "decoder_ffn_dim": 2 * WIDTH,
    "num_decoder_layers": LAYERS,
    # mixtures of experts: a few small experts
    "num_local_experts": 4, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": WIDTH, "shared_expert_intermediate_size": WIDTH,
    # special tokens inside the small vocabulary
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "decoder_start_token_id": 0,
}
BATCH, TOKENS = 2, 64
MAX_PARAMETERS = 100_000_000


# Multi-head latent attention (DeepSeek-V3's MLA and its descendants): its
# own head dims, with head_dim the rotary part, as their configs derive it.
LATENT_ATTENTION = {"qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
                    "kv_lora_rank": 32, "q_lora_rank": 32, "index_head_dim": 16}


def per_layer(values):
    """A per-layer list cut to LAYERS entries keeping its kinds where it
    can: the first entry, then the first that differs (a hybrid's linear
    and full attention layers, a MoE's dense and sparse ones)."""
    kept = [values[0]]
    for value in values[1:]:
        if len(kept) == LAYERS:
            break
        if value != kept[0] or len(values) <= LAYERS:
            kept.append(value)
    while len(kept) < LAYERS:
        kept.append(values[len(kept) % len(values)])
    return kept


def shrink(config):
    """Sets each TINY field the config has (and no other), cuts per-layer
    lists to the layers kept, and shrinks latent attention's dims
    consistently."""
    def has(name):
        try:
            return hasattr(config, name)
        except Exception:  # noqa: BLE001 - per-layer attributes raise on read
            return False

    def assign(name, value):
        try:
            setattr(config, name, value)
        except Exception:  # noqa: BLE001 - read-only properties
            pass

    layers = getattr(config, "num_hidden_layers", None) if has("num_hidden_layers") else None
    latent = has("qk_rope_head_dim") and isinstance(getattr(config, "qk_rope_head_dim"), int)
    for name, value in TINY.items():
        if name == "head_dim" and latent:
            continue
        if has(name) and not isinstance(getattr(config, name), (list, tuple, dict)):
            assign(name, value)
    if latent:
        for name, value in LATENT_ATTENTION.items():
            if has(name) and getattr(config, name) is not None:
                assign(name, value)
        assign("head_dim", LATENT_ATTENTION["qk_rope_head_dim"])
        if has("qk_head_dim"):
            assign("qk_head_dim", LATENT_ATTENTION["qk_rope_head_dim"]
                   + LATENT_ATTENTION["qk_nope_head_dim"])
    if isinstance(layers, int) and layers > LAYERS:
        for name, value in list(vars(config).items()):
            if isinstance(value, list) and len(value) == layers and value:
                assign(name, per_layer(value))
        # Hybrids placing attention every `period` layers from `offset`.
        for name in list(vars(config)):
            if name.endswith("_layer_period") and isinstance(getattr(config, name), int):
                assign(name, LAYERS)
                assign(name.replace("_period", "_offset"), 1)
    for sub in ("text_config", "vision_config", "encoder", "decoder"):
        inner = getattr(config, sub, None)
        if inner is not None and hasattr(inner, "to_dict") and inner is not config:
            shrink(inner)
    return config


def architectures(selected, limit=None, sample=None):
    """(model type, base model class name) of every architecture (or the
    first `limit`, or `sample` of them evenly spaced in alphabetical
    order)."""
    from types import SimpleNamespace

    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    names = [(k, v[0] if isinstance(v, (list, tuple)) else v)
             for k, v in sorted(MODEL_MAPPING_NAMES.items())]
    yield from model_suite.selected(names, SimpleNamespace(only=selected, limit=limit,
                                                           sample=sample))


def build(model_type, class_name):
    """The model (eval mode, random weights) and a function making its inputs."""
    import transformers
    config = shrink(transformers.AutoConfig.for_model(model_type))
    model_class = getattr(transformers, class_name)
    try:  # sized on the meta device first: a table the shrinking missed
        with torch.device("meta"):
            parameters = sum(p.numel() for p in model_class(config).parameters())
    except Exception:  # noqa: BLE001 - models that cannot be built there
        parameters = 0
    if parameters > MAX_PARAMETERS:
        raise MemoryError(f"{parameters / 1e6:.0f}M parameters after shrinking: "
                          "a model this suite does not shrink")
    torch.manual_seed(0)
    model = model_class(config).eval()
    main = getattr(model, "main_input_name", "input_ids")
    generator = torch.Generator().manual_seed(1)
    if main == "input_ids":
        vocab = min(getattr(config, "vocab_size", 256) or 256, 256)
        data = {"input_ids": torch.randint(3, vocab, (BATCH, TOKENS), generator=generator)}
        if getattr(config, "is_encoder_decoder", False):
            data["decoder_input_ids"] = torch.randint(3, vocab, (BATCH, TOKENS // 2),
                                                      generator=generator)
    elif main == "pixel_values":
        size = getattr(config, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(config, "num_channels", 3)
        data = {"pixel_values": torch.randn(BATCH, channels, size, size, generator=generator)}
    elif main == "input_values":
        data = {"input_values": torch.randn(BATCH, 16000, generator=generator)}
    elif main == "input_features":
        bins = getattr(config, "num_mel_bins", 80)
        data = {"input_features": torch.randn(BATCH, bins, 3000, generator=generator)}
    else:
        raise ValueError(f"main input {main!r} not made by this suite")
    vision = getattr(config, "vision_config", None)
    interleaved = any(hasattr(config, name) for name in ("image_token_id", "image_token_index"))
    if main != "pixel_values" and vision is not None and not interleaved and \
            "pixel_values" in inspect.signature(model.forward).parameters:
        # Dual encoders (CLIP's kind) need an image beside the text; models
        # placing image features at image tokens are run on text alone.
        size = getattr(vision, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(vision, "num_channels", 3)
        data["pixel_values"] = torch.randn(BATCH, channels, size, size, generator=generator)
    return model, lambda: ((), dict(data))


class LibraryCompilePath:
    """Eager with torch.compiler.is_compiling() (and transformers' own
    is_torchdynamo_compiling) answering True, as they do under any
    compiler: where a library computes differently when compiled (a
    causal mask materialized instead of skipped), this is the result a
    correct compiler gives."""

    def __enter__(self):
        self.saved = [(torch.compiler, "is_compiling", torch.compiler.is_compiling)]
        for name, module in list(sys.modules.items()):
            if name.startswith("transformers") and hasattr(module, "is_torchdynamo_compiling"):
                self.saved.append((module, "is_torchdynamo_compiling",
                                   module.is_torchdynamo_compiling))
        for module, attribute, _ in self.saved:
            setattr(module, attribute, lambda: True)

    def __exit__(self, *exc):
        for module, attribute, original in self.saved:
            setattr(module, attribute, original)


def main():
    args = model_suite.parser(__doc__).parse_args()
    import transformers
    transformers.logging.set_verbosity_error()
    models = [(model_type, lambda t=model_type, c=class_name: build(t, c))
              for model_type, class_name in architectures(args.only, args.limit, args.sample)]
    model_suite.run(models, args,
                    f"transformers {transformers.__version__}, torch {torch.__version__} "
                    f"(batch {BATCH}, {TOKENS} tokens, width {WIDTH}, {LAYERS} layers)",
                    "transformers architectures from tiny configs", LibraryCompilePath)


if __name__ == "__main__":
    main()
