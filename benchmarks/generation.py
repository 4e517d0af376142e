"""Greedy decoding with Hugging Face `generate` (issue 42): Llama, Qwen2 and
GPT-2 configs from tiny up to ~100M parameters, random weights, with the
dynamic and the static KV cache, eager against Dynafuse and torch.compile
in one process, each compiled the way a user would
(`model.forward = compile(model.forward)`).

Each row: whether the tokens equal eager's for every prompt, the captures
(Dynafuse: stats()["captures"]; torch.compile: its unique graphs) over the
whole run (several prompts of different lengths, then again), the first
generate's wall time (compiles included), prefill ms (a generate of one
token), ms/token (from the difference between two generate lengths) and
tokens/s as a fraction of the bandwidth bound: a decode step reads every
weight once, so tokens/s is at most the machine's bandwidth (a triad,
measure.py) over the weights' bytes. Medians over --runs, with the spread.

    .venv/bin/python benchmarks/generation.py [--sizes tiny small base]
        [--models llama qwen2 gpt2] [--caches dynamic static] [--tokens 32]
        [--runs 5] [--no-inductor] [--markdown FILE]
"""
import argparse
import statistics
import sys
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

import dynafuse
from measure import MarkdownTable, spread, triad_gbs

SIZES = {
    # hidden, layers, heads, kv heads, intermediate, vocab
    "tiny": (64, 2, 4, 2, 128, 1000),
    "small": (256, 4, 4, 2, 768, 8000),
    "base": (768, 12, 12, 4, 2048, 32000),
}


def build(model, size):
    import transformers
    hidden, layers, heads, kv, inner, vocab = SIZES[size]
    if model == "gpt2":
        config = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads,
                                         n_inner=inner, vocab_size=vocab, n_positions=512)
        cls = transformers.GPT2LMHeadModel
    else:
        config_class = {"llama": transformers.LlamaConfig,
                        "qwen2": transformers.Qwen2Config}[model]
        config = config_class(hidden_size=hidden, num_hidden_layers=layers,
                              num_attention_heads=heads, num_key_value_heads=kv,
                              intermediate_size=inner, vocab_size=vocab,
                              max_position_embeddings=512)
        cls = {"llama": transformers.LlamaForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM}[model]
    config.pad_token_id = config.eos_token_id = None
    torch.manual_seed(0)
    return cls(config).eval(), vocab


def generate(model, prompt, tokens, cache):
    options = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                   pad_token_id=0)
    if cache == "static":
        options["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(prompt, **options)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def measure(model, prompts, tokens, cache, runs, reference):
    """First pass (compiles), correctness over all prompts twice, then
    prefill and per-token times on the first prompt."""
    first, first_seconds = timed(lambda: generate(model, prompts[0], tokens, cache))
    equal = torch.equal(first, reference[0]) if reference else True
    for _ in range(2):
        for i, prompt in enumerate(prompts):
            out = generate(model, prompt, tokens, cache)
            equal = equal and (torch.equal(out, reference[i]) if reference else True)
    prefill, full = [], []
    for _ in range(runs):
        prefill.append(timed(lambda: generate(model, prompts[0], 1, cache))[1])
        full.append(timed(lambda: generate(model, prompts[0], tokens, cache))[1])
    per_token = [(f - p) / (tokens - 1) for f, p in zip(full, prefill)]
    return dict(equal=equal, first_s=first_seconds,
                prefill_ms=statistics.median(prefill) * 1e3,
                token_ms=statistics.median(per_token) * 1e3,
                token_spread=spread(per_token) if len(per_token) >= 2 else 0.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="*", default=["tiny", "small"])
    parser.add_argument("--models", nargs="*", default=["llama", "qwen2", "gpt2"])
    parser.add_argument("--caches", nargs="*", default=["dynamic", "static"])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    bandwidth = triad_gbs(20)
    print(f"bandwidth (triad): {bandwidth:.1f} GB/s, threads {torch.get_num_threads()}")
    table = MarkdownTable("| model | size | params | cache | how | tokens equal | captures "
                          "| first generate s | prefill ms | ms/token | vs eager | of bound |")
    for size in args.sizes:
        for name in args.models:
            for cache in args.caches:
                if name == "gpt2" and cache == "static":
                    pass  # GPT-2 takes the static cache too
                model, vocab = build(name, size)
                weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
                params = sum(p.numel() for p in model.parameters())
                torch.manual_seed(1)
                prompts = [torch.randint(3, vocab, (1, n)) for n in (12, 20, 7, 33)]
                reference = [generate(model, p, args.tokens, cache) for p in prompts]
                rows = []
                eager = measure(model, prompts, args.tokens, cache, args.runs, reference)
                rows.append(("eager", eager, 0))
                original = model.forward
                dynafuse.reset()
                model.forward = dynafuse.compile(original)
                compiled = measure(model, prompts, args.tokens, cache, args.runs, reference)
                rows.append(("dynafuse", compiled, dynafuse.stats()["captures"]))
                model.forward = original
                if not args.no_inductor:
                    torch._dynamo.reset()
                    counters.clear()
                    model.forward = torch.compile(original)
                    inductor = measure(model, prompts, args.tokens, cache, args.runs, reference)
                    rows.append(("torch.compile", inductor, counters["stats"]["unique_graphs"]))
                    model.forward = original
                for how, result, captures in rows:
                    bound_tokens = bandwidth * 1e9 / weight_bytes
                    of_bound = 1e3 / result["token_ms"] / bound_tokens
                    line = (f"| {name} | {size} | {params / 1e6:.1f}M | {cache} | {how} | "
                            f"{'yes' if result['equal'] else '**no**'} | "
                            f"{captures if how != 'eager' else '-'} | {result['first_s']:.2f} | "
                            f"{result['prefill_ms']:.2f} | {result['token_ms']:.3f} "
                            f"(±{result['token_spread'] * 100:.0f}%) | "
                            f"{eager['token_ms'] / result['token_ms']:.2f}x | "
                            f"{of_bound * 100:.1f}% |")
                    table.add(line)
    table.append_to(args.markdown, f"bandwidth (triad) {bandwidth:.1f} GB/s, "
                    f"{torch.get_num_threads()} threads, {args.tokens} new tokens")


if __name__ == "__main__":
    sys.exit(main())
