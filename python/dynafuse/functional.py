"""Functional forms of Python-level tensor mutations. Capture keeps them in
the graph as call_torch nodes: `x[index] = value` on a value the graph
computed becomes x = setitem(x, index, value)."""


def setitem(tensor, index, value):
    """A copy of tensor with tensor[index] = value (eager's semantics,
    broadcasting and dtype conversion included)."""
    result = tensor.clone()
    result[index] = value
    return result
