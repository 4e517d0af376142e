"""Nearest upsampling by powers of two (F.interpolate's "nearest" and
"nearest-exact" modes, nn.Upsample) is traced as the input repeated in
place along each spatial dim (polyfills.py): no ATen call, so the consumer
reads it inline and training differentiates its views (a network's
training step: test_torch_call_gradients.py). Other factors run
ATen's kernel as one call_torch op. Compiled against eager on random data,
one capture, no break, and the extern count proves which path ran."""
import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled

CASES = [  # (input shape, interpolate keywords)
    ((1, 3, 8, 8), dict(scale_factor=2.0)),
    ((2, 3, 5, 7), dict(scale_factor=(4, 2))),
    ((1, 3, 8, 8), dict(size=(16, 32))),
    ((2, 4, 1, 1), dict(scale_factor=2)),
    ((0, 3, 3, 3), dict(scale_factor=2)),
    ((2, 4, 9), dict(scale_factor=2)),
    ((1, 2, 3, 4, 5), dict(scale_factor=(2, 1, 4))),
    ((1, 3, 6, 6), dict(scale_factor=1.0)),
]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape,keywords", CASES)
def test_power_of_two_factors_are_views_of_the_input(mode, shape, keywords):
    def f(x):
        return F.interpolate(x * 2, mode=mode, **keywords) + 1

    x = torch.randn(*shape)
    actual = dynafuse.compile(f)(x)
    assert_close(actual, f(x), rtol=0, atol=0)
    assert_compiled(1)
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 0


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_a_strided_input_upsamples_as_eager(layout):
    def f(x):
        return F.interpolate(x, scale_factor=2) - x.mean()

    x = torch.randn(2, 3, 5, 6)
    x = x.transpose(2, 3) if layout == "transposed" else x.contiguous(
        memory_format=torch.channels_last)
    assert_close(dynafuse.compile(f)(x), f(x), rtol=1e-6, atol=1e-6)
    assert_compiled(1)
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 0


def test_an_empty_channel_dim_raises_atens_error():
    def f(x):
        return F.interpolate(x, scale_factor=2) + 1

    x = torch.randn(2, 0, 3, 3)
    with pytest.raises(RuntimeError, match="Non-empty 4D data tensor expected"):
        f(x)
    with pytest.raises(RuntimeError, match="Non-empty 4D data tensor expected"):
        dynafuse.compile(f)(x)


@pytest.mark.parametrize("keywords", [dict(scale_factor=3), dict(size=(9, 10)),
                                      dict(scale_factor=1.5)])
def test_other_factors_call_atens_kernel(keywords):
    def f(x):
        return F.interpolate(x + 1, mode="nearest", **keywords) * 3

    x = torch.randn(2, 3, 6, 5)
    assert_close(dynafuse.compile(f)(x), f(x), rtol=0, atol=0)
    assert_compiled(1)
    assert dynafuse.compiled_graphs()[0]["extern_calls"] == 1


def test_symbolic_sizes_keep_one_capture():
    def f(x):
        return F.interpolate(x, scale_factor=2, mode="nearest").relu()

    compiled = dynafuse.compile(f, dynamic=True)
    for size in (4, 7, 10):
        x = torch.randn(1, 2, size, size + 1)
        assert_close(compiled(x), f(x), rtol=0, atol=0)
    assert dynafuse.stats()["captures"] == 1


def test_the_result_is_a_new_tensor_an_in_place_op_may_write():
    def f(x, skip):
        y = F.interpolate(x, scale_factor=2)
        y += skip
        return y.relu_()

    x, skip = torch.randn(2, 3, 1, 1), torch.randn(2, 3, 2, 2)
    expected = f(x.clone(), skip)
    actual = dynafuse.compile(f)(x, skip)
    assert_close(actual, expected)
    assert actual.data_ptr() != x.data_ptr()
    assert_compiled(1)


def test_the_per_dim_scales_overload_and_integer_inputs_run_atens_kernel():
    def scales(x):
        return torch._C._nn.upsample_nearest2d(x, [16, 16], 4.0, 4.0) + 1

    def integers(x):
        return F.interpolate(x, scale_factor=2)

    x = torch.randn(1, 2, 4, 4)
    assert_close(dynafuse.compile(scales)(x), scales(x))
    u8 = torch.randint(0, 255, (1, 2, 3, 3), dtype=torch.uint8)
    assert torch.equal(dynafuse.compile(integers)(u8), integers(u8))
    i64 = torch.randint(0, 9, (1, 2, 3, 3))
    try:
        expected = integers(i64)
    except RuntimeError as error:
        with pytest.raises(RuntimeError, match=str(error)[:30]):
            dynafuse.compile(integers)(i64)
    else:
        assert torch.equal(dynafuse.compile(integers)(i64), expected)
