"""In-place tensor methods that update a caller's tensor (a static KV cache's
`index_copy_`): traced as their out-of-place form and a write-back, they run
in place on the caller's tensor when nothing else in the graph reads it
(Loop/InPlaceUpdates.h). Compiled against eager on random data: the results,
the caller's tensors after the call, that the update was made in place (the
storage kept, `in_place_updates` counted), and that what must stay out of
place does (the old values read after the update, accumulating forms)."""
import pytest
import torch

import dynafuse
from conftest import assert_compiled, assert_outputs_close


def run_both(fn, *args, **options):
    """fn eager and compiled, each on its own copies of args; returns the
    compiled copies and the eager ones after the call, and both results."""
    eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    compiled_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = fn(*eager_args)
    actual = dynafuse.compile(fn, **options)(*compiled_args)
    assert_outputs_close(actual, expected)
    assert_outputs_close(compiled_args, eager_args, "inputs after the call")
    return compiled_args


def cache_update(cache, position, keys):
    cache.index_copy_(2, position, keys)
    return cache.sum(-1)


@pytest.mark.parametrize("length", [1, 7, 32])
def test_an_index_copy_into_an_input_runs_in_place(length):
    cache = torch.randn(2, 3, length, 4)
    position = torch.tensor([length - 1])
    keys = torch.randn(2, 3, 1, 4)
    address = cache.data_ptr()
    compiled = dynafuse.compile(cache_update)
    expected_cache = cache.clone()
    expected = cache_update(expected_cache, position, keys)
    actual = compiled(cache, position, keys)
    assert_outputs_close(actual, expected)
    assert torch.equal(cache, expected_cache)
    assert cache.data_ptr() == address
    assert_compiled(1)
    assert dynafuse.stats()["in_place_updates"] == 1
    # and again on the entry, a later position
    position = torch.tensor([0])
    keys = torch.randn(2, 3, 1, 4)
    expected = cache_update(expected_cache, position, keys)
    actual = compiled(cache, position, keys)
    assert_outputs_close(actual, expected)
    assert torch.equal(cache, expected_cache)
    assert dynafuse.stats()["in_place_updates"] == 2


def two_caches(keys_cache, values_cache, position, k, v):
    keys_cache.index_copy_(1, position, k)
    values_cache.index_copy_(1, position, v * 2)
    scores = torch.einsum("bd,bld->bl", k[:, 0], keys_cache).softmax(-1)
    return torch.einsum("bl,bld->bd", scores, values_cache)


def test_a_decode_step_updates_both_caches_in_place():
    keys_cache, values_cache = torch.randn(3, 10, 8), torch.randn(3, 10, 8)
    position = torch.tensor([4])
    k, v = torch.randn(3, 1, 8), torch.randn(3, 1, 8)
    run_both(two_caches, keys_cache, values_cache, position, k, v)
    assert_compiled(1)
    assert dynafuse.stats()["in_place_updates"] == 2


def reads_the_old_values(cache, position, keys):
    before = cache * 1
    cache.index_copy_(0, position, keys)
    return before - cache


def test_a_cache_read_before_its_update_keeps_its_old_values():
    cache = torch.randn(6, 5)
    run_both(reads_the_old_values, cache, torch.tensor([1, 4]), torch.randn(2, 5))
    assert_compiled(1)
    assert dynafuse.stats()["in_place_updates"] == 0


def returns_the_cache(cache, position, keys):
    cache.index_copy_(0, position, keys)
    return cache


def test_a_returned_cache_is_the_updated_tensor():
    cache = torch.randn(6, 5)
    compiled_args = run_both(returns_the_cache, cache, torch.tensor([2]),
                             torch.randn(1, 5))
    assert_compiled(1)


def overwriting_forms(x, index, mask, source):
    return {
        "index_fill_": lambda: x.index_fill_(0, index, 2.5),
        "masked_fill_": lambda: x.masked_fill_(mask, -1.0),
        "masked_scatter_": lambda: x.masked_scatter_(mask, source),
        "scatter_": lambda: x.scatter_(0, index[:, None].expand(-1, x.shape[1]),
                                       source[: index.numel()]),
        "index_put_": lambda: x.index_put_((index,), source[: index.numel()]),
    }


@pytest.mark.parametrize("name", ["index_fill_", "masked_fill_", "masked_scatter_",
                                  "scatter_", "index_put_"])
