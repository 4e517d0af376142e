"""Pointwise entries of the op table (see __init__.py for the format). A new
pointwise op is one line here, one entry in lib/Graph/PointwiseOps.cpp and
one lowering rule in lib/Lowering/PointwiseRules.cpp."""
import torch
import torch.nn.functional as F

_INPUT = ("input", "operand")
_OTHER = ("other", "operand")
_ALPHA = ("alpha", "fixed", 1)

_UNARY = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "neg", "relu"]
_COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
_CASTS = {
    "float": torch.float32, "double": torch.float64, "half": torch.float16,
    "bfloat16": torch.bfloat16, "int": torch.int32, "long": torch.int64,
    "bool": torch.bool,
}


def _spec(op, params, attributes=None):
    return (op, list(params), dict(attributes or {}))


def _method_table():
    methods = {name: _spec(name, [_INPUT]) for name in _UNARY}
    methods["negative"] = _spec("neg", [_INPUT])
    for name in _COMPARE:
        methods[name] = _spec(name, [_INPUT, _OTHER])
    methods["add"] = _spec("add", [_INPUT, _OTHER, "*", _ALPHA])
    methods["sub"] = _spec("sub", [_INPUT, _OTHER, "*", _ALPHA])
    methods["mul"] = _spec("mul", [_INPUT, _OTHER])
    methods["div"] = _spec("div", [_INPUT, _OTHER, "*", ("rounding_mode", "fixed", None)])
    methods["maximum"] = _spec("maximum", [_INPUT, _OTHER])
    methods["minimum"] = _spec("minimum", [_INPUT, _OTHER])
    methods["pow"] = _spec("pow", [_INPUT, ("exponent", "operand")])
    for name, dtype in _CASTS.items():
        methods[name] = _spec("cast", [_INPUT], {"dtype": dtype})
    methods["to"] = _spec("cast", [_INPUT, ("dtype", "attr"),
                                   ("non_blocking", "fixed", False),
                                   ("copy", "fixed", False)])
    return methods


def _function_table(methods):
    functions = {}
    for name in _UNARY + _COMPARE + ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]:
        functions[getattr(torch, name)] = methods[name]
    for name in methods:
        functions[getattr(torch.Tensor, name)] = methods[name]
    functions[torch.negative] = methods["neg"]
    functions[torch.subtract] = methods["sub"]
    functions[torch.multiply] = methods["mul"]
    functions[torch.divide] = methods["div"]
    functions[torch.true_divide] = _spec("div", [_INPUT, _OTHER])
    functions[torch.where] = _spec("where", [("condition", "operand"), _INPUT, _OTHER])
    functions[F.relu] = _spec("relu", [_INPUT, ("inplace", "fixed", False)])
    functions[F.gelu] = _spec("gelu", [_INPUT, ("approximate", "attr", "none")])
    functions[F.sigmoid] = methods["sigmoid"]
    functions[F.tanh] = methods["tanh"]
    return functions


METHODS = _method_table()
FUNCTIONS = _function_table(METHODS)
