"""Allocation plans (decision 86, lib/Runtime/AllocationPlan.cpp): a compiled
run's large blocks (64 KiB and more: intermediates, ATen's results inside
extern steps) are placed by a plan made from an earlier run's trace. Compiled
results against eager over calls whose outputs are all kept (an output is a
heap block, never a planned one a later run reuses), training steps, new
sizes (a run that strays plans again, a bounded number of times), threads
running one compiled model at once, and the option that turns it off;
memory_stats()["planned_allocations"] proves the planned path ran."""
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled, run_python

TOLERANCE = dict(rtol=1e-4, atol=1e-4)
MAX_PLANS = 4  # AllocationPlanner::kMaxPlans


class Blocks(nn.Module):
    """Two residual conv blocks and a classifier: intermediates of 1 MiB at
    batch 4, 64 channels, 32x32 (oneDNN's results and Dynafuse's scratch)."""

    def __init__(self, width=64):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.convs = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1)
                                   for _ in range(4))
        self.fc = nn.Linear(width, 10)

    def forward(self, x):
        y = F.relu(self.bn(self.stem(x)))
        for first, second in zip(self.convs[::2], self.convs[1::2]):
            y = F.relu(y + second(F.relu(first(y))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1)), y.sum(1)


def planned():
    return dynafuse.memory_stats()["planned_allocations"]


def test_planned_runs_match_eager_and_outputs_survive_later_runs():
    model = Blocks().eval()
    compiled = dynafuse.compile(model)
    inputs = [torch.randn(4, 3, 32, 32) for _ in range(6)]
    before = planned()
    with torch.no_grad():
        kept = [compiled(x) for x in inputs]
        for x, (logits, pixels) in zip(inputs, kept):
            expected = model(x)
            assert_close(logits, expected[0], **TOLERANCE)
            assert_close(pixels, expected[1], **TOLERANCE)
    assert_compiled()
    # The first run's trace planned the rest: packing the weights during
    # it is no part of the trace, so the second run follows that plan.
    assert dynafuse.stats()["allocation_plans"] == 1, dynafuse.stats()
    per_call = (planned() - before) / 5
    assert per_call >= 4, planned() - before


def test_channels_last_and_sliced_inputs():
    model = Blocks().eval()
    compiled = dynafuse.compile(model)
    base = torch.randn(4, 3, 32, 48)
    for x in (base.contiguous(memory_format=torch.channels_last)[..., :32],
              base[..., 8:40], base[..., 8:40]):
        before = planned()
        with torch.no_grad():
            got, expected = compiled(x), model(x)
        assert_close(got[0], expected[0], **TOLERANCE)
        assert_close(got[1], expected[1], **TOLERANCE)
    assert planned() > before, "the last call ran a planned region"


def test_training_steps_plan_the_forward_and_match_eager():
    torch.manual_seed(0)
    model = Blocks(width=32)
    reference = Blocks(width=32)
    reference.load_state_dict(model.state_dict())
    compiled = dynafuse.compile(model)
    before = planned()
    for step in range(4):
        x = torch.randn(4, 3, 32, 32)
        logits, _ = compiled(x)
        expected, _ = reference(x)
        assert_close(logits, expected, **TOLERANCE)
        logits.square().mean().backward()
        expected.square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
    assert planned() > before
    # One plan for the forward module, one for the backward.
    assert dynafuse.stats()["allocation_plans"] == 2, dynafuse.stats()


def test_new_sizes_replan_a_bounded_number_of_times():
    model = nn.Sequential(nn.Linear(256, 2048), nn.GELU(), nn.Linear(2048, 2048),
                          nn.GELU(), nn.Linear(2048, 64)).eval()
    compiled = dynafuse.compile(model, dynamic=True)
    before = planned()
    with torch.no_grad():
        for rows in (16, 24, 40, 16, 56, 72, 16, 16):
            x = torch.randn(rows, 256)
            assert_close(compiled(x), model(x), **TOLERANCE)
    stats = dynafuse.stats()
    assert stats["captures"] == 1 and stats["symbolic_captures"] == 1, stats
    assert 2 <= stats["allocation_plans"] <= MAX_PLANS, stats
    assert planned() > before, "runs of a size a plan was made for follow it"


def test_threads_running_one_model_get_a_region_each():
    model = Blocks(width=32).eval()
    compiled = dynafuse.compile(model)
    with torch.no_grad():
        compiled(torch.randn(4, 3, 32, 32))
    failures = []

    def work(seed):
        generator = torch.Generator().manual_seed(seed)
        try:
            for _ in range(5):
                x = torch.randn(4, 3, 32, 32, generator=generator)
                with torch.no_grad():
                    got, expected = compiled(x), model(x)
                torch.testing.assert_close(got[0], expected[0], **TOLERANCE)
                torch.testing.assert_close(got[1], expected[1], **TOLERANCE)
        except Exception as error:  # reported by the main thread
            failures.append(repr(error))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert dynafuse.stats()["captures"] == 1


@pytest.mark.parametrize("setting", ["0", "1"])
def test_the_option_turns_planning_off(setting):
    code = """
import torch, torch.nn as nn, torch.nn.functional as F, dynafuse
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(64, 8, 1)).eval()
compiled = dynafuse.compile(model)
with torch.no_grad():
    for _ in range(3):
        x = torch.randn(4, 3, 32, 32)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
print(f"{dynafuse.memory_stats()['planned_allocations']}:"
      f"{dynafuse.stats()['allocation_plans']}")
"""
    placed, plans = map(int, run_python(code, DYNAFUSE_ALLOCATION_PLAN=setting).split(":"))
    if setting == "0":
        assert placed == 0 and plans == 0
    else:
        assert placed >= 2 and plans == 1
