"""Library code as one graph (issue 14): the torchvision classification zoo,
hand-written transformer blocks in the GPT-2, BERT and T5 styles
(benchmarks/handwritten_blocks.py) and HuggingFace transformers models (small
configs, random weights, nothing downloaded), through Dynafuse and
torch.compile side by side in one process.

Per model: Dynafuse's graphs, graph breaks and frames run eagerly, whether its
result matches eager, its first-call time (capture + compile + run) and its
steady-state speed against eager (the median over --runs rounds of eager's
time over Dynafuse's, eager and the compiled versions called in turn in each
round so a noisy stretch of the machine hits all of them; with the spread:
half the interquartile range of the ratios over their median); torch.compile's graph and
break counts from torch._dynamo.explain (Dynamo's capture only), and with
--inductor its first-call time and speed too (slow: Inductor compiles each
model for tens of seconds on this machine), and with --max-autotune the
same for torch.compile(mode="max-autotune-no-cudagraphs") (slower still:
it benchmarks GEMM templates while compiling).

Each round times one call of each version by default, so every timed call
comes right after another version's call (whose caches and spinning worker
threads it inherits: a /tmp measurement outside this file had
shufflenet_v2 at batch 1 34% slower right after an eager call than in a run
of its own calls). --calls-per-round K makes each version run one untimed
call and then K timed ones in its turn: the time of a call that follows
calls of the same model.

    .venv/bin/python benchmarks/library_models.py [--only resnet18 gpt2 ...]
        [--skip-zoo] [--skip-blocks] [--skip-transformers] [--inductor]
        [--max-autotune] [--runs 10] [--calls-per-round 1]
        [--no-disk-cache] [--batch 8] [--markdown docs/library-models.md]

--no-disk-cache starts from an empty kernel cache, so first-call times are
cold compiles; without it, graphs compiled before on this machine load from
the disk cache.
"""
import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings

# Dynafuse reads its settings at import: the empty cache folder goes first.
if "--no-disk-cache" in sys.argv:
    os.environ["DYNAFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynafuse-cold-")

import torch  # noqa: E402

import dynafuse  # noqa: E402
from handwritten_blocks import handwritten_blocks  # noqa: E402
from measure import spread  # noqa: E402

# Slow on this 2-core machine (up to seconds per eager call at batch 8):
# left out of a full run, run when named with --only.
SLOW = {"vit_h_14", "regnet_y_128gf", "regnet_y_32gf", "regnet_y_16gf", "vit_l_16",
        "vit_l_32", "efficientnet_b7", "efficientnet_b6", "maxvit_t"}
# Models whose architecture fixes the input size.
FIXED_224 = ("vit_", "swin_", "maxvit")


def zoo(selected, batch=1, image_size=None):
    """torchvision's classification models: (name, make, inputs); images of
    image_size pixels a side where the architecture allows (else 128)."""
    import torchvision
    names = torchvision.models.list_models(module=torchvision.models)
    for name in names:
        if (selected and name not in selected) or (not selected and name in SLOW):
            continue
        size = 224 if name.startswith(FIXED_224) else image_size or 128
        if name == "inception_v3":
            size = 299

        def make(name=name):
            kwargs = {"aux_logits": False, "init_weights": False} \
                if name in ("inception_v3", "googlenet") else {}
            return torchvision.models.get_model(name, weights=None, **kwargs).eval()
        yield name, make, lambda size=size: ((torch.randn(batch, 3, size, size),), {})


def transformers_models(selected, batch=1):
    import transformers
    transformers.logging.set_verbosity_error()
    t = transformers
    ids = lambda: ((), {"input_ids": torch.randint(0, 1000, (batch, 64))})  # noqa: E731
    table = [
        ("gpt2", lambda: t.GPT2Model(t.GPT2Config(n_layer=4, n_embd=256, n_head=4,
                                                  vocab_size=1000, n_positions=128,
                                                  bos_token_id=0, eos_token_id=0)), ids),
        ("bert", lambda: t.BertModel(t.BertConfig(num_hidden_layers=4, hidden_size=256,
                                                  num_attention_heads=4,
                                                  intermediate_size=1024,
                                                  vocab_size=1000)), ids),
        ("llama", lambda: t.LlamaModel(t.LlamaConfig(num_hidden_layers=4, hidden_size=256,
                                                     num_attention_heads=4,
                                                     num_key_value_heads=2,
                                                     intermediate_size=1024,
                                                     vocab_size=1000)), ids),
        ("t5-encoder", lambda: t.T5EncoderModel(t.T5Config(num_layers=4, d_model=256,
                                                           num_heads=4, d_ff=1024, d_kv=64,
                                                           vocab_size=1000)), ids),
        ("vit (hf)", lambda: t.ViTModel(t.ViTConfig(num_hidden_layers=4, hidden_size=256,
                                                    num_attention_heads=4,
                                                    intermediate_size=1024,
                                                    image_size=224, patch_size=16)),
         lambda: ((), {"pixel_values": torch.randn(batch, 3, 224, 224)})),
    ]
    for name, make, inputs in table:
        if not selected or name in selected:
            yield name, lambda make=make: make().eval(), inputs


