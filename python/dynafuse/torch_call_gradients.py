"""Whether a torch callable kept in a training graph (call_torch) can be
differentiated by torch's autograd at run time (lib/Torch/TorchCallGradients.cpp):
its gradient step calls it again on the saved operands, so it must draw no
random numbers, which an ATen operator's tags tell, and its gradient must run,
which meta tensors tell at capture."""
import torch


def aten_packet(fn):
    """The ATen operator overload packet fn runs, or None."""
    if isinstance(fn, torch._ops.OpOverload):
        return fn.overloadpacket
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return fn
    name = getattr(fn, "__name__", None)
    if not name:
        return None
    return getattr(torch.ops.aten, name, None)


def refusal(fn, args, kwargs, leaves):
    """None when fn(*args, **kwargs) on meta tensors (leaves requiring grad)
    can be differentiated by recomputing it; else why not."""
    try:
        packet = aten_packet(fn)
    except Exception:  # torch.ops raises for names it cannot resolve
        packet = None
    if packet is None:
        return "no ATen operator is known for it (whether it draws random numbers cannot be told)"
    for name in packet.overloads():
        if torch.Tag.nondeterministic_seeded in getattr(packet, name).tags:
            return ("it draws random numbers (its gradient recomputes it, which "
                    "would draw others)")
    with torch.enable_grad():
        try:
            result = fn(*args, **kwargs)
        except Exception as error:
            return f"it fails on meta tensors requiring grad: {type(error).__name__}: {error}"
        outputs = [t for t in (result if isinstance(result, (tuple, list)) else (result,))
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outputs:
            return "torch gives its results no gradient"
        try:
            torch.autograd.grad(outputs, leaves, [torch.ones_like(t) for t in outputs],
                                allow_unused=True)
        except Exception as error:
            first = str(error).splitlines()[0] if str(error) else ""
            return f"its gradient fails on meta tensors: {type(error).__name__}: {first}"
    return None
