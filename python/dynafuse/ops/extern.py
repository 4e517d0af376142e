"""Ops run by ATen (matmul, convolution, pooling) and linear, whose bias is
fused as an epilogue: op-table entries (format in __init__.py)."""
import torch
import torch.nn.functional as F

_INPUT = ("input", "operand")


def _spec(op, params, attributes=None):
    return (op, list(params), dict(attributes or {}))


def _tables():
    methods = {
        "mm": _spec("mm", [_INPUT, ("mat2", "operand")]),
        "bmm": _spec("bmm", [_INPUT, ("mat2", "operand")]),
        "matmul": _spec("matmul", [_INPUT, ("other", "operand")]),
        "addmm": _spec("addmm", [_INPUT, ("mat1", "operand"), ("mat2", "operand"), "*",
                                 ("beta", "attr", 1), ("alpha", "attr", 1)]),
        "baddbmm": _spec("baddbmm", [_INPUT, ("batch1", "operand"), ("batch2", "operand"), "*",
                                     ("beta", "attr", 1), ("alpha", "attr", 1)]),
    }
    functions = {getattr(torch, name): spec for name, spec in methods.items()}
    functions.update({getattr(torch.Tensor, name): spec for name, spec in methods.items()})
    functions[F.linear] = _spec("linear", [_INPUT, ("weight", "operand"), ("bias", "optional_operand", None)])
    conv = [_INPUT, ("weight", "operand"), ("bias", "optional_operand", None), ("stride", "attr", 1),
            ("padding", "attr", 0), ("dilation", "attr", 1), ("groups", "attr", 1)]
    functions[F.conv1d] = _spec("conv1d", conv)
    functions[F.conv2d] = _spec("conv2d", conv)
    functions[F.max_pool2d] = _spec("max_pool2d", [
        _INPUT, ("kernel_size", "attr"), ("stride", "attr", None), ("padding", "attr", 0),
        ("dilation", "attr", 1), ("ceil_mode", "attr", False), ("return_indices", "fixed", False)])
    functions[F.avg_pool2d] = _spec("avg_pool2d", [
        _INPUT, ("kernel_size", "attr"), ("stride", "attr", None), ("padding", "attr", 0),
        ("ceil_mode", "attr", False), ("count_include_pad", "attr", True),
        ("divisor_override", "attr", None)])
    functions[F.adaptive_avg_pool2d] = _spec("adaptive_avg_pool2d", [_INPUT, ("output_size", "attr")])
    return functions, methods


FUNCTIONS, METHODS = _tables()
