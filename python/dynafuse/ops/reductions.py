"""Reductions and the composite ops built on them (softmax, normalizations,
statistics): op-table entries (format in __init__.py)."""
import torch
import torch.nn.functional as F

_INPUT = ("input", "operand")
_DIM = ("dim", "attr", None)
_KEEPDIM = ("keepdim", "attr", False)


def _variance(op):
    """var/std: with correction=, or the older unbiased= (True: 1, False: 0),
    keyword or positional after dim."""
    return ("overload", [
        _spec(op, [_INPUT, _DIM, "*", ("correction", "attr", 1), _KEEPDIM]),
        _spec(op, [_INPUT, _DIM, ("unbiased", "fixed", True), _KEEPDIM]),
        _spec(op, [_INPUT, _DIM, ("unbiased", "fixed", False), _KEEPDIM], {"correction": 0}),
    ], {})


def _spec(op, params, attributes=None):
    return (op, list(params), dict(attributes or {}))


def _tables():
    methods = {
        "sum": _spec("sum", [_INPUT, _DIM, _KEEPDIM, "*", ("dtype", "attr", None)]),
        "prod": _spec("prod", [_INPUT, _DIM, _KEEPDIM, "*", ("dtype", "attr", None)]),
        "mean": _spec("mean", [_INPUT, _DIM, _KEEPDIM, "*", ("dtype", "attr", None)]),
        "amax": _spec("amax", [_INPUT, ("dim", "attr", ()), _KEEPDIM]),
        "amin": _spec("amin", [_INPUT, ("dim", "attr", ()), _KEEPDIM]),
        "any": _spec("any", [_INPUT, _DIM, _KEEPDIM]),
        "all": _spec("all", [_INPUT, _DIM, _KEEPDIM]),
        "argmax": _spec("argmax", [_INPUT, _DIM, _KEEPDIM]),
        "argmin": _spec("argmin", [_INPUT, _DIM, _KEEPDIM]),
        "var": _variance("var"),
        "std": _variance("std"),
        "logsumexp": _spec("logsumexp", [_INPUT, ("dim", "attr"), _KEEPDIM]),
        # dtype casts the input first (the tracer emits the cast).
        "softmax": _spec("softmax", [_INPUT, ("dim", "attr"), ("dtype", "attr", None)]),
        "log_softmax": _spec("log_softmax", [_INPUT, ("dim", "attr"), ("dtype", "attr", None)]),
    }
    for name, extreme, elementwise in (("max", "amax", "maximum"), ("min", "amin", "minimum")):
        # max()/min() of the whole tensor: amax/amin marked "whole", whose
        # gradient (eager's evenly_distribute_backward) goes to the NaNs
        # when the result is NaN, where amax's makes the tensor NaN.
        methods[name] = ("overload", [
            _spec(extreme, [_INPUT], {"whole": True}),
            _spec(name + "_dim", [_INPUT, ("dim", "attr"), _KEEPDIM]),
            _spec(elementwise, [_INPUT, ("other", "tensor")]),
        ], {})
    functions = {getattr(torch, name): spec for name, spec in methods.items()}
    functions.update({getattr(torch.Tensor, name): spec for name, spec in methods.items()})
    functions[torch.linalg.vector_norm] = _spec(
        "norm", [_INPUT, ("ord", "attr", 2, "p"), _DIM, _KEEPDIM, "*", ("dtype", "fixed", None)])
    # _stacklevel only picks the frame of a warning (dim=None, deprecated).
    softmax = [_INPUT, ("dim", "attr"), ("_stacklevel", "attr_ignored", 3),
               ("dtype", "attr", None)]
    functions[F.softmax] = _spec("softmax", softmax)
    functions[F.log_softmax] = _spec("log_softmax", softmax)
    functions[F.layer_norm] = _spec("layer_norm", [
        _INPUT, ("normalized_shape", "attr"), ("weight", "optional_operand", None),
        ("bias", "optional_operand", None), ("eps", "attr", 1e-5)])
    functions[F.rms_norm] = _spec("rms_norm", [
        _INPUT, ("normalized_shape", "attr"), ("weight", "optional_operand", None),
        ("eps", "attr", None)])
    functions[F.group_norm] = _spec("group_norm", [
        _INPUT, ("num_groups", "attr"), ("weight", "optional_operand", None),
        ("bias", "optional_operand", None), ("eps", "attr", 1e-5)])
    functions[F.batch_norm] = _spec("batch_norm", [
        _INPUT, ("running_mean", "optional_operand"), ("running_var", "optional_operand"),
        ("weight", "optional_operand", None), ("bias", "optional_operand", None),
        ("training", "attr", False), ("momentum", "attr", 0.1), ("eps", "attr", 1e-5)])
    loss = [_INPUT, ("target", "operand"), ("weight", "fixed", None),
            ("size_average", "fixed", None), ("ignore_index", "attr", -100),
            ("reduce", "fixed", None), ("reduction", "attr", "mean")]
    functions[F.nll_loss] = _spec("nll_loss", loss)
    functions[F.cross_entropy] = _spec("cross_entropy", loss + [("label_smoothing", "fixed", 0.0)])
    functions[F.dropout] = _spec("dropout", [
        _INPUT, ("p", "attr", 0.5), ("training", "attr", True), ("inplace", "fixed", False)])
    return functions, methods


FUNCTIONS, METHODS = _tables()
