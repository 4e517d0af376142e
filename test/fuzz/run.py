"""Dynafuse's differential program fuzzer: the command line and campaigns.

    .venv/bin/python test/fuzz/run.py --seed 0 --programs 1000 --workers 2 \\
        [--mode inference|training] [--out DIR] [--timeout S] [--shrink N]

Generates programs (seed, 0..programs-1) (programs.py), runs each in a worker
(workers.py) through the oracle (oracle.py), prints a table of categories,
the fraction of eager-valid programs that ran compiled and the top graph
break and failure reasons, shrinks up to N bugs of distinct causes into
standalone repros in DIR (shrink.py), and exits nonzero if any bug category
is nonzero. DIR also receives results.jsonl (one line per program).
"""
import argparse
import collections
import dataclasses
import glob
import importlib.util
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import oracle  # noqa: E402
import programs  # noqa: E402
import shrink as shrinking  # noqa: E402
import workers as worker_pool  # noqa: E402


def extension_stamp():
    """When dynafuse's extension was last linked (without importing it):
    a campaign that spans a relink mixes two compilers."""
    spec = importlib.util.find_spec("dynafuse")
    folders = (spec.submodule_search_locations or []) if spec else []
    libraries = [path for folder in folders for path in glob.glob(os.path.join(folder, "_C*.so"))]
    if not libraries:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(libraries[0])))


@dataclasses.dataclass
class Campaign:
    """A campaign's results: per program its Outcome, the bugs' repros."""
    seed: int
    mode: str
    outcomes: dict = dataclasses.field(default_factory=dict)   # index -> Outcome
    extension: str = ""                                         # extension_stamp() at the start
    repros: list = dataclasses.field(default_factory=list)      # (path, source, outcome)
    seconds: float = 0.0

    def counts(self):
        return collections.Counter(o.category for o in self.outcomes.values())

    def bugs(self):
        return {i: o for i, o in sorted(self.outcomes.items()) if o.category in oracle.BUGS}


def run_campaign(seed, count, workers=2, mode="inference", timeout=60.0, out=None,
                 max_shrink=10, shrink_seconds=120.0, start=0, log=print, only=None):
    """Runs programs start..start+count-1 of `seed` (or the indices `only`);
    shrinks up to max_shrink bugs into repros under `out`, one per distinct
    signature (every bug of `only`)."""
    out = out or tempfile.mkdtemp(prefix=f"dynafuse-fuzz-{seed}-")
    os.makedirs(out, exist_ok=True)
    campaign = Campaign(seed, mode, extension=extension_stamp())
    began = time.monotonic()
    indices = only if only is not None else range(start, start + count)
    jobs = [(index, ("generate", seed, index, mode)) for index in indices]
    with worker_pool.Pool(workers, timeout, os.path.join(out, "logs")) as pool, \
            open(os.path.join(out, "results.jsonl"), "w") as results:
        for done, (index, outcome) in enumerate(pool.run(jobs), 1):
            campaign.outcomes[index] = outcome
            results.write(json.dumps({"seed": seed, "index": index, "mode": mode,
                                      **dataclasses.asdict(outcome)}) + "\n")
            if outcome.category in oracle.BUGS:
                log(f"  program {index}: {outcome.category}: {outcome.detail.splitlines()[0][:160]}")
            if done % 500 == 0:
                log(f"  {done}/{count} programs, {time.monotonic() - began:.0f}s")
        if extension_stamp() != campaign.extension:
            log(f"  warning: dynafuse's extension was relinked during the campaign "
                f"({campaign.extension} -> {extension_stamp()}); rerun it for clean results")
        campaign.repros = _shrink_bugs(campaign, pool, out, max_shrink, shrink_seconds, log,
                                       distinct=only is None)
    campaign.seconds = time.monotonic() - began
    return campaign


def _shrink_bugs(campaign, pool, out, limit, seconds, log, distinct=True):
    """Shrinks the first bug of each distinct signature (or every bug) up to
    `limit` and writes its repro; returns [(path, source, outcome)]."""
    repros, seen = [], set()
    for index, outcome in campaign.bugs().items():
        key = shrinking.signature(outcome)
        if (distinct and key in seen) or len(repros) >= limit:
            continue
        program = programs.generate(campaign.seed, index, campaign.mode)
        again = pool.check(program)
        if shrinking.signature(again) != key:
            log(f"  program {index} ({outcome.category}) does not reproduce: {again.category}")
            continue
        seen.add(key)
        if outcome.category == "hang":
            small, final, checks = program, outcome, 0  # each check costs the timeout
        else:
            small, final, checks = shrinking.shrink(program, outcome, pool.check, max_seconds=seconds)
        source = shrinking.repro_source(small, final)
        path = os.path.join(out, f"repro_{campaign.mode}_s{campaign.seed}_p{index}_{final.category}.py")
        with open(path, "w") as file:
            file.write(source)
        log(f"  shrank program {index} ({outcome.category}) from {len(program.stmts)} to "
            f"{len(small.stmts)} statements in {checks} checks: {path}")
        repros.append((path, source, final))
    return repros


def summary(campaigns, top=15):
    """The summary table of one or more campaigns, as text."""
    counts = collections.Counter()
    outcomes = [o for c in campaigns for o in c.outcomes.values()]
    for campaign in campaigns:
        counts.update(campaign.counts())
    total = len(outcomes) or 1
    lines = [f"{'category':<24}{'programs':>10}{'share':>9}"]
    for category in oracle.CATEGORIES:
        marker = "  <- bug" if category in oracle.BUGS and counts[category] else ""
        lines.append(f"{category:<24}{counts[category]:>10}{counts[category] / total:>9.1%}{marker}")
    valid = [o for o in outcomes if o.eager_valid and o.category not in ("crash", "hang")]
    fully = sum(o.compiled for o in valid)
    partly = sum(o.partly_compiled for o in valid)
    lines.append(f"eager-valid programs: {len(valid)} ({len(valid) / total:.1%}); ran compiled: "
                 f"{fully} fully ({fully / max(len(valid), 1):.1%}), {partly} at least partly "
                 f"({partly / max(len(valid), 1):.1%})")
    reasons = collections.Counter()
    for outcome in outcomes:
        reasons.update({oracle.normalize_reason(r) for r in outcome.reasons})
    if reasons:
        lines.append(f"top break/failure reasons (programs): ")
        lines += [f"{n:>7}  {reason}" for reason, n in reasons.most_common(top)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--only", default=None,
                        help="comma-separated program indices to replay (and shrink every bug of)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", choices=("inference", "training"), default="inference")
    parser.add_argument("--out", default=None, help="folder for repros and results.jsonl")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per program")
    parser.add_argument("--shrink", type=int, default=10, help="most bugs to shrink into repros")
    parser.add_argument("--shrink-seconds", type=float, default=120.0, help="per bug")
    parser.add_argument("--top", type=int, default=15, help="break reasons to list")
    args = parser.parse_args(argv)
    only = [int(i) for i in args.only.split(",")] if args.only else None
    campaign = run_campaign(args.seed, args.programs, args.workers, args.mode, args.timeout,
                            args.out, args.shrink, args.shrink_seconds, args.start, only=only)
    print(f"\nseed {args.seed}, {len(campaign.outcomes)} programs ({args.mode}), {campaign.seconds:.0f}s, "
          f"extension linked {campaign.extension}")
    print(summary([campaign], args.top))
    for path, _, outcome in campaign.repros:
        print(f"repro ({outcome.category}): {path}")
    return 1 if campaign.bugs() else 0


if __name__ == "__main__":
    sys.exit(main())
