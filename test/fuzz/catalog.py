"""The op catalog: one builder per op family, each drafting one statement.

A builder gets a programs.Builder (random stream, live variables with their
example tensors, helpers) and returns a draft `(text, mutates, defines)`:
the expression or statement text, the name it updates in place (or None),
and whether it defines a new variable. It returns None when nothing live
fits. Builders prefer operands that fit (broadcastable, matching inner dims),
but need not be exact: programs.generate runs every draft eagerly and drops
the ones that raise. FAMILIES and FAMILY_WEIGHTS say how often each family
is drawn.
"""
import torch

FLOAT, INT, BOOL = "f", "i", "b"


def kind_of(tensor):
    if tensor.dtype.is_floating_point:
        return FLOAT
    return BOOL if tensor.dtype == torch.bool else INT


def broadcastable(a, b):
    try:
        torch.broadcast_shapes(a.shape, b.shape)
        return True
    except RuntimeError:
        return False


def define(text):
    return text, None, True


def update(text, target, defines=False):
    return text, target, defines


# (template, kinds of x it suits)
UNARY = [
    ("torch.exp({x})", "f"), ("torch.log({x})", "f"), ("{x}.sqrt()", "f"), ("torch.sin({x})", "f"),
    ("torch.cos({x})", "f"), ("torch.tanh({x})", "f"), ("torch.sigmoid({x})", "f"),
    ("torch.rsqrt({x})", "f"), ("{x}.reciprocal()", "f"), ("torch.floor({x})", "fi"),
    ("torch.ceil({x})", "f"), ("torch.round({x})", "f"), ("torch.trunc({x})", "f"),
    ("torch.erf({x})", "f"), ("torch.log1p({x})", "f"), ("torch.expm1({x})", "f"),
    ("F.gelu({x})", "f"), ("F.silu({x})", "f"), ("F.softplus({x})", "f"),
    ("F.leaky_relu({x}, 0.1)", "f"), ("F.elu({x})", "f"), ("F.hardtanh({x})", "f"),
    ("torch.atan({x})", "f"), ("{x}.pow(0.5)", "f"), ("torch.nan_to_num({x})", "f"),
    ("torch.isnan({x})", "fi"), ("torch.isinf({x})", "f"), ("torch.isfinite({x})", "f"),
    ("{x}.frac()", "f"), ("F.relu({x})", "fi"), ("torch.neg({x})", "fi"), ("-{x}", "fi"),
    ("{x}.abs()", "fi"), ("torch.sign({x})", "fib"), ("{x}.square()", "fi"),
    ("{x} ** 2", "fi"), ("torch.pow({x}, 3)", "fi"), ("{x} ** -1", "f"), ("2 ** {x}", "fi"),
    ("~{x}", "ib"), ("torch.bitwise_not({x})", "ib"), ("torch.logical_not({x})", "fib"),
    ("{x}.sigmoid() * {x}", "f"), ("torch.abs({x}) + 1", "fi"),
]

BINARY = [
    "{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / {y}", "{x} // {y}", "{x} % {y}",
    "torch.add({x}, {y}, alpha=2)", "torch.sub({x}, {y}, alpha=0.5)", "{x}.mul({y})",
    "torch.div({x}, {y}, rounding_mode='floor')", "torch.div({x}, {y}, rounding_mode='trunc')",
    "torch.maximum({x}, {y})", "torch.minimum({x}, {y})", "torch.atan2({x}, {y})",
    "{x} ** {y}", "torch.pow({x}, {y})", "torch.fmod({x}, {y})", "torch.remainder({x}, {y})",
    "{x} < {y}", "{x} <= {y}", "{x} == {y}", "{x} != {y}", "{x} > {y}", "{x} >= {y}",
    "torch.eq({x}, {y})", "torch.logical_and({x}, {y})", "torch.logical_or({x}, {y})",
    "torch.logical_xor({x}, {y})", "{x} & {y}", "{x} | {y}", "{x} ^ {y}",
    # The sign of a NaN is not a result (x86 makes -nan, other paths +nan):
    # copysign takes its sign from y's non-NaN values only.
    "torch.lerp({x}, {y}, 0.3)", "torch.copysign({x}, torch.where({y} == {y}, {y}, 1.0))",
]