def test_overwriting_forms_run_in_place(name):
    def update(x, index, mask, source):
        overwriting_forms(x, index, mask, source)[name]()
        return x.sum(0)

    x = torch.randn(7, 4)
    args = (x, torch.tensor([5, 0, 3]), torch.rand(7, 4) > 0.5, torch.randn(7, 4))
    run_both(update, *args)
    assert dynafuse.stats()["captures"] == 1
    assert dynafuse.stats()["graph_breaks"] == 0
    # masked_fill_ is in the op table (a graph op, not a torch call)
    if name != "masked_fill_":
        assert dynafuse.stats()["in_place_updates"] == 1, name


@pytest.mark.parametrize("name", ["index_add_", "scatter_add_", "index_put_accumulate"])
def test_accumulating_forms_stay_out_of_place(name):
    """A run that fails after an in-place update reruns the call eagerly on
    the updated tensor: an accumulating form would add twice."""
    def update(x, index, source):
        if name == "index_add_":
            x.index_add_(0, index, source)
        elif name == "scatter_add_":
            x.scatter_add_(0, index[:, None].expand(-1, 4), source)
        else:
            x.index_put_((index,), source, accumulate=True)
        return x * 2

    run_both(update, torch.randn(6, 4), torch.tensor([1, 1, 4]), torch.randn(3, 4))
    assert_compiled(1)
    assert dynafuse.stats()["in_place_updates"] == 0


def test_a_non_contiguous_cache_is_updated_as_eager_does():
    cache = torch.randn(4, 9, 3).transpose(0, 1)
    run_both(cache_update_dim1, cache, torch.tensor([2, 0]), torch.randn(9, 2, 3))
    assert_compiled(1)


def cache_update_dim1(cache, position, keys):
    cache.index_copy_(1, position, keys)
    return cache.mean(1)


def test_caches_of_growing_length_share_a_symbolic_entry():
    compiled = dynafuse.compile(cache_update, dynamic=True)
    for length in (5, 9, 14):
        cache = torch.randn(1, 2, length, 4)
        expected_cache = cache.clone()
        position, keys = torch.tensor([length // 2]), torch.randn(1, 2, 1, 4)
        expected = cache_update(expected_cache, position, keys)
        actual = compiled(cache, position, keys)
        assert_outputs_close(actual, expected)
        assert torch.equal(cache, expected_cache)
    assert dynafuse.stats()["captures"] == 1
    assert dynafuse.stats()["in_place_updates"] == 3


def test_a_failing_run_after_an_update_ends_as_eager():
    """index_copy_ then an index out of range: the compiled run fails after
    the update and the call reruns eagerly, which raises eager's error on a
    cache in eager's state."""
    def update_then_gather(cache, position, keys, rows):
        cache.index_copy_(0, position, keys)
        return cache[rows] * 2

    cache = torch.randn(5, 3)
    position, keys = torch.tensor([1]), torch.randn(1, 3)
    compiled = dynafuse.compile(update_then_gather)
    expected_cache = cache.clone()
    update_then_gather(expected_cache, position, keys, torch.tensor([0]))
    compiled(cache, position, keys, torch.tensor([0]))
    assert torch.equal(cache, expected_cache)
    bad = torch.tensor([7])
    with pytest.raises(IndexError):
        update_then_gather(expected_cache, position, keys, bad)
    with pytest.raises(IndexError):
        compiled(cache, position, keys, bad)
    assert torch.equal(cache, expected_cache)
    stats = dynafuse.stats()
    assert stats["run_failures"] == 1 and stats["in_place_updates"] == 2, stats


def test_training_updates_stay_out_of_place():
    weight = torch.randn(4, 4, requires_grad=True)

    def step(buffer, position, x):
        y = x @ weight
        buffer.index_copy_(0, position, y.detach())
        return y.sum()

    buffer = torch.zeros(5, 4)
    compiled_buffer = buffer.clone()
    x = torch.randn(1, 4)
    step(buffer, torch.tensor([3]), x).backward()
    expected_grad = weight.grad.clone()
    weight.grad = None
    dynafuse.compile(step)(compiled_buffer, torch.tensor([3]), x).backward()
    assert torch.equal(compiled_buffer, buffer)
    torch.testing.assert_close(weight.grad, expected_grad)
    assert_compiled(1)
    assert dynafuse.stats()["in_place_updates"] == 0
