"""Every transformers architecture built from a tiny config (issue 41): the
base model class of each model type in transformers' auto mapping
(MODEL_MAPPING_NAMES), with a config shrunk to a few layers of width 64,
random weights, nothing downloaded, and inputs made from the model's
main input (token ids, pixels, audio). Per architecture, as
library_models.py measures a model (one process, interleaved rounds,
torch.compile's graph count from torch._dynamo.explain beside ours):
Dynafuse's graphs, breaks, eager frames and settled frames after the
timed calls, whether it matches eager, its first-call time and its speed
against eager after --warmup calls (the steady state: code that breaks has
settled by then); with --inductor torch.compile's speed too.

Architectures that cannot be built this way (a config field the shrinking
breaks, a model needing extra inputs) are listed with why, and counted
apart: they say nothing of either compiler.

    .venv/bin/python benchmarks/transformers_suite.py [--only gemma bloom ...]
        [--limit N] [--sample N] [--inductor] [--runs 5] [--warmup 8]
        [--markdown docs/transformers-suite.md]
"""
import argparse
import statistics
import sys
import time
import traceback
import warnings

import torch

import dynafuse
from library_models import interleaved_ratios, matches
from measure import spread

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


def shrink(config):
    """Sets each TINY field the config has (and no other)."""
    for name, value in TINY.items():
        if hasattr(config, name) and not isinstance(getattr(config, name), (list, dict)):
            try:
                setattr(config, name, value)
            except Exception:  # noqa: BLE001 - read-only properties
                pass
    for sub in ("text_config", "vision_config", "encoder", "decoder"):
        inner = getattr(config, sub, None)
        if inner is not None and hasattr(inner, "to_dict") and inner is not config:
            shrink(inner)
    return config