def flatten(value):
    """The tensors of a result (tuples, lists, dicts, ModelOutputs,
    dataclasses)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for field in dataclasses.fields(value)
                for t in flatten(getattr(value, field.name))]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    return []


def matches(actual, expected):
    """Same tensors up to 1e-3 of each output's own scale: randomly
    initialized deep networks (resnet101) reach activations of 1e4 and
    more, where a different summation order moves small entries by 1e-2."""
    a, e = flatten(actual), flatten(expected)
    return len(a) == len(e) and all(
        x.shape == y.shape and torch.allclose(
            x, y, rtol=1e-3, atol=1e-3 * max(1.0, y.abs().max().item() if y.numel() else 1.0))
        for x, y in zip(a, e))


def seconds(call, calls=1):
    """One call's time; with calls > 1, the mean of that many after an
    untimed one."""
    if calls > 1:
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def inductor_call(model, positional, keywords, row, first_key, mode=None):
    """torch.compile(model) after a reset of Dynamo, its first call timed
    into row[first_key]: a function making one more call."""
    import torch._dynamo as dynamo
    dynamo.reset()
    inductor = torch.compile(model, mode=mode)
    start = time.perf_counter()
    inductor(*positional, **keywords)
    row[first_key] = time.perf_counter() - start
    return lambda: inductor(*positional, **keywords)


def interleaved_ratios(eager, others, runs, calls=1):
    """Per round, eager and each compiled version in turn (so a slow stretch
    of a noisy machine hits all of them), each timed over `calls` calls
    (seconds()): for each compiled version, eager's time over its time, one
    ratio per round."""
    for call in [eager] + others:  # warm-up
        call()
    ratios = [[] for _ in others]
    for _ in range(runs):
        base = seconds(eager, calls)
        for k, call in enumerate(others):
            ratios[k].append(base / seconds(call, calls))
    return ratios


def measure(name, make, inputs, args):
    torch.manual_seed(0)
    model = make()
    positional, keywords = inputs()
    row = {"model": name}
    with torch.no_grad():
        expected = model(*positional, **keywords)
        dynafuse.reset()
        compiled = dynafuse.compile(model)
        start = time.perf_counter()
        actual = compiled(*positional, **keywords)
        row["first"] = time.perf_counter() - start
        stats = dynafuse.stats()
        row["graphs"] = len(dynafuse.compiled_graphs())
        row["breaks"] = stats["graph_breaks"]
        row["eager_frames"] = stats["eager_frames"]
        row["correct"] = matches(actual, expected)
        import torch._dynamo as dynamo
        dynamo.reset()
        explained = dynamo.explain(model)(*positional, **keywords)
        row["tc_graphs"] = explained.graph_count
        row["tc_breaks"] = explained.graph_break_count
        calls = [lambda: compiled(*positional, **keywords)]
        if args.inductor:
            calls.append(inductor_call(model, positional, keywords, row, "tc_first"))
        if args.max_autotune:
            calls.append(inductor_call(model, positional, keywords, row, "ma_first",
                                       mode="max-autotune-no-cudagraphs"))
        ratios = interleaved_ratios(lambda: model(*positional, **keywords), calls,
                                    args.runs, args.calls_per_round)
        row["speedup"] = statistics.median(ratios[0])
        row["spread"] = spread(ratios[0]) if args.runs >= 4 else 0.0
        if args.inductor:
            row["tc_speedup"] = statistics.median(ratios[1])
            row["tc_spread"] = spread(ratios[1]) if args.runs >= 4 else 0.0
        if args.max_autotune:
            row["ma_speedup"] = statistics.median(ratios[-1])
            row["ma_spread"] = spread(ratios[-1]) if args.runs >= 4 else 0.0
    return row


def format_row(row, inductor, max_autotune=False):
    if "error" in row:
        return f"| {row['model']} | error: {row['error']} |"
    cells = [row["model"], row["graphs"], row["breaks"], row["eager_frames"],
             "yes" if row["correct"] else "**no**", f"{row['first']:.2f}",
             f"{row['speedup']:.2f}x ±{row['spread'] * 100:.0f}%",
             row["tc_graphs"], row["tc_breaks"]]
    if inductor:
        cells += [f"{row['tc_first']:.1f}",
                  f"{row['tc_speedup']:.2f}x ±{row['tc_spread'] * 100:.0f}%"]
    if max_autotune:
        cells += [f"{row['ma_first']:.1f}",
                  f"{row['ma_speedup']:.2f}x ±{row['ma_spread'] * 100:.0f}%"]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--skip-zoo", action="store_true")
    parser.add_argument("--skip-blocks", action="store_true")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--max-autotune", action="store_true")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls-per-round", type=int, default=1,
                        help="timed calls of each version per round, after an untimed one")
    parser.add_argument("--markdown")
    parser.add_argument("--no-disk-cache", action="store_true")
    parser.add_argument("--batch", type=int, default=1,
                        help="batch size of every model's inputs (images or sequences)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    header = ("| model | graphs | breaks | eager frames | correct | first call (s) "
              "| speed vs eager | torch.compile graphs | torch.compile breaks |")
    rule = "|---|---|---|---|---|---|---|---|---|"
    if args.inductor:
        header += " Inductor first call (s) | Inductor vs eager |"
        rule += "---|---|"
    if args.max_autotune:
        header += " max-autotune first call (s) | max-autotune vs eager |"
        rule += "---|---|"
    lines = [header, rule]
    print(header)
    print(rule)
    sources = []
    if not args.skip_zoo:
        sources.append(zoo(args.only, args.batch))
    if not args.skip_blocks:
        sources.append(handwritten_blocks(args.only, args.batch))
    if not args.skip_transformers:
        sources.append(transformers_models(args.only, args.batch))
    rows = []
    for source in sources:
        for name, make, inputs in source:
            try:
                row = measure(name, make, inputs, args)
            except Exception as error:  # report and go on: one model's failure
                traceback.print_exc()
                row = {"model": name, "error": f"{type(error).__name__}: {error}"[:120]}
            rows.append(row)
            line = format_row(row, args.inductor, args.max_autotune)
            lines.append(line)
            print(line, flush=True)
    done = [r for r in rows if "error" not in r]
    one = sum(r["graphs"] == 1 and r["breaks"] == 0 for r in done)
    tc_one = sum(r["tc_graphs"] == 1 and r["tc_breaks"] == 0 for r in done)
    summary = (f"\n{len(done)} models: one graph {one} (torch.compile {tc_one}), "
               f"correct {sum(r['correct'] for r in done)}, frames run eagerly in all "
               f"{sum(r['eager_frames'] for r in done)}, geomean speed vs eager "
               f"{statistics.geometric_mean([r['speedup'] for r in done]):.2f}x"
               if done else "\nno model ran")
    if done and args.inductor:
        summary += (f", Inductor's {statistics.geometric_mean([r['tc_speedup'] for r in done]):.2f}x"
                    f" (Dynafuse over Inductor: "
                    f"{statistics.geometric_mean([r['speedup'] / r['tc_speedup'] for r in done]):.2f}x)"
                    f"; first calls in all: Dynafuse {sum(r['first'] for r in done):.0f} s, "
                    f"Inductor {sum(r['tc_first'] for r in done):.0f} s")
    if done and args.max_autotune:
        summary += (f"; max-autotune-no-cudagraphs: "
                    f"{statistics.geometric_mean([r['ma_speedup'] for r in done]):.2f}x eager"
                    f" (Dynafuse over it: "
                    f"{statistics.geometric_mean([r['speedup'] / r['ma_speedup'] for r in done]):.2f}x)"
                    f", first calls {sum(r['ma_first'] for r in done):.0f} s")
    print(summary)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("\n".join(lines) + "\n" + summary + "\n")


if __name__ == "__main__":
    main()
