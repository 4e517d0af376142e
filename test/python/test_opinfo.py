"""PyTorch's own OpInfo sample inputs for the reductions, views, data
movement and extern ops Dynafuse lowers: every sample must match eager
(compiled, or through a logged fallback), and most must compile."""
import pytest
import torch

import dynafuse

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = [
    "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp",
    "any", "all", "softmax", "log_softmax", "nn.functional.layer_norm",
    "nn.functional.group_norm", "reshape", "view", "permute", "transpose", "t", "expand",
    "squeeze", "unsqueeze", "flatten", "select", "narrow", "split", "chunk", "unbind", "cat",
    "stack", "nn.functional.pad", "flip", "roll", "repeat", "index_select", "gather", "tril",
    "triu", "nn.functional.embedding", "matmul", "mm", "bmm", "addmm", "nn.functional.linear",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "max", "min",
]
OPINFOS = {op.name if not op.variant_test_name else None: op
           for op in common.op_db if op.name in OPS and not op.variant_test_name}


def _samples(opinfo, dtype, limit=8):
    try:
        samples = list(opinfo.sample_inputs("cpu", dtype))
    except Exception:  # noqa: BLE001 - an OpInfo that cannot sample this dtype
        return []
    return samples[:limit]


def _as_tuple(value):
    return value if isinstance(value, (tuple, list)) else (value,)


@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples_match_eager(name):
    opinfo = OPINFOS.get(name)
    if opinfo is None:
        pytest.skip(f"no OpInfo named {name}")
    compiled_count = total = 0
    for dtype in (torch.float32, torch.int64):
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        for sample in _samples(opinfo, dtype):
            args, kwargs, op = sample.args, sample.kwargs, opinfo.op

            def fn(x):
                return op(x, *args, **kwargs)

            try:
                expected = fn(sample.input)
            except Exception:  # noqa: BLE001 - eager rejects the sample too
                continue
            dynafuse.reset()
            with torch.no_grad():
                actual = dynafuse.compile(fn)(sample.input)
            for got, want in zip(_as_tuple(actual), _as_tuple(expected)):
                if isinstance(want, torch.Tensor):
                    assert got.dtype == want.dtype and got.shape == want.shape, (sample, got, want)
                    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
            total += 1
            compiled_count += dynafuse.stats()["captures"] > 0 and not dynafuse.stats()["graph_breaks"]
    if total == 0:
        pytest.skip("no usable samples")
    assert compiled_count >= 1, f"{name}: none of {total} samples compiled"
