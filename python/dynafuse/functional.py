"""Functional forms of Python-level tensor mutations. Capture keeps them in
the graph as call_torch nodes: `x[index] = value` on a value the graph
computed becomes x = setitem(x, index, value)."""


def setitem(tensor, index, value):
    """A copy of tensor with tensor[index] = value (eager's semantics,
    broadcasting and dtype conversion included)."""
    result = tensor.clone()
    result[index] = value
    return result


class FunctionContext:
    """The ctx a torch.autograd.Function's forward gets when capture inlines
    it for a call that records no gradient (grad mode off, or no input
    requires grad): what forward saves for backward is kept but never used,
    and what only autograd can honour (in-place outputs) raises, so capture
    stops there."""

    def __init__(self):
        self.saved_tensors = ()
        self.needs_input_grad = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = value

    def mark_dirty(self, *tensors):
        raise NotImplementedError("autograd.Function marking inputs dirty")
