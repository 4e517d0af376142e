"""Random input tensors for fuzzed programs.

An input is an `InputSpec`: its dtype, its layout (contiguous, transposed,
strided, expanded, channels-last), whether its floats hold special values
(NaN, inf, -inf, -0.0), and its shape as references into the program's
size vector, so that inputs keep their broadcast and matmul relations when
the third call resizes them (`Sizes`). Tensors are built by `fuzz_tensor`, a
plain function of (shape, dtype, layout, seed, ...) that shrink.py pastes
verbatim into standalone repros, so a repro builds bit-identical inputs.
"""
import dataclasses
import random
import zlib

import torch

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64", "uint8")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
# Weights of DTYPES when drawing an input: mostly float32, like real programs.
DTYPE_WEIGHTS = (10, 2, 2, 2, 1.5, 1.5, 0.7, 1)
LAYOUTS = ("contiguous", "transposed", "strided", "expanded", "channels_last")

#: Length of the size vector the inputs' dims refer to.
SIZE_SLOTS = 4


def fuzz_tensor(shape, dtype, layout="contiguous", seed=0, specials=False,
                requires_grad=False):
    """A deterministic random tensor of `shape` and `dtype` (a name such as
    "float32") laid out as `layout`: "contiguous", "transposed" (last two
    dims swapped in memory), "strided" (every other element of a wider last
    dim), "expanded" (one dim has stride 0) or "channels_last" (4-d).
    Floats are normal draws, with NaN, inf, -inf and -0.0 scattered in when
    `specials`; integers are small; a leaf requiring grad when asked."""
    generator = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype)
    shape = list(shape)
    rank = len(shape)
    storage = list(shape)
    expand_dim = seed % rank if rank else 0
    if layout == "transposed" and rank >= 2:
        storage[-2], storage[-1] = shape[-1], shape[-2]
    elif layout == "strided" and rank >= 1:
        storage[-1] = 2 * shape[-1] + 1
    elif layout == "expanded" and rank >= 1:
        storage[expand_dim] = 1
    if dtype.is_floating_point:
        values = torch.randn(storage, generator=generator, dtype=torch.float64)
        count = values.numel()
        if specials and count:
            picks = torch.randint(count, (max(1, count // 6),), generator=generator)
            kinds = torch.randint(4, picks.shape, generator=generator)
            table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0],
                                 dtype=torch.float64)
            values.view(-1)[picks] = table[kinds]
        values = values.to(dtype)
    elif dtype == torch.bool:
        values = torch.randint(2, storage, generator=generator).bool()
    elif dtype == torch.uint8:
        values = torch.randint(0, 16, storage, generator=generator).to(dtype)
    else:
        values = torch.randint(-8, 9, storage, generator=generator).to(dtype)
    if layout == "transposed" and rank >= 2:
        values = values.transpose(-1, -2)
    elif layout == "strided" and rank >= 1:
        values = values[..., 1::2]
    elif layout == "expanded" and rank >= 1:
        values = values.expand(shape)
    elif layout == "channels_last" and rank == 4:
        values = values.contiguous(memory_format=torch.channels_last)
    if requires_grad and dtype.is_floating_point:
        values = values.detach().requires_grad_()
    return values


@dataclasses.dataclass
class InputSpec:
    """One argument of a fuzzed program. `dims` holds, per dim, an index
    into the size vector or None for a literal 1 (a broadcast dim)."""
    name: str
    dtype: str
    dims: tuple
    layout: str = "contiguous"
    specials: bool = False
    requires_grad: bool = False

    def shape(self, sizes):
        return tuple(1 if ref is None else sizes[ref] for ref in self.dims)


@dataclasses.dataclass
class Sizes:
    """The size vectors of a program's calls: the first two calls use
    `first`, the third `third` (same ranks, other sizes)."""
    first: tuple
    third: tuple

    def of_call(self, call):
        return self.first if call < 2 else self.third


def draw_size(rng, resized=False):
    """A dim size: mostly 2..7, sometimes 1, rarely 0 (more often when a
    call resizes)."""
    roll = rng.random()
    if roll < (0.08 if resized else 0.03):
        return 0
    if roll < 0.2:
        return 1
    return rng.randint(2, 7)


def draw_sizes(rng):
    first = tuple(draw_size(rng) for _ in range(SIZE_SLOTS))
    third = tuple(draw_size(rng, resized=True) for _ in range(SIZE_SLOTS))
    return Sizes(first, third)


def draw_input(rng, name, mode):
    """An InputSpec: rank 0..4 over the size vector's trailing slots (in
    order, as broadcasting aligns them), sometimes shuffled or with a
    broadcast 1, in a random dtype and layout."""
    rank = rng.choices((0, 1, 2, 3, 4), (1, 3, 5, 4, 3))[0]
    if rng.random() < 0.75:
        dims = list(range(SIZE_SLOTS - rank, SIZE_SLOTS))
    else:
        dims = [rng.randrange(SIZE_SLOTS) for _ in range(rank)]
    if rank and rng.random() < 0.2:
        dims[rng.randrange(rank)] = None
    if mode == "training":
        dtype = rng.choices(FLOAT_DTYPES, (10, 3, 1, 1))[0]
    else:
        dtype = rng.choices(DTYPES, DTYPE_WEIGHTS)[0]
    layout = "contiguous"
    if rng.random() < 0.45:
        choices = [lay for lay in LAYOUTS if lay != "channels_last" or rank == 4]
        layout = rng.choice(choices[1:])
    specials = dtype in FLOAT_DTYPES and rng.random() < 0.15
    return InputSpec(name, dtype, tuple(dims), layout, specials,
                     requires_grad=mode == "training")


def value_seed(program_seed, name, call):
    """The seed of one input's values at one call, stable across processes
    (by the input's name, so dropping another input keeps these values)."""
    return zlib.crc32(f"{program_seed}:{name}:{call}".encode())


def build_inputs(specs, sizes, program_seed, call):
    """The tensors of one call: fuzz_tensor for each spec at this call's
    sizes. Calling it twice gives two identical, independent sets."""
    shape_vector = sizes.of_call(call)
    return [fuzz_tensor(spec.shape(shape_vector), spec.dtype, spec.layout,
                        value_seed(program_seed, spec.name, call), spec.specials,
                        spec.requires_grad)
            for spec in specs]


def render_build(specs, sizes, program_seed, call):
    """Python source of build_inputs(...) for one call, using only
    fuzz_tensor: the repro's inputs."""
    shape_vector = sizes.of_call(call)
    items = []
    for spec in specs:
        items.append(f"fuzz_tensor({spec.shape(shape_vector)!r}, {spec.dtype!r}, "
                     f"{spec.layout!r}, {value_seed(program_seed, spec.name, call)}, "
                     f"{spec.specials}, {spec.requires_grad})")
    return "[" + ", ".join(items) + "]"


def upcast(tensors):
    """Floating tensors as float64 leaves with the same strides and offset
    (an expanded input stays expanded, so the same in-place ops raise),
    keeping requires_grad: the inputs of the high-precision reference."""
    result = []
    for tensor in tensors:
        if tensor.dtype.is_floating_point:
            storage = tensor.untyped_storage()
            count = storage.nbytes() // tensor.element_size()
            flat = torch.tensor([], dtype=tensor.dtype).set_(storage, 0, (count,), (1,))
            high = flat.to(torch.float64).as_strided(
                tensor.shape, tensor.stride(), tensor.storage_offset()).detach()
            tensor = high.requires_grad_() if tensor.requires_grad else high
        result.append(tensor)
    return result


def perturb(tensors, sign, seed, eps=0.0):
    """Floating tensors with each element moved by about two ulps (of their
    dtype, or `eps` when coarser), up (sign=1) or down (-1) by a fixed
    random pattern, as contiguous leaves: how much eager's result moves
    under this says how much rounding noise the program amplifies."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for tensor in tensors:
        if tensor.dtype.is_floating_point:
            eps = max(eps, torch.finfo(tensor.dtype).eps)
            pattern = torch.rand(tensor.shape, generator=generator, dtype=torch.float64) + 0.5
            moved = (tensor.detach().double() * (1 + sign * 2 * eps * pattern)).to(tensor.dtype)
            tensor = moved.requires_grad_() if tensor.requires_grad else moved
        result.append(tensor)
    return result


def rng_for(seed, index, salt=""):
    """The random stream of program `index` of campaign `seed`."""
    return random.Random(f"dynafuse-fuzz:{seed}:{index}:{salt}")
