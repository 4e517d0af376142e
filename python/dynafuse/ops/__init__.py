"""The op table: which torch callables and Tensor methods the capture maps to
which graph op, and how their parameters bind. Data, not code paths; one
module per op family, merged here.

A parameter is (name, kind[, default]) with kind
  "operand": a tensor or Python number, becomes a graph operand;
  "tensor":  a tensor only, becomes a graph operand (a Python number is a
             graph break: eager raises TypeError for it);
  "operands": a list or tuple of tensors, each an operand (cat, stack);
  "optional_operand": a tensor or None; sets the attribute has_<name> when
             the graph op declares it (layer_norm's weight and bias);
  "attr":    a constant, becomes a node attribute (None: left out);
  "ints*":   the remaining positional ints (or one tuple), as an attribute;
  "fixed":   only its default is supported (anything else is a graph break);
  "attr_ignored": accepted and dropped;
  "inplace": a bool; True makes the call update its first tensor argument
             (like the attribute {"__inplace__": True} for x.relu_());
  "shape_of", "dtype_of": a tensor whose sizes or dtype become the
             attribute (x.expand_as(y), x.type_as(y)).
An entry ("overload", [entry, ...], {}) tries its entries in order and
takes the first whose parameters bind (torch.max(x) / max(x, dim) /
max(x, y)). A fourth element renames the attribute; "size_or_sizes" becomes "size" for
an int and "sizes" for a sequence. "*" starts keyword-only parameters.
"""
from .. import polyfills
from . import autocast, extern, pointwise, reductions, state, views

FUNCTIONS = {}
METHODS = {}
STATE_QUERIES = state.STATE_QUERIES
POLYFILLS = polyfills.POLYFILLS
AUTOCAST = autocast.AUTOCAST
for _family in (pointwise, reductions, views, extern):
    FUNCTIONS.update(_family.FUNCTIONS)
    METHODS.update(_family.METHODS)


def _in_place_variants():
    """x.add_(y), x.relu_(), F.relu(x, inplace=True), ...: the out-of-place
    entry, updating x."""
    import torch
    import torch.nn.functional as F
    for name in list(METHODS):
        underscored = name + "_"
        if hasattr(torch.Tensor, underscored) and underscored not in METHODS:
            op, params, attributes = METHODS[name]
            if op == "overload":
                spec = (op, [(o, p, dict(a, __inplace__=True)) for o, p, a in params], attributes)
            else:
                spec = (op, params, dict(attributes, __inplace__=True))
            METHODS[underscored] = spec
            FUNCTIONS[getattr(torch.Tensor, underscored)] = spec
    for function in (F.relu, F.relu6, F.leaky_relu, F.elu, F.hardswish, F.hardsigmoid,
                     F.silu, F.mish, F.hardtanh, F.dropout):
        if function in FUNCTIONS:
            op, params, attributes = FUNCTIONS[function]
            params = [("inplace", "inplace", False) if isinstance(p, tuple) and p[0] == "inplace"
                      else p for p in params]
            FUNCTIONS[function] = (op, params, attributes)


_in_place_variants()
