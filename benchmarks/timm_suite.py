"""timm models from every family (issue 41): each of timm's model modules
(resnet, convnext, vision_transformer, efficientnet, ...; 98 in timm 1.0)
is a family, and the suite takes the two smallest models of each by
parameter count (a second of the same size, often the same network at
another resolution, is skipped), random weights, nothing downloaded, one
image of the model's default input size. Each is measured by
model_suite.py (graphs, breaks, settled frames, correctness, first call,
speed against eager and torch.compile's graph count and, with --inductor,
its speed).

Counting parameters builds every model on the meta device (about three
minutes for timm's 1,371), so the selection is kept in
~/.cache/dynafuse/timm-<version>-models.json.

    .venv/bin/python benchmarks/timm_suite.py [--only resnet10t ...]
        [--per-family 2] [--batch 1] [--limit N] [--sample N] [--inductor]
        [--runs 5] [--warmup 8] [--markdown docs/timm-suite.md]
"""
import json
import os
import warnings

import torch

import model_suite


def _parameter_counts():
    """{family: [(parameters, model name), ...]} of every timm model, from
    the cache when it is there."""
    import timm
    from timm.models import _registry
    path = os.path.expanduser(f"~/.cache/dynafuse/timm-{timm.__version__}-models.json")
    if os.path.exists(path):
        with open(path) as cached:
            return {k: [tuple(p) for p in v] for k, v in json.load(cached).items()}
    counts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for family in timm.list_modules():
            for name in _registry.list_models(module=family):
                try:
                    with torch.device("meta"):
                        model = timm.create_model(name, pretrained=False)
                except Exception:  # noqa: BLE001 - a model timm cannot build
                    continue
                counts.setdefault(family, []).append(
                    (sum(p.numel() for p in model.parameters()), name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        json.dump(counts, out)
    return counts


def models(per_family=2):
    """(model name, family) of the `per_family` smallest models of every
    family, in family order."""
    chosen = []
    for family, counts in sorted(_parameter_counts().items()):
        sizes = set()
        for parameters, name in sorted(counts):
            if len(sizes) == per_family:
                break
            if parameters not in sizes:
                sizes.add(parameters)
                chosen.append((name, family))
    return chosen


def build(name, batch=1):
    """The model (eval mode, random weights) and a function making its inputs."""
    import timm
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    size = model.pretrained_cfg.get("input_size", (3, 224, 224))
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(batch, *size, generator=generator)
    return model, lambda: ((pixels,), {})


def main():
    parser = model_suite.parser(__doc__)
    parser.add_argument("--per-family", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.set_defaults(max_eager_seconds=2.0)
    args = parser.parse_args()
    import timm
    names = model_suite.selected(models(args.per_family), args)
    suite = [(name, lambda n=name: build(n, args.batch)) for name, _ in names]
    model_suite.run(suite, args,
                    f"timm {timm.__version__}, torch {torch.__version__} "
                    f"(batch {args.batch}, each model's default input size, "
                    f"{args.per_family} smallest per family)",
                    "timm models from every family")


if __name__ == "__main__":
    main()
