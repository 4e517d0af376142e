"""A server's request stream (issue 42): BERT-like encoders and decoder
models (random weights, small configs) answering a random stream of
(batch, length) requests with padding masks, each call the whole model
compiled the way a user would (`compile(model)`), eager against Dynafuse
and torch.compile in one process.

For each model and compiler: whether every answer equals eager's (to
float tolerance), the captures over the stream (Dynafuse: stats()
["captures"]; torch.compile: its unique graphs), the captures a second pass
over the same stream adds (none once warm), p50 and p99 latency and the
total time of the first pass (compiles included), and the steady state (the
second pass's total) against eager's.

    .venv/bin/python benchmarks/serving.py [--models bert gpt2 llama]
        [--requests 40] [--seed 0] [--no-inductor] [--markdown FILE]
"""
import argparse
import statistics
import sys
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

import dynafuse
from measure import MarkdownTable


def build(name):
    import transformers
    torch.manual_seed(0)
    if name == "bert":
        config = transformers.BertConfig(hidden_size=256, num_hidden_layers=4,
                                         num_attention_heads=4, intermediate_size=1024,
                                         vocab_size=8000, max_position_embeddings=256)
        return transformers.BertModel(config).eval(), 8000
    if name == "gpt2":
        config = transformers.GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=8000,
                                         n_positions=256)
        return transformers.GPT2Model(config).eval(), 8000
    config = transformers.LlamaConfig(hidden_size=256, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=768, vocab_size=8000,
                                      max_position_embeddings=256)
    return transformers.LlamaModel(config).eval(), 8000


def stream(requests, vocab, seed):
    """(input_ids, attention_mask) with batch 1-8 and length 8-128, each
    row padded on the right from a random length."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(requests):
        batch = int(torch.randint(1, 9, (1,), generator=generator))
        length = int(torch.randint(8, 129, (1,), generator=generator))
        ids = torch.randint(3, vocab, (batch, length), generator=generator)
        lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=generator)
        lengths[0] = length
        mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        out.append((ids, mask))
    return out


def serve(model, requests):
    latencies, answers = [], []
    with torch.no_grad():
        for ids, mask in requests:
            start = time.perf_counter()
            out = model(input_ids=ids, attention_mask=mask)
            latencies.append(time.perf_counter() - start)
            answers.append(out.last_hidden_state * mask[..., None])
    return latencies, answers


def percentile(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["bert", "gpt2", "llama"])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    table = MarkdownTable("| model | how | answers equal | captures | second pass adds | p50 ms "
                          "| p99 ms | first pass s | steady s | steady vs eager |")
    for name in args.models:
        model, vocab = build(name)
        requests = stream(args.requests, vocab, args.seed)
        serve(model, requests[:2])  # warm eager's allocator and threads
        rows = []
        latencies, reference = serve(model, requests)
        steady = sum(serve(model, requests)[0])
        rows.append(("eager", latencies, reference, steady, "-", "-"))
        compilers = [("dynafuse", lambda m: dynafuse.compile(m),
                      lambda: dynafuse.stats()["captures"], dynafuse.reset)]
        if not args.no_inductor:
            compilers.append(("torch.compile", lambda m: torch.compile(m),
                              lambda: counters["stats"]["unique_graphs"],
                              lambda: (torch._dynamo.reset(), counters.clear())))
        for how, compile_model, captures, reset in compilers:
            reset()
            compiled = compile_model(model)
            latencies, answers = serve(compiled, requests)
            first_captures = captures()
            steady_latencies, again = serve(compiled, requests)
            added = captures() - first_captures
            equal = all(torch.allclose(a, b, rtol=1e-3, atol=1e-3)
                        for a, b in zip(answers + again, reference + reference))
            rows.append((how, latencies, answers if equal else None, sum(steady_latencies),
                         first_captures, added))
        eager_steady = rows[0][3]
        for how, latencies, answers, steady, first_captures, added in rows:
            line = (f"| {name} | {how} | {'yes' if answers is not None else '**no**'} | "
                    f"{first_captures} | {added} | {statistics.median(latencies) * 1e3:.2f} | "
                    f"{percentile(latencies, 0.99) * 1e3:.1f} | {sum(latencies):.2f} | "
                    f"{steady:.3f} | {eager_steady / steady:.2f}x |")
            table.add(line)
    table.append_to(args.markdown, f"{args.requests} requests, batch 1-8, length 8-128, "
                    f"seed {args.seed}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    sys.exit(main())