def pointwise_unary(b):
    x = b.pick()
    kind = kind_of(b.tensor(x))
    template = b.rng.choice([t for t, kinds in UNARY if kind in kinds])
    return define(template.format(x=x))


def pointwise_binary(b):
    x = b.pick()
    template = b.rng.choice(BINARY)
    if b.chance(0.3):
        y = b.scalar(x)
        if b.chance(0.4) and not template.startswith("{x}."):
            x, y = y, x
    else:
        y = b.pick_compatible(x, broadcastable)
    return define(template.format(x=x, y=y))


def where_clamp(b):
    x = b.pick()
    rng = b.rng
    choice = rng.randrange(6)
    if choice == 0:
        cond = b.pick_compatible(x, lambda t, m: t.dtype == torch.bool and broadcastable(t, m))
        other = b.scalar(x) if b.chance(0.4) else b.pick_compatible(x, broadcastable)
        return define(f"torch.where({cond}, {x}, {other})")
    if choice == 1:
        other = b.scalar(x) if b.chance(0.5) else b.pick_compatible(x, broadcastable)
        return define(f"torch.where({x} > {b.scalar(x)}, {x}, {other})")
    low, high = sorted(rng.sample((-2, -1, 0, 1, 2, 3), 2))
    if b.chance(0.5):
        low, high = low / 2, high / 2
    if choice == 2:
        return define(f"{x}.clamp({low}, {high})")
    if choice == 3:
        return define(rng.choice((f"torch.clamp({x}, min={low})", f"{x}.clamp(max={high})")))
    bound = b.pick_compatible(x, broadcastable)
    if choice == 4:
        return define(f"{x}.clamp(max={bound})")
    return define(f"torch.clamp({x}, {bound}, {b.pick_compatible(x, broadcastable)})")


REDUCE_ANY_DIMS = ("sum", "mean", "amax", "amin", "std", "var", "all", "any")
REDUCE_ONE_DIM = ("prod", "argmax", "argmin", "logsumexp")


def reduction(b):
    x = b.pick()
    t = b.tensor(x)
    rng = b.rng
    op = rng.choice(REDUCE_ANY_DIMS + REDUCE_ONE_DIM + ("max", "min"))
    keep = ", keepdim=True" if b.chance(0.35) else ""
    extra = rng.choice(("", ", correction=0", ", unbiased=False")) if op in ("std", "var") else ""
    if op in ("max", "min"):
        if b.chance(0.3):
            return define(f"torch.{op}({x})")
        field = rng.choice((".values", "[0]", ".indices", "[1]"))
        return define(f"{x}.{op}({b.dim(x)}{keep}){field}")
    if op != "logsumexp" and b.chance(0.3):
        if op == "sum" and b.chance(0.2):
            return define(f"{x}.sum(dtype=torch.float64)")
        return define(f"{x}.{op}({extra[2:]})" if b.chance(0.6) else f"torch.{op}({x}{extra})")
    if op in REDUCE_ANY_DIMS and t.dim() >= 2 and b.chance(0.3):
        dims = tuple(sorted(rng.sample(range(t.dim()), rng.randint(2, t.dim()))))
        return define(f"torch.{op}({x}, dim={dims}{keep}{extra})")
    dim = b.dim(x)
    if b.chance(0.5):
        return define(f"{x}.{op}({dim}{keep}{extra})")
    return define(f"torch.{op}({x}, dim={dim}{keep}{extra})")


def _trailing_shape(b, x, count):
    """normalized_shape for the last `count` dims, as a literal or x.shape[-k:]."""
    shape = tuple(b.tensor(x).shape[-count:])
    return f"{x}.shape[-{count}:]" if b.chance(0.6) else repr(shape)


