"""Python forms of torch functions that capture traces through instead of
mapping them to one graph op: each computes what the function computes from
ops the graph has (as TorchDynamo's polyfills do). POLYFILLS maps the torch
callable to its form; the tracer inlines the form wherever the code calls
the callable. Inputs a form does not handle raise NotImplementedError, so
capture stops there and eager runs the call (and raises eager's error)."""
import copy
import copyreg
import enum
import itertools
import types

import torch
import torch.nn.functional as F

from . import complex_pairs


def pad(input, pad, mode="constant", value=None):
    """F.pad: constant padding is one op (constant_pad_nd); reflect,
    replicate and circular padding concatenate each padded dim's borders
    (narrowed, flipped for reflect, expanded for replicate) around it, as
    eager's reflection_pad, replication_pad and _pad_circular compute."""
    if mode == "constant":
        if any(amount < 0 for amount in pad):
            # Negative amounts crop (nn.ZeroPad2d((-1, 0, -1, 0)) in NASNet):
            # narrow those sides first, then pad the others.
            if len(pad) % 2 or len(pad) // 2 > input.dim():
                raise NotImplementedError("F.pad: arguments eager checks")
            for k in range(len(pad) // 2):
                dim = input.dim() - 1 - k
                before, after = min(pad[2 * k], 0), min(pad[2 * k + 1], 0)
                kept = input.shape[dim] + before + after
                if kept < 0:
                    raise NotImplementedError("F.pad: cropping more than the input")
                input = input.narrow(dim, -before, kept)
            pad = [max(amount, 0) for amount in pad]
        return torch.constant_pad_nd(input, pad, 0 if value is None else value)
    dims = len(pad) // 2
    if (mode not in ("reflect", "replicate", "circular") or len(pad) % 2 or dims > 3
            or not dims or input.dim() not in (dims + 1, dims + 2)
            or (value is not None and value != 0)):
        raise NotImplementedError("F.pad: arguments eager checks")
    result = input
    for k in range(dims):
        dim = input.dim() - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        size = result.shape[dim]
        if before < 0 or after < 0:
            raise NotImplementedError("F.pad: negative padding")
        if mode == "reflect":
            if before >= size or after >= size:
                raise NotImplementedError("F.pad: reflect padding as wide as the input")
            first = result.narrow(dim, 1, before).flip(dim)
            last = result.narrow(dim, size - 1 - after, after).flip(dim)
        elif mode == "replicate":
            if size == 0:
                raise NotImplementedError("F.pad: replicate padding of an empty dim")
            shape = list(result.shape)
            shape[dim] = before
            first = result.narrow(dim, 0, 1).expand(shape)
            shape[dim] = after
            last = result.narrow(dim, size - 1, 1).expand(shape)
        else:
            if before > size or after > size:
                raise NotImplementedError("F.pad: circular padding wider than the input")
            first = result.narrow(dim, size - before, before)
            last = result.narrow(dim, 0, after)
        result = torch.cat([first, result, last], dim)
    return result


def repeat(object, times=None):
    """itertools.repeat with a count (torch's _ntuple: tuple(repeat(x, n))),
    unrolled like any generator; an endless repeat is not traced."""
    if times is None:
        raise NotImplementedError("itertools.repeat without a count")
    for _ in range(times):
        yield object


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    """torch.linspace of numbers: the first half counted up from start, the
    second down from end, by one step computed in the result's dtype, as
    eager's linspace kernel counts (symmetric about the middle)."""
    numbers = (int, float)
    if (out is not None or layout not in (None, torch.strided) or pin_memory
            or requires_grad or not isinstance(start, numbers)
            or not isinstance(end, numbers) or isinstance(start, bool)
            or isinstance(end, bool) or not isinstance(steps, int) or steps < 0):
        raise NotImplementedError("torch.linspace: arguments eager checks")
    # the default dtype as capture guards it (torch.tensor of a float)
    dtype = torch.tensor(0.0).dtype if dtype is None else dtype
    if not dtype.is_floating_point:
        raise NotImplementedError("torch.linspace of an integer dtype")
    if steps == 1:
        return torch.full((1,), start, dtype=dtype, device=device)
    start_t = torch.full((), start, dtype=dtype, device=device)
    end_t = torch.full((), end, dtype=dtype, device=device)
    step = (end_t - start_t) / max(steps - 1, 1)
    index = torch.arange(steps, dtype=dtype, device=device)
    from_start = start_t + step * index
    from_end = end_t - step * (steps - 1 - index)
    return torch.where(index < steps // 2, from_start, from_end)


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None,
        pin_memory=False, requires_grad=False):
    """torch.eye: ones where the row's index equals the column's (Kimi
    Linear's gated delta rule builds its triangular solve from one)."""
    m = n if m is None else m
    if (out is not None or layout not in (None, torch.strided) or pin_memory
            or requires_grad or not isinstance(n, int) or not isinstance(m, int)
            or isinstance(n, bool) or isinstance(m, bool) or n < 0 or m < 0):
        raise NotImplementedError("torch.eye: arguments eager checks")
    # the default dtype as capture guards it (torch.tensor of a float)
    dtype = torch.tensor(0.0).dtype if dtype is None else dtype
    rows = torch.arange(n, device=device).unsqueeze(1)
    columns = torch.arange(m, device=device).unsqueeze(0)
    return (rows == columns).to(dtype)


def broadcast_tensors(*tensors):
    """torch.broadcast_tensors (F.mse_loss and the other losses call it):
    each tensor expanded to the shapes' broadcast, so it differentiates as
    expand does. Shapes that do not broadcast are refused (the call then
    runs eagerly, where eager's error is raised)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise NotImplementedError("torch.broadcast_tensors of non-tensors")
    rank = 0
    for t in tensors:
        rank = t.dim() if t.dim() > rank else rank
    shape = [1] * rank
    for t in tensors:
        for i in range(t.dim()):
            j = rank - t.dim() + i
            size = t.shape[i]
            if size != 1:
                if shape[j] != 1 and shape[j] != size:
                    raise NotImplementedError("torch.broadcast_tensors of shapes "
                                              "that do not broadcast")
                shape[j] = size
    return tuple(t.expand(shape) for t in tensors)


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """torch._higher_order_ops.associative_scan: the inclusive scan of xs (a
    tensor, or a tuple or list of tensors scanned together) along dim under
    combine_fn, as a chain of combine_fn calls on one element's slices at a
    time (what vmap hands the function in eager's generic mode), stacked
    along dim. combine_fn is traced as any function is; the chain is what
    the graph fuses. reverse scans from the last element. Long scans (over
    512 elements) are refused: their graph would grow with the length."""
    if combine_mode not in ("pointwise", "generic") or not isinstance(reverse, bool):
        raise NotImplementedError("associative_scan: arguments eager checks")
    structure = type(xs) if isinstance(xs, (tuple, list)) else None
    leaves = list(xs) if structure is not None else [xs]
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise NotImplementedError("associative_scan of other than tensors")
    rank = leaves[0].dim()
    if not -rank <= dim < rank:
        raise NotImplementedError("associative_scan: dim out of range")
    dim = dim % rank
    length = leaves[0].shape[dim]
    if not 0 < length <= 512 or any(leaf.dim() != rank or leaf.shape[dim] != length
                                    for leaf in leaves):
        raise NotImplementedError("associative_scan: an empty or long scan, or "
                                  "leaves of different lengths")

    def pack(items):
        return structure(items) if structure is not None else items[0]

    def unpack(value):
        items = list(value) if structure is not None else [value]
        if len(items) != len(leaves) or not all(isinstance(t, torch.Tensor) for t in items):
            raise NotImplementedError("associative_scan: combine_fn returned "
                                      "another structure")
        return items

    order = range(length - 1, -1, -1) if reverse else range(length)
    scanned = [None] * length
    total = None
    for index in order:
        element = [leaf.select(dim, index) for leaf in leaves]
        total = element if total is None else unpack(combine_fn(pack(total), pack(element)))
        scanned[index] = total
    return pack([torch.stack([step[k] for step in scanned], dim)
                 for k in range(len(leaves))])


def mse_loss(input, target, reduction=1):
    """torch._C._nn.mse_loss (F.mse_loss's kernel, after it broadcast its
    operands): the squared difference, reduced by ATen's enum (0 none,
    1 mean, 2 sum); differentiable as its pieces are."""
    if not isinstance(reduction, int) or reduction not in (0, 1, 2):
        raise NotImplementedError("mse_loss: a reduction eager checks")
    squared = (input - target).square()
    if reduction == 0:
        return squared
    return squared.mean() if reduction == 1 else squared.sum()


def _power_of_two_factors(input, output_size, scale_factors, spatial):
    """The integer factor per spatial dim of a nearest upsampling whose
    factors are all powers of two (ATen's source index floor(dst / k) is
    then exact in float32, for "nearest" and "nearest-exact" alike); None
    for any other."""
    if (scale_factors is None) == (output_size is None):
        return None
    if scale_factors is not None:
        if not isinstance(scale_factors, (list, tuple)) or len(scale_factors) != spatial:
            return None
        factors = []
        for scale in scale_factors:
            if not isinstance(scale, (int, float)) or scale != int(scale):
                return None
            factors.append(int(scale))
    else:
        if not isinstance(output_size, (list, tuple)) or len(output_size) != spatial:
            return None
        factors = []
        for d, size in enumerate(output_size):
            source = input.shape[input.dim() - spatial + d]
            if source == 0 or size % source:
                return None
            factors.append(size // source)
    if any(k < 1 or k & (k - 1) for k in factors):
        return None
    return factors


def _nearest_upsampling(spatial, vec_overload, default_overload):
    """torch._C._nn.upsample_nearest{1,2,3}d and _upsample_nearest_exact*
    (F.interpolate's nearest modes): by a power-of-two factor per dim, each
    output element reads source element dst // k, which is the input with
    each spatial dim repeated k times in place (unsqueeze, expand,
    flatten): a view the consumer reads inline, differentiable as its
    pieces are, copied (eager's result is a new tensor). Other factors,
    other dtypes, the per-dim scales overload and inputs ATen rejects run
    ATen's kernel as one op."""
    def form(input, output_size=None, scale_factors=None, *scales, **keywords):
        if scales or keywords or not (scale_factors is None
                                      or isinstance(scale_factors, (list, tuple))):
            # upsample_nearest2d(input, output_size, scales_h, scales_w)
            return default_overload(input, output_size, scale_factors, *scales, **keywords)
        factors = None
        # (ATen raises for an empty channel or spatial dim and for integer
        # inputs other than uint8: its call does.)
        if (isinstance(input, torch.Tensor) and input.dim() == spatial + 2
                and (input.is_floating_point() or input.dtype == torch.uint8)
                and all(size != 0 for size in input.shape[1:])):
            factors = _power_of_two_factors(input, output_size, scale_factors, spatial)
        if factors is None:
            return vec_overload(input, output_size, scale_factors)
        result = input
        for d in range(spatial - 1, -1, -1):
            if factors[d] == 1:
                continue
            dim = 2 + d
            shape = list(result.shape[:dim + 1]) + [factors[d]] + list(result.shape[dim + 1:])
            result = result.unsqueeze(dim + 1).expand(shape).flatten(dim, dim + 1)
        # A size-1 dim repeated is a stride-0 view of the input: a copy, as
        # eager's result is (the lowering reads a clone inline).
        return result.clone()
    return form


def _nearest_upsamplings():
    forms = {}
    for spatial in (1, 2, 3):
        for name in (f"upsample_nearest{spatial}d", f"_upsample_nearest_exact{spatial}d"):
            function = getattr(torch._C._nn, name, None)
            packet = getattr(torch.ops.aten, name, None)
            vec = getattr(packet, "vec", None) if packet is not None else None
            default = getattr(packet, "default", None) if packet is not None else None
            if function is not None and vec is not None and default is not None:
                forms[function] = _nearest_upsampling(spatial, vec, default)
    return forms


# What copy.deepcopy returns as is (copy's own atomic types, and torch's
# immutable descriptions: a dtype reduces to a name, a device to itself).
_ATOMIC_TYPES = (type(None), int, float, bool, complex, bytes, str, type, range,
                 types.BuiltinFunctionType, types.FunctionType, types.CodeType,
                 property, type(Ellipsis), type(NotImplemented), torch.dtype,
                 torch.device, torch.layout, torch.memory_format)
_OBJECT_SLOTS = ("__reduce_ex__", "__reduce__", "__getstate__", "__new__")
_OWN_HOOKS = ("__setstate__", "__getnewargs_ex__", "__getnewargs__")


def deepcopy(x, memo=None, _nil=None):
    """copy.deepcopy of what capture can build: atoms as they are; lists,
    tuples and dicts copied item by item; instances of plain classes made
    without __init__ (object.__new__) with a deep copy of their instance
    dict stored as copy's _reconstruct stores it (past __setattr__). One
    object copied twice gives one copy (the pairs seen so far, compared by
    identity, are copy's memo). Tensors, classes with their own copy or
    pickle protocol, and a memo from the caller are refused (eager runs
    the call)."""
    if memo is not None:
        raise NotImplementedError("copy.deepcopy with a memo")
    return _deepcopy(x, [])


def _deepcopy(x, copies):
    kind = _copy_kind(type(x), True)
    if kind == "atomic":
        return x
    for original, copied in copies:
        if original is x:
            return copied
    if kind == "list":
        y = []
        copies.append((x, y))
        for item in x:
            y.append(_deepcopy(item, copies))
        return y
    if kind == "tuple":
        y = tuple([_deepcopy(item, copies) for item in x])
        for original, copied in copies:  # a tuple holding itself, through a list
            if original is x:
                return copied
        for a, b in zip(x, y):
            if a is not b:
                return y
        return x
    if kind == "dict":
        y = {}
        copies.append((x, y))
        for key, value in x.items():
            y[_deepcopy(key, copies)] = _deepcopy(value, copies)
        return y
    if kind != "object":
        raise NotImplementedError("copy.deepcopy of an object with a protocol of its own")
    y = object.__new__(type(x))
    copies.append((x, y))
    y.__dict__.update(_deepcopy(x.__dict__, copies))
    return y


def _capture_time_query(function):
    """Marks a function of classes and constants that capture calls
    instead of tracing (its answer depends on nothing else, and the
    classes it is given are guarded)."""
    function.__dynafuse_capture_time_query__ = True
    return function


def shallow_copy(x):
    """copy.copy of what capture can build: atoms, tuples as they are;
    lists and dicts as new containers of the same items; instances of
    plain classes made without __init__, their instance dict's entries
    stored as copy's _reconstruct stores them. Refused as deepcopy refuses."""
    kind = _copy_kind(type(x), False)
    if kind in ("atomic", "tuple"):
        return x
    if kind == "list":
        return list(x)
    if kind == "dict":
        return dict(x)
    if kind != "object":
        raise NotImplementedError("copy.copy of an object with a protocol of its own")
    y = object.__new__(type(x))
    y.__dict__.update(x.__dict__)
    return y


@_capture_time_query
def _copy_kind(cls, deep):
    """How copy.deepcopy (deep) or copy.copy copies an instance of cls:
    "atomic" (returned as is), "list", "tuple", "dict" (exactly those
    classes: copy's dispatch tables), "object" (object's own reduction,
    which copy reconstructs as object.__new__(cls) and the instance dict,
    deep-copied or not: a heap class laid out as object, without __slots__,
    copy or pickle hooks of its own or a copyreg entry), or None (anything
    else: tensors, dict subclasses, classes with a protocol of their
    own)."""
    if cls in _ATOMIC_TYPES or issubclass(cls, enum.Enum):
        return "atomic"
    if cls in (list, tuple, dict):
        return cls.__name__
    if getattr(cls, "__deepcopy__" if deep else "__copy__", None) is not None:
        return None
    if cls in copyreg.dispatch_table or cls is object or issubclass(cls, torch.Tensor):
        return None
    if any(getattr(cls, name, None) is not None for name in _OWN_HOOKS):
        return None
    if any(getattr(cls, name) is not getattr(object, name) for name in _OBJECT_SLOTS):
        return None
    plain = all(k is object or ("__slots__" not in vars(k) and k.__flags__ & (1 << 9))
                for k in cls.__mro__)
    return "object" if plain else None


POLYFILLS = {copy.deepcopy: deepcopy, copy.copy: shallow_copy, F.pad: pad,
             itertools.repeat: repeat, torch.linspace: linspace, torch.eye: eye,
             torch.broadcast_tensors: broadcast_tensors, torch._C._nn.mse_loss: mse_loss}
POLYFILLS.update(complex_pairs.POLYFILLS)
POLYFILLS.update(_nearest_upsamplings())
try:  # a higher-order op of torch 2.5 and later
    from torch._higher_order_ops.associative_scan import associative_scan as _scan
    POLYFILLS[_scan] = associative_scan
except ImportError:
    pass
