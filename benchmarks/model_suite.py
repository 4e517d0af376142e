"""What the broad model suites (issue 41) share: one model measured as
library_models.py measures a model (one process, interleaved rounds,
torch.compile's graph count from torch._dynamo.explain beside ours), the
row printed as markdown and the suite's summary. A suite
(transformers_suite.py, timm_suite.py) supplies the models: a name, a
function building (model, inputs) and a context in which eager takes the
library's compiled path (None when the library has none).

Per model: Dynafuse's graphs, breaks, eager frames and settled frames
after the timed calls, whether it matches eager, its first-call time and
its speed against eager after --warmup calls (the steady state: code that
breaks has settled by then); with --inductor torch.compile's speed too.
Models a suite cannot build (or whose eager call takes over
--max-eager-seconds) are listed with why and counted apart: they say
nothing of either compiler."""
import argparse
import statistics
import sys
import time
import traceback
import warnings

import torch

import dynafuse
from library_models import inductor_call, interleaved_ratios, matches
from measure import spread

SEED = 1234  # drawn from before every compared call


def add_arguments(parser):
    """The options every suite takes."""
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--sample", type=int, help="this many models, evenly spaced")
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=8,
                        help="untimed compiled calls after the first")
    parser.add_argument("--markdown")
    parser.add_argument("--max-eager-seconds", type=float, default=1.0)


def selected(names, args):
    """`names` narrowed by --only, --limit and --sample (evenly spaced)."""
    if args.only:
        names = [n for n in names if n[0] in args.only]
    if args.limit:
        names = names[:args.limit]
    if args.sample and args.sample < len(names):
        names = [names[i * len(names) // args.sample] for i in range(args.sample)]
    return names


def measure(name, build, args, library_path=None):
    """The row of one model; build() gives (model, inputs), inputs() gives
    (positional, keywords); library_path() is a context manager (or None)."""
    row = {"model": name}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, inputs = build()
            positional, keywords = inputs()
            start = time.perf_counter()
            # Every compared call draws from one seed: a model sampling
            # random numbers (ViT-MAE's random masking) draws the same ones.
            torch.manual_seed(SEED)
            with torch.no_grad():
                expected = model(*positional, **keywords)
            if time.perf_counter() - start > args.max_eager_seconds:
                raise TimeoutError(f"one eager call takes {time.perf_counter() - start:.1f} s "
                                   f"(over --max-eager-seconds): a model this suite "
                                   f"does not shrink")
    except Exception as error:  # noqa: BLE001 - a row per model
        row["unbuilt"] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]}"
        return row
    with torch.no_grad():
        # torch.compile's graph count first: Dynamo patches nn.Module.__init__
        # for good on its first trace (its GenerationTracker), which a
        # Dynafuse entry of a model building modules in forward (transformers'
        # ACT2FN) would see change and recompile for.
        import torch._dynamo as dynamo
        dynamo.reset()
        try:
            explained = dynamo.explain(model)(*positional, **keywords)
            row["tc_graphs"] = explained.graph_count
            row["tc_breaks"] = explained.graph_break_count
        except Exception:  # noqa: BLE001
            row["tc_graphs"] = "error"
        dynafuse.reset()
        compiled = dynafuse.compile(model)
        start = time.perf_counter()
        torch.manual_seed(SEED)
        actual = compiled(*positional, **keywords)
        row["first"] = time.perf_counter() - start
        row["correct"] = matches(actual, expected)
        if not row["correct"] and library_path is not None:
            with library_path():
                torch.manual_seed(SEED)
                compiled_path = model(*positional, **keywords)
            row["library_path"] = matches(actual, compiled_path)
        # The steady state: code that breaks captures its pieces over the
        # first calls and settles (decision 116) before the timed rounds.
        for _ in range(args.warmup):
            compiled(*positional, **keywords)
        calls = [lambda: compiled(*positional, **keywords)]
        if args.inductor:
            calls.append(inductor_call(model, positional, keywords, row, "tc_first"))
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


def one_graph(row):
    return row["graphs"] == 1 and row["breaks"] == 0


def wrong(row):
    return not row["correct"] and not row.get("library_path")


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


def summary(rows, args, title):
    """The suite's closing markdown: the counts, the geomeans and a row per model."""
    built = [r for r in rows if "unbuilt" not in r]
    one = [r for r in built if one_graph(r)]
    tc_one = [r for r in built if r["tc_graphs"] == 1]
    missed = [r["model"] for r in built if r["tc_graphs"] == 1 and not one_graph(r)]
    header = ["model", "graphs", "breaks", "settled", "correct", "first call s",
              "vs eager", "torch.compile graphs"]
    if args.inductor:
        header.append("torch.compile vs eager")
    header.append("first break")
    return [
        f"{title}: {len(rows)} models, {len(built)} built.",
        "",
        f"- Dynafuse: {len(one)} of {len(built)} one graph, "
        f"{sum(1 for r in built if wrong(r))} wrong "
        f"({sum(1 for r in built if r.get('library_path'))} differ from eager as the "
        f"library's own compiled path does), "
        f"geomean {geomean([r['speedup'] for r in built]):.2f}x eager, "
        f"slowest {min((r['speedup'] for r in built), default=float('nan')):.2f}x, "
        f"{sum(1 for r in built if r['speedup'] < 0.95)} below 0.95x.",
        f"- torch.compile: {len(tc_one)} of {len(built)} one graph"
        + (f", geomean {geomean([r['tc_speedup'] for r in built]):.2f}x eager."
           if args.inductor else "."),
        f"- One graph for torch.compile but not here ({len(missed)}): "
        + (", ".join(missed) or "none") + ".",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ] + [format_row(r, args.inductor) for r in built] + [
        "",
        "Not built by the suite (no statement about either compiler):",
        "",
    ] + [f"- {r['model']}: {r['unbuilt']}" for r in rows if "unbuilt" in r]


def run(models, args, title, heading, library_path=None):
    """Measures each (name, build) of `models`, printing a row as it goes,
    then the summary (written to --markdown under `heading` when given)."""
    torch.set_num_threads(2)
    rows = []
    for name, build in models:
        try:
            row = measure(name, build, args, library_path)
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            row = {"model": name, "unbuilt": f"suite error: {error}"}
        rows.append(row)
        text = format_row(row, args.inductor) or f"| {name} | not built: {row['unbuilt']} |"
        print(text, flush=True)
    lines = summary(rows, args, title)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(f"# {heading}\n\n`.venv/bin/python {sys.argv[0]} "
                      + " ".join(sys.argv[1:]) + "`\n\n" + "\n".join(lines) + "\n")
    return rows


def parser(doc):
    result = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(result)
    return result
