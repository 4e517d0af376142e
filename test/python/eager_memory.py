"""Measures eager PyTorch's peak intermediate memory: every tensor an op
creates that is neither an input nor the final output, tracked until it is
freed (through a TorchDispatchMode)."""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Tracker(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.sizes = {}

    def _release(self, key):
        self.live -= self.sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else [out]
        for tensor in outputs:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in self.sizes or storage.nbytes() == 0:
                continue
            self.sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(tensor, self._release, key)
        return out


def eager_peak_intermediate_bytes(fn, *args):
    """Peak bytes of intermediates while fn(*args) runs eagerly (the final
    outputs' own storage excluded)."""
    tracker = _Tracker()
    with tracker:
        result = fn(*args)
    outputs = result if isinstance(result, (tuple, list)) else [result]
    output_bytes = sum(t.untyped_storage().nbytes() for t in outputs
                       if isinstance(t, torch.Tensor))
    return max(tracker.peak - output_bytes, 0)
