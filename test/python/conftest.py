"""Shared fixtures: every test starts with no compiled code and zeroed
counters, so each can prove which path (compiled or eager) ran."""
import pytest
import torch

import dynafuse


@pytest.fixture(autouse=True)
def fresh_compiler():
    dynafuse.reset()
    saved = (dynafuse.config.dump_dir, dynafuse.config.recompile_limit, dynafuse.config.log)
    torch.manual_seed(0)
    yield
    dynafuse.config.dump_dir, dynafuse.config.recompile_limit, dynafuse.config.log = saved


def assert_compiled(captures=1):
    stats = dynafuse.stats()
    assert stats["captures"] == captures, stats
    assert stats["graph_breaks"] == 0 and stats["compile_failures"] == 0, stats


def assert_close(actual, expected, **tolerances):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances)


def randomize_batch_norm(model):
    """Random running statistics, so eval-mode batch norm is not identity."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model
