"""Views, data movement and index-computed ops: op-table entries (format in
__init__.py). "ints*" gathers the remaining positional arguments (or one
tuple/list) into an integer-list attribute."""
import torch
import torch.nn.functional as F

_INPUT = ("input", "operand")


def _spec(op, params, attributes=None):
    return (op, list(params), dict(attributes or {}))


def _tables():
    methods = {
        # view (unlike reshape) raises where the strides do not allow a view.
        "view": _spec("reshape", [_INPUT, ("shape", "ints*")], {"__must_view__": True}),
        "reshape": _spec("reshape", [_INPUT, ("shape", "ints*")]),
        "permute": _spec("permute", [_INPUT, ("dims", "ints*")]),
        "expand": _spec("expand", [_INPUT, ("size", "ints*", None, "shape")]),
        "expand_as": _spec("expand", [_INPUT, ("other", "shape_of", None, "shape")]),
        "view_as": _spec("reshape", [_INPUT, ("other", "shape_of", None, "shape")],
                         {"__must_view__": True}),
        "reshape_as": _spec("reshape", [_INPUT, ("other", "shape_of", None, "shape")]),
        "repeat": _spec("repeat", [_INPUT, ("repeats", "ints*")]),
        "transpose": _spec("transpose", [_INPUT, ("dim0", "attr"), ("dim1", "attr")]),
        # t() of fewer than 2 dims is a view of the tensor; of more, an error.
        "t": _spec("transpose", [_INPUT], {"dim0": 0, "dim1": 1, "__matrix_transpose__": True}),
        "squeeze": _spec("squeeze", [_INPUT, ("dim", "attr", None, "dims")]),
        "unsqueeze": _spec("unsqueeze", [_INPUT, ("dim", "attr")]),
        "flatten": _spec("flatten", [_INPUT, ("start_dim", "attr", 0), ("end_dim", "attr", -1)]),
        # Splitting one dim: always a view (the tracer makes it a reshape).
        "unflatten": _spec("unflatten", [_INPUT, ("dim", "attr"), ("sizes", "attr")]),
        "select": _spec("select", [_INPUT, ("dim", "attr"), ("index", "attr")]),
        "narrow": _spec("narrow", [_INPUT, ("dim", "attr"), ("start", "attr"), ("length", "attr")]),
        # x.contiguous() is x itself when x is contiguous (a copy otherwise);
        # clone() always copies.
        "contiguous": _spec("contiguous", [_INPUT, ("memory_format", "fixed", torch.contiguous_format)],
                            {"__view_if_contiguous__": True}),
        "detach": _spec("detach", [_INPUT]),
        # clone() keeps a densely permuted input's layout (preserve_format).
        "clone": _spec("contiguous", [_INPUT, "*", ("memory_format", "fixed", None)],
                       {"__keeps_layout__": True}),
        "flip": _spec("flip", [_INPUT, ("dims", "ints*")]),
        "roll": _spec("roll", [_INPUT, ("shifts", "attr"), ("dims", "attr", None)]),
        "tril": _spec("tril", [_INPUT, ("diagonal", "attr", 0)]),
        "triu": _spec("triu", [_INPUT, ("diagonal", "attr", 0)]),
        "split": _spec("split", [_INPUT, ("split_size", "attr", None, "size_or_sizes"), ("dim", "attr", 0)]),
        "chunk": _spec("chunk", [_INPUT, ("chunks", "attr"), ("dim", "attr", 0)]),
        "unbind": _spec("unbind", [_INPUT, ("dim", "attr", 0)]),
        "index_select": _spec("index_select", [_INPUT, ("dim", "attr"), ("index", "operand")]),
        "gather": _spec("gather", [_INPUT, ("dim", "attr"), ("index", "operand"), "*",
                                   ("sparse_grad", "fixed", False)]),
    }
    functions = {getattr(torch.Tensor, name): spec for name, spec in methods.items()}
    for name in ("permute", "flatten", "select", "narrow", "flip", "roll", "tril", "triu",
                 "transpose", "squeeze", "unsqueeze", "chunk", "unbind", "index_select",
                 "gather", "t", "clone", "unflatten"):
        functions[getattr(torch, name)] = methods[name]
    functions[torch.reshape] = _spec("reshape", [_INPUT, ("shape", "attr")])
    functions[torch.split] = _spec("split", [("tensor", "operand"),
                                             ("split_size_or_sections", "attr", None, "size_or_sizes"),
                                             ("dim", "attr", 0)])
    functions[torch.broadcast_to] = _spec("expand", [_INPUT, ("size", "attr", None, "shape")])
    functions[torch.cat] = _spec("cat", [("tensors", "operands"), ("dim", "attr", 0)])
    functions[torch.concat] = functions[torch.cat]
    functions[torch.stack] = _spec("stack", [("tensors", "operands"), ("dim", "attr", 0)])
    # F.pad traces through dynafuse.polyfills.pad (its modes), which pads
    # with constants through constant_pad_nd.
    functions[torch.constant_pad_nd] = _spec("pad", [_INPUT, ("pad", "attr"),
                                                     ("value", "attr", None)])
    functions[F.embedding] = _spec("embedding", [
        _INPUT, ("weight", "operand"),
        # padding_idx only changes the backward (no gradient for that row).
        ("padding_idx", "attr", None), ("max_norm", "fixed", None),
        ("norm_type", "fixed", 2.0), ("scale_grad_by_freq", "fixed", False),
        ("sparse", "fixed", False)])
    like = [_INPUT, "*", ("dtype", "attr", None), ("layout", "fixed", None),
            ("device", "fixed", None), ("requires_grad", "fixed", False),
            ("memory_format", "fixed", torch.preserve_format)]
    # device: a torch.device (x.device) or None; the graph types the result
    # on it ("cpu", "cuda:0").
    factory = [("size", "ints*", None, "shape"), "*", ("out", "fixed", None),
               ("dtype", "attr", None), ("layout", "fixed", None), ("device", "attr", None),
               ("requires_grad", "fixed", False)]
    options = ["*", ("out", "fixed", None), ("dtype", "attr", None), ("layout", "fixed", None),
               ("device", "attr", None), ("requires_grad", "fixed", False)]
    functions[torch.arange] = ("overload", [
        _spec("arange", [("end", "attr")] + options),
        _spec("arange", [("start", "attr"), ("end", "attr")] + options),
        _spec("arange", [("start", "attr"), ("end", "attr"), ("step", "attr")] + options),
    ], {})
    functions[torch.zeros] = _spec("full", factory, {"value": 0})
    functions[torch.ones] = _spec("full", factory, {"value": 1})
    functions[torch.full] = _spec("full", [("size", "attr", None, "shape"),
                                           ("fill_value", "attr", None, "value")] + factory[1:])
    functions[torch.zeros_like] = _spec("full_like", like, {"value": 0})
    functions[torch.ones_like] = _spec("full_like", like, {"value": 1})
    functions[torch.full_like] = _spec("full_like", [like[0], ("fill_value", "attr", None, "value")] + like[1:])
    # x.zero_() / x.fill_(v): the tensor becomes a fill of itself (through a
    # view of an intermediate, the base is updated: BytecodeTracer).
    methods["zero_"] = _spec("full_like", [_INPUT], {"value": 0, "__inplace__": True})
    methods["fill_"] = _spec("full_like", [_INPUT, ("value", "attr")], {"__inplace__": True})
    return functions, methods


FUNCTIONS, METHODS = _tables()
