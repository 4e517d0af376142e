"""Python forms of torch functions that capture traces through instead of
mapping them to one graph op: each computes what the function computes from
ops the graph has (as TorchDynamo's polyfills do). POLYFILLS maps the torch
callable to its form; the tracer inlines the form wherever the code calls
the callable. Inputs a form does not handle raise NotImplementedError, so
capture stops there and eager runs the call (and raises eager's error)."""
import itertools

import torch
import torch.nn.functional as F


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


POLYFILLS = {F.pad: pad, itertools.repeat: repeat, torch.linspace: linspace}
