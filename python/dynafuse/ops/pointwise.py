"""Pointwise entries of the op table (see __init__.py for the format): the
torch callables each pointwise op binds. The op itself (its type rule,
lowering, derivative and ATen fallback) is one op(...) in
include/dynafuse/Ops/PointwiseOps.py."""
import torch
import torch.nn.functional as F

_INPUT = ("input", "operand")
_OTHER = ("other", "operand")
# add/sub's alpha scales the second operand (capture multiplies it).
_ALPHA = ("alpha", "attr", 1)
# Where eager has no overload taking a Python number (torch.maximum(x, 2.0),
# torch.eq(1, x)): a number there is a graph break, and eager's TypeError.
_TENSOR_INPUT = ("input", "tensor")
_TENSOR_OTHER = ("other", "tensor")

_UNARY = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "neg", "relu",
          "erf", "exp2", "log1p", "expm1", "sin", "cos", "floor", "ceil", "trunc",
          "sign", "square", "reciprocal", "log2", "log10", "bitwise_not",
          "logical_not"]
_COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
_BINARY = ["fmod", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor",
           "logical_and", "logical_or", "logical_xor"]
_INPLACE = ("inplace", "fixed", False)
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
    for name in _COMPARE + _BINARY:
        logical = name.startswith("logical_")
        first = _INPUT if name == "remainder" else _TENSOR_INPUT  # remainder(5, x)
        methods[name] = _spec(name, [first, _TENSOR_OTHER if logical else _OTHER])
    methods["sgn"] = methods["sign"]
    methods["fix"] = methods["trunc"]
    methods["round"] = _spec("round", [_INPUT, "*", ("decimals", "fixed", 0)])
    # A bound given as None is left out (has_min / has_max = False).
    methods["clamp"] = _spec("clamp", [_INPUT, ("min", "optional_operand", None),
                                       ("max", "optional_operand", None)])
    methods["clip"] = methods["clamp"]
    methods["clamp_min"] = _spec("clamp", [_INPUT, ("min", "operand")], {"has_max": False})
    methods["clamp_max"] = _spec("clamp", [_INPUT, ("max", "operand")], {"has_min": False})
    methods["masked_fill"] = _spec("masked_fill", [_INPUT, ("mask", "operand"),
                                                   ("value", "operand")])
    methods["add"] = _spec("add", [_INPUT, _OTHER, "*", _ALPHA])
    methods["sub"] = _spec("sub", [_INPUT, _OTHER, "*", _ALPHA])
    methods["mul"] = _spec("mul", [_INPUT, _OTHER])
    # rounding_mode picks the graph op: div (None), div_floor or div_trunc.
    methods["div"] = _spec("div", [_INPUT, _OTHER, "*", ("rounding_mode", "attr", None)])
    methods["divide"] = methods["div"]
    # Eager has no derivative for floor_divide (x // y): its backward raises.
    methods["floor_divide"] = _spec("div_floor", [_INPUT, _OTHER], {"__no_derivative__": True})
    methods["maximum"] = _spec("maximum", [_TENSOR_INPUT, _TENSOR_OTHER])
    methods["minimum"] = _spec("minimum", [_TENSOR_INPUT, _TENSOR_OTHER])
    methods["pow"] = _spec("pow", [_INPUT, ("exponent", "operand")])
    for name, dtype in _CASTS.items():
        methods[name] = _spec("cast", [_INPUT], {"dtype": dtype})
    methods["type_as"] = _spec("cast", [_INPUT, ("other", "dtype_of", None, "dtype")])
    methods["to"] = _spec("cast", [_INPUT, ("dtype", "attr"),
                                   ("non_blocking", "fixed", False),
                                   ("copy", "fixed", False)])
    return methods


def _function_table(methods):
    functions = {}
    for name in _UNARY + _COMPARE + _BINARY + [
            "add", "sub", "mul", "div", "divide", "floor_divide", "maximum", "minimum", "pow", "sgn", "fix",
            "round", "clamp", "clip", "clamp_min", "clamp_max", "masked_fill"]:
        functions[getattr(torch, name)] = methods[name]
    for name in ["erf", "exp2", "expm1", "log1p"]:
        functions[getattr(torch.special, name)] = methods[name]
    for name in methods:
        functions[getattr(torch.Tensor, name)] = methods[name]
    functions[torch.negative] = methods["neg"]
    functions[torch.subtract] = methods["sub"]
    functions[torch.multiply] = methods["mul"]
    functions[torch.divide] = methods["div"]
    functions[torch.true_divide] = _spec("div", [_INPUT, _OTHER])
    functions[torch.where] = _spec("where", [("condition", "operand"), _INPUT, _OTHER])
    functions[F.relu] = _spec("relu", [_INPUT, _INPLACE])
    functions[F.gelu] = _spec("gelu", [_INPUT, ("approximate", "attr", "none")])
    functions[F.relu6] = _spec("hardtanh", [_INPUT, _INPLACE],
                               {"min_val": 0.0, "max_val": 6.0})
    functions[F.hardtanh] = _spec("hardtanh", [_INPUT, ("min_val", "attr", -1.0),
                                               ("max_val", "attr", 1.0), _INPLACE])
    functions[F.leaky_relu] = _spec("leaky_relu", [
        _INPUT, ("negative_slope", "attr", 0.01), _INPLACE])
    functions[F.elu] = _spec("elu", [_INPUT, ("alpha", "attr", 1.0), _INPLACE])
    functions[F.softplus] = _spec("softplus", [_INPUT, ("beta", "attr", 1.0),
                                               ("threshold", "attr", 20.0)])
    for name in ["silu", "hardswish", "hardsigmoid", "mish"]:
        functions[getattr(F, name)] = _spec(name, [_INPUT, _INPLACE])
    functions[F.sigmoid] = methods["sigmoid"]
    functions[F.tanh] = methods["tanh"]
    return functions


METHODS = _method_table()
FUNCTIONS = _function_table(METHODS)
