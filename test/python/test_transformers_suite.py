"""A sample of benchmarks/transformers_suite.py in CI (issue 41): decoder,
encoder and mixture-of-experts architectures built from tiny configs, each
one graph (fullgraph=True) matching eager, and cached after its first call
(nothing recompiles or settles: the guards hold for the next call). The
sample covers the constructs those families needed: functools.partial
activations (gemma's GELUTanh), torch.autograd.Function (bloom's GeLU),
expert routing (mixtral, qwen2_moe)."""
import os
import sys

import pytest
import torch

import dynafuse
from conftest import assert_compiled

pytest.importorskip("transformers", minversion="5.0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import transformers_suite  # noqa: E402
from library_models import flatten  # noqa: E402

SAMPLE = ["gemma", "bloom", "mistral", "mixtral", "qwen2_moe", "gpt_neox", "opt", "bert"]


@pytest.mark.parametrize("model_type", SAMPLE)
def test_an_architecture_from_a_tiny_config_is_one_cached_graph(model_type):
    names = dict(transformers_suite.architectures([model_type]))
    model, inputs = transformers_suite.build(model_type, names[model_type])
    positional, keywords = inputs()
    with torch.no_grad():
        expected = flatten(model(*positional, **keywords))
        compiled = dynafuse.compile(model, fullgraph=True)
        for _ in range(2):
            actual = flatten(compiled(*positional, **keywords))
            assert len(actual) == len(expected)
            for a, e in zip(actual, expected):
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    assert_compiled(1)
    stats = dynafuse.stats()
    assert stats["cache_hits"] == 1 and stats["settled_frames"] == 0, stats
