"""Value comparison: per-dtype tolerances and the float64 arbiter.

`close` compares a compiled value with eager's (NaN positions must match;
integers and bools exactly). When they differ, `judge` decides with a
reference run of the program whose floating inputs were upcast to float64:
the difference is `numerics` when the compiled value is about as close to
the reference as eager's is, and `wrong` otherwise. Where compiled and
eager disagree on NaN or inf, compiled is wrong only if eager agrees with
the reference there (rounded to the output dtype) and compiled does not: on
low precision, eager's own result depends on which vector path its CPU
kernel took, and that must not decide the verdict. Two more runs of eager
on inputs moved by a couple of ulps (`perturbed`) measure how much the
program amplifies rounding noise (a layer norm of nearly equal values, a
floor at an integer): compiled may differ by as much. The inputs move by
ulps of the coarsest float dtype the program computes in (`EagerProbe`),
so a program that casts float32 inputs to bfloat16 moves by bfloat16 ulps.
The probe also spots float-to-integer conversions of NaN, inf or
out-of-range values, whose result C leaves undefined, so eager and compiled
may both be right.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: (rtol, atol) per floating dtype; integers and bools compare exactly.
TOLERANCES = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (5e-3, 1e-3),
    torch.bfloat16: (3e-2, 1e-2),
}
#: How much further from the float64 reference than eager compiled may be.
SLACK = 3.0


def structure(expected, actual):
    """What differs in kind, shape or dtype (None when nothing does)."""
    if expected is None or actual is None:
        return None if expected is actual else f"eager gives {expected!r:.80}, compiled {actual!r:.80}"
    if not isinstance(actual, torch.Tensor):
        return f"compiled gives a {type(actual).__name__}, eager a tensor"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, eager {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)}, eager {tuple(expected.shape)}"
    return None


def _agree(expected, actual, dtype):
    """Elementwise agreement in float64 (equal NaNs agree)."""
    if dtype in TOLERANCES:
        rtol, atol = TOLERANCES[dtype]
        return torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True)
    return actual == expected


def close(expected, actual):
    if expected is None:
        return actual is None
    return bool(_agree(expected.detach(), actual.detach(), expected.dtype).all())


def _describe(expected, actual, bad):
    count = int(bad.sum())
    where = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
    return (f"{count}/{bad.numel()} elements differ, first at {list(where)}: "
            f"compiled {actual[where].item()!r}, eager {expected[where].item()!r}")


class UndefinedCast(ArithmeticError):
    """A float-to-integer conversion of NaN, inf or an out-of-range value."""


class EagerProbe(TorchDispatchMode):
    """Watches an eager run at ATen's level: `undefined_cast` turns True at a
    float-to-integer conversion of NaN, inf or an out-of-range value (which
    raises UndefinedCast when `strict`), and `eps` is the machine epsilon of
    the coarsest floating dtype any op produced (the rounding noise the
    program's result carries, whatever its inputs' and outputs' dtypes)."""
    CONVERSIONS = {"_to_copy", "copy_", "copy", "fill_", "index_put_", "_index_put_impl_",
                   "masked_fill_", "masked_scatter_", "to"}
    #: Ops whose integer results (indices) pick among their input's values.
    PICKERS = {"argmin", "argmax", "max", "min", "sort", "argsort", "topk", "kthvalue",
               "mode", "median", "nanmedian", "sort.stable"}

    def __init__(self, strict=False):
        super().__init__()
        self.strict = strict
        self.undefined_cast = False
        self.near_tie = False
        self.eps = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
        for tensor in tensors:
            if tensor.dtype.is_floating_point:
                self.eps = max(self.eps, torch.finfo(tensor.dtype).eps)
        if func.overloadpacket.__name__ in self.CONVERSIONS:
            self._check_conversion(func, args, kwargs, tensors)
        if func.overloadpacket.__name__ in self.PICKERS and args:
            self._check_ties(args[0])
        return result

    def _check_ties(self, source):
        """near_tie turns True when an index-picking op sees two distinct
        values closer than rounding noise at the tensor's scale (values
        left by a cancellation): which one wins is rounding's choice."""
        if not isinstance(source, torch.Tensor) or not source.dtype.is_floating_point:
            return
        values = source.detach().double().flatten()
        values = values[torch.isfinite(values)].unique()
        if values.numel() < 2:
            return
        noise = 16 * torch.finfo(source.dtype).eps * float(values.abs().max())
        if bool((values.diff() <= noise).any()):
            self.near_tie = True

    def _check_conversion(self, func, args, kwargs, results):
        targets = [t for t in results if not t.dtype.is_floating_point
                   and not t.dtype.is_complex and t.dtype != torch.bool]
        if not targets:
            return
        info = torch.iinfo(targets[0].dtype)
        for source in tree_leaves((args, kwargs)):
            if isinstance(source, torch.Tensor) and source.dtype.is_floating_point:
                values = source.detach().double().trunc()
                if bool((~torch.isfinite(values) | (values < info.min) | (values > info.max)).any()):
                    self.undefined_cast = True
                    if self.strict:
                        raise UndefinedCast(f"{func} of a non-finite or out-of-range value")


def _moved(expected, perturbed):
    """Per element, how far eager's result moves under perturbed inputs
    (inf where it changes between finite and not); None without them."""
    moves = [p.detach().double() for p in perturbed or () if p is not None and p.shape == expected.shape]
    if not moves:
        return None
    e = expected.double()
    distance = torch.zeros_like(e)
    for moved in moves:
        step = (moved - e).abs()
        step[torch.isnan(moved) != torch.isnan(e)] = float("inf")
        step[(moved == e) | (torch.isnan(moved) & torch.isnan(e))] = 0.0
        distance = torch.maximum(distance, step)
    return distance


def judge(expected, actual, reference, perturbed=None):
    """('numerics' or 'wrong', description) for values `close` rejected,
    given the float64 reference and eager's results on perturbed inputs."""
    expected, actual = expected.detach(), actual.detach()
    dtype = expected.dtype
    bad = ~_agree(expected, actual, dtype)
    text = _describe(expected, actual, bad)
    moved = _moved(expected, perturbed)
    unstable = torch.zeros_like(bad) if moved is None else moved > 0
    if reference is None or reference.shape != expected.shape:
        if bool(unstable[bad].all()):
            return "numerics", text + " (eager itself moves there when its inputs move by an ulp)"
        return "wrong", text + " (no float64 reference)"
    reference = reference.detach()
    rounded = reference.to(dtype)
    if dtype not in TOLERANCES:
        if bool(((actual == rounded) | unstable)[bad].all()):
            return "numerics", text + " (compiled matches float64, or eager moves there too)"
        return "wrong", text
    e, a, r = expected.double(), actual.double(), reference.double()
    special = bad & ~(torch.isfinite(a) & torch.isfinite(e))
    if special.any():
        eager_right = _agree(rounded, expected, dtype)[special]
        compiled_right = _agree(rounded, actual, dtype)[special]
        # Where eager itself strays from float64 on this output's finite
        # elements, it computes in a regime where rounding decides (eager's
        # own noise, such as a layer norm of one element, feeds a division):
        # a NaN here is no evidence against compiled.
        finite_reference = torch.isfinite(r) & torch.isfinite(e)
        eager_trusted = bool(_agree(rounded, expected, dtype)[finite_reference].all())
        if eager_trusted and bool((eager_right & ~compiled_right & ~unstable[special]).any()):
            return "wrong", text + " (eager matches the float64 reference there)"
    finite = bad & torch.isfinite(a) & torch.isfinite(e) & torch.isfinite(r)
    rtol, atol = TOLERANCES[dtype]
    allowed = SLACK * (e - r).abs() + atol + rtol * r.abs()
    if moved is not None:
        # Rounding noise spreads: an element that happened not to move may
        # still be as sensitive as most of its neighbours.
        finite_moves = moved[torch.isfinite(moved)]
        typical = finite_moves.quantile(0.75) if finite_moves.numel() else torch.tensor(0.0)
        allowed = allowed + SLACK * torch.maximum(moved, typical.double())
        # Where an ulp of input noise moves eager's result by a tenth of
        # itself, the value is noise: any value is as good.
        allowed[moved > 0.1 * e.abs() + atol] = float("inf")
    if bool(((a - r).abs() > allowed)[finite].any()):
        worst = ((a - r).abs() - allowed)[finite].max().item()
        return "wrong", text + f" (compiled is {worst:.3g} further from float64 than allowed)"
    return "numerics", text + " (as close to float64 as eager)"
