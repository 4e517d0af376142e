"""A sample of benchmarks/timm_suite.py in CI (issue 41): timm models from
families whose constructs capture needed (fasternet's forward chosen in
__init__, efficientvit's autocast(enabled=False), hiera's math.prod of a
list, tnt's itertools.repeat, plus the test_* networks timm keeps for its
own CI), each one graph (fullgraph=True) matching eager and cached after
its first call."""
import os
import sys

import pytest
import torch

import dynafuse
from conftest import assert_compiled

pytest.importorskip("timm")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import timm_suite  # noqa: E402

SAMPLE = ["test_resnet", "test_vit", "test_efficientnet", "fasternet_t0", "efficientvit_b0",
          "hiera_tiny_224", "tnt_s_patch16_224"]


@pytest.mark.parametrize("name", SAMPLE)
def test_a_timm_model_is_one_cached_graph(name):
    model, inputs = timm_suite.build(name)
    positional, keywords = inputs()
    with torch.no_grad():
        expected = model(*positional, **keywords)
        compiled = dynafuse.compile(model, fullgraph=True)
        for _ in range(2):
            torch.testing.assert_close(compiled(*positional, **keywords), expected,
                                       rtol=1e-3, atol=1e-3)
    assert_compiled(1)
    stats = dynafuse.stats()
    assert stats["cache_hits"] == 1 and stats["settled_frames"] == 0, stats