def norm(b):
    x = b.pick(lambda t: t.dtype.is_floating_point) or b.pick()
    t = b.tensor(x)
    rng = b.rng
    dim = b.dim(x)
    choice = rng.randrange(6)
    if choice == 0:
        return define(rng.choice((f"torch.softmax({x}, {dim})", f"F.softmax({x}, dim={dim})",
                                  f"{x}.softmax({dim})",
                                  f"torch.softmax({x}, {dim}, dtype=torch.float32)")))
    if choice == 1:
        return define(rng.choice((f"F.log_softmax({x}, dim={dim})", f"{x}.log_softmax({dim})")))
    if choice == 2:
        return define(rng.choice((f"F.normalize({x}, dim={dim})",
                                  f"F.normalize({x}, p=1.0, dim={dim})", f"F.normalize({x})")))
    count = rng.randint(1, min(2, t.dim())) if t.dim() else 1
    shape = _trailing_shape(b, x, count)
    trailing = t.shape[-count:] if t.dim() else ()
    weight = b.pick(lambda w: w.dtype == t.dtype and tuple(w.shape) == tuple(trailing))
    affine = f", {weight}" if weight and b.chance(0.7) else ""
    eps = rng.choice(("", ", eps=1e-6", ", eps=1e-3"))
    if choice == 5:
        return define(f"F.rms_norm({x}, {shape}{affine}{eps})")
    bias = f", {weight}" if affine and b.chance(0.5) else ""
    return define(f"F.layer_norm({x}, {shape}{affine}{bias}{eps})")


def _slice_text(b, size):
    """One index of a subscript: a slice with steps or negative bounds, an
    int, None or '...'."""
    rng = b.rng
    size = max(size, 1)
    form = rng.randrange(9)
    start, stop, step = rng.randint(-size, size), rng.randint(-size, size), rng.randint(1, 3)
    return (":", f"{abs(start)}:", f":{stop}", f"{start}:{stop}", f"::{step}",
            f"{abs(start)}::{step}", f"{-abs(stop) or -1}:", str(rng.randrange(-size, size)),
            "None")[form]


def subscript(b, x):
    t = b.tensor(x)
    if t.dim() == 0:
        return b.rng.choice(("None", "...", "()"))
    parts = [_slice_text(b, t.shape[d]) for d in range(b.rng.randint(1, t.dim()))]
    if b.chance(0.15):
        parts = ["..."] + parts[-1:]
    return ", ".join(parts)


