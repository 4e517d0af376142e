"""The op table: which torch callables and Tensor methods the capture maps to
which graph op, and how their parameters bind. Data, not code paths; one
module per op family, merged here.

A parameter is (name, kind[, default]) with kind
  "operand": a tensor or Python number, becomes a graph operand; None (given
             or as the default) leaves the operand out and sets the attribute
             "no_<name>" = True (clamp's optional min and max);
  "operands": a list or tuple of tensors, each an operand (cat, stack);
  "attr":    a constant, becomes a node attribute;
  "fixed":   only its default is supported (anything else is a graph break).
"*" starts keyword-only parameters.
"""
from . import pointwise

FUNCTIONS = {}
METHODS = {}
for _family in (pointwise,):
    FUNCTIONS.update(_family.FUNCTIONS)
    METHODS.update(_family.METHODS)