def architectures(selected, limit=None, sample=None):
    """(model type, base model class name) of every architecture (or the
    first `limit`, or `sample` of them evenly spaced in alphabetical
    order)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    names = sorted(MODEL_MAPPING_NAMES.items())
    if selected:
        names = [(k, v) for k, v in names if k in selected]
    if limit:
        names = names[:limit]
    if sample and sample < len(names):
        names = [names[i * len(names) // sample] for i in range(sample)]
    for model_type, class_name in names:
        if isinstance(class_name, (list, tuple)):
            class_name = class_name[0]
        yield model_type, class_name


def build(model_type, class_name):
    """The model (eval mode, random weights) and a function making its inputs."""
    import transformers
    config = shrink(transformers.AutoConfig.for_model(model_type))
    model_class = getattr(transformers, class_name)
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


def measure(model_type, class_name, args):
    row = {"model": model_type}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, inputs = build(model_type, class_name)
            positional, keywords = inputs()
            start = time.perf_counter()
            with torch.no_grad():
                expected = model(*positional, **keywords)
            if time.perf_counter() - start > args.max_eager_seconds:
                raise TimeoutError(f"one eager call takes {time.perf_counter() - start:.1f} s "
                                   f"(over --max-eager-seconds): a config this suite "
                                   f"does not shrink")
    except Exception as error:  # noqa: BLE001 - a row per architecture
        row["unbuilt"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
        return row
    with torch.no_grad():
        dynafuse.reset()
        compiled = dynafuse.compile(model)
        start = time.perf_counter()
        actual = compiled(*positional, **keywords)
        row["first"] = time.perf_counter() - start
        row["correct"] = matches(actual, expected)
        if not row["correct"]:
            with LibraryCompilePath():
                compiled_path = model(*positional, **keywords)
            row["library_path"] = matches(actual, compiled_path)
        import torch._dynamo as dynamo
        dynamo.reset()
        try:
            explained = dynamo.explain(model)(*positional, **keywords)
            row["tc_graphs"] = explained.graph_count
        except Exception:  # noqa: BLE001
            row["tc_graphs"] = "error"
        # The steady state: code that breaks captures its pieces over the
        # first calls and settles (decision 116) before the timed rounds.
        for _ in range(args.warmup):
            compiled(*positional, **keywords)
        calls = [lambda: compiled(*positional, **keywords)]
        if args.inductor:
            dynamo.reset()
            inductor = torch.compile(model)
            inductor(*positional, **keywords)
            calls.append(lambda: inductor(*positional, **keywords))
        ratios = interleaved_ratios(lambda: model(*positional, **keywords), calls, args.runs)
        stats = dynafuse.stats()
        row["graphs"] = len(dynafuse.compiled_graphs())
        row["breaks"] = stats["graph_breaks"]
        row["eager_frames"] = stats["eager_frames"]
        row["settled"] = stats["settled_frames"]
        reasons = dynafuse._C.break_reasons()
        row["first_break"] = reasons[0].split(": ", 1)[-1][:110] if reasons else ""
        row["speedup"] = statistics.median(ratios[0])
        row["spread"] = spread(ratios[0]) if args.runs >= 4 else 0.0
        if args.inductor:
            row["tc_speedup"] = statistics.median(ratios[1])
    return row


def format_row(row, inductor):
    if "unbuilt" in row:
        return None
    cells = [row["model"], row["graphs"], row["breaks"], row["settled"],
             "yes" if row["correct"] else
             "as the library's compiled path" if row.get("library_path") else "**no**",
             f"{row['first']:.2f}",
             f"{row['speedup']:.2f}x ±{row['spread'] * 100:.0f}%", row["tc_graphs"]]
    if inductor:
        cells.append(f"{row['tc_speedup']:.2f}x")
    cells.append(row["first_break"].replace("|", "/"))
    return "| " + " | ".join(str(c) for c in cells) + " |"


def geomean(values):
    values = [v for v in values if v > 0]
    return statistics.geometric_mean(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--sample", type=int,
                        help="this many architectures, evenly spaced")
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=8,
                        help="untimed compiled calls after the first")
    parser.add_argument("--markdown")
    parser.add_argument("--max-eager-seconds", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    import transformers
    transformers.logging.set_verbosity_error()
    rows = []
    for model_type, class_name in architectures(args.only, args.limit, args.sample):
        try:
            row = measure(model_type, class_name, args)
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            row = {"model": model_type, "unbuilt": f"suite error: {error}"}
        rows.append(row)
        text = format_row(row, args.inductor) or f"| {model_type} | not built: {row['unbuilt']} |"
        print(text, flush=True)
    built = [r for r in rows if "unbuilt" not in r]
    one = [r for r in built if r["graphs"] == 1 and r["breaks"] == 0]
    tc_one = [r for r in built if r["tc_graphs"] == 1]
    header = ["model", "graphs", "breaks", "settled", "correct", "first call s",
              "vs eager", "torch.compile graphs"]
    if args.inductor:
        header.append("torch.compile vs eager")
    header.append("first break")
    lines = [
        f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"{len(rows)} architectures, {len(built)} built (batch {BATCH}, {TOKENS} tokens, "
        f"width {WIDTH}, {LAYERS} layers).",
        "",
        f"- Dynafuse: {len(one)} of {len(built)} one graph, "
        f"{sum(1 for r in built if not r['correct'] and not r.get('library_path'))} wrong "
        f"({sum(1 for r in built if r.get('library_path'))} differ from eager as the "
        f"library's own compiled path does), "
        f"geomean {geomean([r['speedup'] for r in built]):.2f}x eager, "
        f"slowest {min((r['speedup'] for r in built), default=float('nan')):.2f}x.",
        f"- torch.compile: {len(tc_one)} of {len(built)} one graph"
        + (f", geomean {geomean([r['tc_speedup'] for r in built]):.2f}x eager."
           if args.inductor else "."),
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ] + [format_row(r, args.inductor) for r in built] + [
        "",
        "Not built by the suite (no statement about either compiler):",
        "",
    ] + [f"- {r['model']}: {r['unbuilt']}" for r in rows if "unbuilt" in r]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("# transformers architectures from tiny configs\n\n"
                      "`.venv/bin/python benchmarks/transformers_suite.py "
                      + " ".join(sys.argv[1:]) + "`\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