def view(b):
    x = b.pick()
    t = b.tensor(x)
    rng = b.rng
    rank = t.dim()
    choice = rng.randrange(14)
    if choice == 0:
        return define(rng.choice((f"{x}.reshape(-1)", f"{x}.view(-1)", f"{x}.flatten()")))
    if choice == 1 and rank >= 2:
        i = rng.randrange(rank - 1)
        merged = (f"{b.size(x, i)} * {b.size(x, i + 1)}" if b.chance(0.7) else "-1")
        sizes = [b.size(x, d) for d in range(i)] + [merged] + [b.size(x, d) for d in range(i + 2, rank)]
        return define(f"{x}.{rng.choice(('view', 'reshape'))}({', '.join(sizes)})")
    if choice == 2 and rank >= 1:
        d = rng.randrange(rank)
        n = t.shape[d]
        factor = next((f for f in (2, 3) if n % f == 0 and n > f), 1)
        if b.chance(0.5):
            return define(f"{x}.unflatten({d}, ({factor}, -1))")
        sizes = [b.size(x, k) for k in range(rank)]
        sizes[d:d + 1] = [str(factor), str(n // factor) if b.chance(0.5) else "-1"]
        return define(f"{x}.view({', '.join(sizes)})")
    if choice == 3 and rank >= 2:
        perm = list(range(rank))
        rng.shuffle(perm)
        return define(rng.choice((f"{x}.permute{tuple(perm)}", f"torch.permute({x}, {tuple(perm)})")))
    if choice == 4 and rank >= 1:
        d0, d1 = b.dim(x), b.dim(x)
        return define(rng.choice((f"{x}.transpose({d0}, {d1})", f"torch.transpose({x}, {d0}, {d1})")))
    if choice == 5:
        if rank <= 2:
            return define(rng.choice((f"{x}.t()", f"{x}.T")))
        return define(f"{x}.mT")
    if choice == 6:
        d = b.dim(x, extra=1)
        return define(rng.choice((f"{x}.unsqueeze({d})", f"{x}[None]", f"{x}[..., None]")))
    if choice == 7:
        units = [d for d in range(rank) if t.shape[d] == 1]
        if units and b.chance(0.7):
            return define(f"{x}.squeeze({rng.choice(units)})")
        return define(rng.choice((f"{x}.squeeze()", f"torch.squeeze({x}, {b.dim(x)})")))
    if choice == 8:
        if 1 in t.shape and b.chance(0.6):
            sizes = [str(rng.randint(2, 4)) if s == 1 else rng.choice((str(s), "-1"))
                     for s in t.shape]
            return define(f"{x}.expand({', '.join(sizes)})")
        target = b.pick(lambda o: o.dim() >= rank and broadcastable(o, t)
                        and torch.broadcast_shapes(o.shape, t.shape) == o.shape)
        if target and b.chance(0.6):
            return define(f"{x}.expand_as({target})")
        return define(f"{x}.expand({rng.randint(1, 3)}, *{x}.shape)")
    if choice in (9, 10):
        return define(f"{x}[{subscript(b, x)}]")
    if choice == 11 and rank >= 1:
        d = b.dim(x)
        n = t.shape[d]
        start = rng.randint(0, max(n - 1, 0))
        length = rng.choice((str(rng.randint(0, n - start)), f"{x}.shape[{d}] - {start}"))
        return define(f"{x}.narrow({d}, {start}, {length})")
    if choice == 12 and rank >= 1:
        d = b.dim(x)
        n = max(t.shape[d], 1)
        return define(f"{x}.select({d}, {rng.randrange(-n, n)})")
    if rank >= 2:
        start, end = sorted((b.dim(x), b.dim(x)), key=lambda d: d % rank)
        return define(rng.choice((f"torch.flatten({x}, {start}, {end})", f"{x}.flatten({start})")))
    return None


def movement(b):
    x = b.pick()
    t = b.tensor(x)
    rng = b.rng
    rank = t.dim()
    d = b.dim(x)
    choice = rng.randrange(11)
    if choice in (0, 1):
        same_rank = (lambda o, m: o.dim() == m.dim()
                     and all(o.shape[k] == m.shape[k] for k in range(m.dim()) if k != d % max(m.dim(), 1)))
        other = b.pick_compatible(x, same_rank)
        others = ", ".join([x, other] + ([x] if b.chance(0.2) else []))
        if choice == 0:
            return define(f"torch.cat([{others}], {d})" if b.chance(0.7) else f"torch.cat(({others},), dim={d})")
        other = b.pick_compatible(x, lambda o, m: o.shape == m.shape)
        return define(f"torch.stack([{x}, {other}], {b.dim(x, extra=1)})")
    if choice == 2:
        dims = tuple(sorted({b.dim(x) for _ in range(rng.randint(1, 2))}))
        return define(rng.choice((f"{x}.flip({', '.join(map(str, dims))})", f"torch.flip({x}, {dims})")))
    if choice == 3:
        shift = rng.choice((1, 2, -1, 5))
        return define(rng.choice((f"{x}.roll({shift}, {d})", f"torch.roll({x}, {shift})")))
    if choice == 4:
        reps = [rng.choice((1, 1, 2, 3)) for _ in range(rank + rng.randint(0, 1))] or [2]
        return define(f"{x}.repeat({', '.join(map(str, reps))})")
    if choice == 5 and rank >= 1:
        index = rng.choice((f"torch.arange({x}.shape[{d}]).flip(0)", f"torch.arange(0, {x}.shape[{d}], 2)",
                            f"torch.arange({x}.shape[{d}]).roll(1)"))
        return define(f"{x}.index_select({d}, {index})" if b.chance(0.5)
                      else f"torch.index_select({x}, {d}, {index})")
    if choice == 6 and rank >= 1:
        ones = ["1"] * rank
        ones[d] = "-1"
        index = f"torch.arange({x}.shape[{d}]).flip(0).view({', '.join(ones)}).expand_as({x})"
        return define(f"torch.gather({x}, {d}, {index})")
    if choice == 7:
        return define(f"{x}.{rng.choice(('tril', 'triu'))}({rng.choice(('', '1', '-1'))})")
    if choice == 8:
        return define(f"{x}.contiguous()")
    if choice == 9:
        fmt = ", memory_format=torch.channels_last" if rank == 4 and b.chance(0.3) else ""
        return define(f"{x}.clone({fmt[2:]})")
    return define(f"{x}.detach().clone()" if b.chance(0.3) else f"torch.clone({x})")


def matmul(b):
    x = b.pick(lambda t: t.dim() >= 1 and t.dtype.is_floating_point) or b.pick()
    t = b.tensor(x)
    rng = b.rng
    inner = t.shape[-1] if t.dim() else None
    rhs = b.pick(lambda o: o.dtype == t.dtype and o.dim() >= 2 and o.shape[-2] == inner)
    if rhs is None or b.chance(0.2):
        rhs = f"{x}.mT" if t.dim() >= 2 else x
    choice = rng.randrange(5)
    if choice == 0 and t.dim() == 2:
        return define(f"torch.mm({x}, {rhs})")
    if choice == 1 and t.dim() == 3:
        return define(f"torch.bmm({x}, {rhs})")
    if choice == 2:
        weight = b.pick(lambda o: o.dtype == t.dtype and o.dim() == 2 and o.shape[-1] == inner)
        if weight:
            bias = b.pick(lambda o: o.dtype == t.dtype and o.dim() == 1 and o.shape[0] == b.tensor(weight).shape[0])
            return define(f"F.linear({x}, {weight}{', ' + bias if bias else ''})")
        return define(f"F.linear({x}, {x if t.dim() == 2 else rhs})")
    return define(rng.choice((f"{x} @ {rhs}", f"torch.matmul({x}, {rhs})")))


def cast(b):
    x = b.pick()
    rng = b.rng
    choice = rng.randrange(4)
    if choice == 0:
        dtype = rng.choice(("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "bool"))
        return define(f"{x}.to(torch.{dtype})")
    if choice == 1:
        return define(f"{x}.{rng.choice(('float', 'half', 'double', 'bfloat16', 'int', 'long', 'bool'))}()")
    other = b.pick()
    return define(f"{x}.type_as({other})" if choice == 2 else f"{x}.to({other}.dtype)")


INPLACE_UNARY = ("sigmoid_()", "relu_()", "neg_()", "abs_()", "zero_()", "exp_()", "tanh_()")


def in_place(b):
    rng = b.rng
    views = [n for n in b.names() if b.is_input_view(n)]
    roll = rng.random()
    if roll < 0.4 and views:
        target = rng.choice(views)
    elif roll < 0.6:
        target = rng.choice(b.input_names)
    else:
        target = b.pick()
    choice = rng.randrange(10)
    value = b.scalar(target) if b.chance(0.4) else b.pick_compatible(target, broadcastable)
    defines = b.chance(0.15)
    if choice == 0:
        return update(f"{target}.{rng.choice(('add_', 'sub_', 'mul_', 'div_'))}({value})", target, defines)
    if choice == 1:
        return update(f"{target}.{rng.choice(INPLACE_UNARY)}", target, defines)
    if choice == 2:
        low, high = sorted(rng.sample((-2, -1, 0, 1, 2), 2))
        return update(rng.choice((f"{target}.clamp_({low}, {high})", f"{target}.clamp_(min={low / 2})")),
                      target, defines)
    if choice == 3:
        source = b.pick_compatible(target, lambda o, m: broadcastable(o, m)
                                   and torch.broadcast_shapes(o.shape, m.shape) == m.shape)
        return update(f"{target}.copy_({source})", target, defines)
    if choice == 4:
        return update(f"{target}.fill_({b.scalar(target)})", target, defines)
    if choice == 5:
        return update(f"F.relu({target}, inplace=True)", target, defines)
    if choice in (6, 7):
        return update(f"{target} {rng.choice(('+=', '*=', '-='))} {value}", target)
    index = subscript(b, target)
    if b.chance(0.5):
        return update(f"{target}[{index}] = {b.scalar(target)}", target)
    try:
        region = eval(f"t[{index}]", {"t": b.tensor(target)})
    except Exception:  # noqa: BLE001 - an index eager rejects: let the draft fail
        region = b.tensor(target)
    source = b.pick(lambda o: broadcastable(o, region)
                    and torch.broadcast_shapes(o.shape, region.shape) == region.shape)
    return update(f"{target}[{index}] = {source or b.scalar(target)}", target)


FAMILIES = (pointwise_unary, pointwise_binary, where_clamp, reduction, norm, view, movement,
            matmul, cast, in_place)
FAMILY_WEIGHTS = (8, 10, 4, 6, 3, 9, 6, 3, 3, 6)
assert len(FAMILIES) == len(FAMILY_WEIGHTS)
