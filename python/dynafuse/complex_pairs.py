"""Complex tensors inside captured graphs, as pairs of real numbers.

Graphs have no complex dtype. A complex tensor made during capture
(torch.polar, torch.view_as_complex, torch.complex: rotary embeddings in
Meta's Llama code and in transformers' Llama 4) is traced as a ComplexPair:
a Python object holding the real tensor of its view_as_real layout, [..., 2],
whose methods and operators compute what eager's complex ops compute on
the real and imaginary parts (complex products as (ac - bd, ad + bc)).
torch.view_as_real hands the pair back as the real tensor it is.

The tracer inlines these methods as it inlines any Python code; the torch
functions reach them through dynafuse.polyfills. What is not defined here
(a complex matmul, exp, abs, a method missing below) stops the capture, and
eager runs the code. A ComplexPair never leaves a graph: returned, or live
at a graph break, it is refused (`__dynafuse_graph_only__`), and the frame
runs eagerly."""
import torch



def _pair_index(index):
    # An index of the complex tensor, on its pairs: every dim it names is a
    # leading dim, so a full slice over the trailing pair follows it.
    return (index if isinstance(index, tuple) else (index,)) + (slice(None),)


def _pair_dim(dim):
    # A dim of the complex tensor counted from the end sits one further
    # from the end of its pairs.
    return dim - 1 if dim < 0 else dim


class ComplexPair:
    """A complex tensor as its real pairs (`pair`, f32 or f64, [..., 2])."""

    __dynafuse_graph_only__ = "a complex tensor"

    def __init__(self, pair):
        self.pair = pair

    @property
    def real(self):
        return self.pair[..., 0]

    @property
    def imag(self):
        return self.pair[..., 1]

    @property
    def shape(self):
        return self.pair.shape[:-1]

    @property
    def ndim(self):
        return self.pair.dim() - 1

    @property
    def dtype(self):
        return torch.complex64 if self.pair.dtype == torch.float32 else torch.complex128

    @property
    def device(self):
        return self.pair.device

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.pair.dim() - 1

    def is_complex(self):
        return True

    def __getitem__(self, index):
        return ComplexPair(self.pair[_pair_index(index)])

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        return ComplexPair(self.pair.view(*shape, 2))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        return ComplexPair(self.pair.reshape(*shape, 2))

    def unsqueeze(self, dim):
        return ComplexPair(self.pair.unsqueeze(_pair_dim(dim)))

    def squeeze(self, dim):
        return ComplexPair(self.pair.squeeze(_pair_dim(dim)))

    def transpose(self, dim0, dim1):
        return ComplexPair(self.pair.transpose(_pair_dim(dim0), _pair_dim(dim1)))

    def expand(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        return ComplexPair(self.pair.expand(*shape, 2))

    def contiguous(self):
        return ComplexPair(self.pair.contiguous())

    def clone(self):
        return ComplexPair(self.pair.clone())

    def to(self, *args, **kwargs):
        # Tensor.to's device and complex dtype; a real dtype (eager drops the
        # imaginary part, with a warning) is left to eager.
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        copy = kwargs.pop("copy", False)
        if kwargs:
            raise NotImplementedError("ComplexPair.to with " + ", ".join(kwargs))
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
            elif isinstance(arg, (torch.device, str)):
                device = arg
            elif isinstance(arg, ComplexPair):
                device, dtype = arg.device, arg.dtype
            else:
                raise NotImplementedError("ComplexPair.to of a real tensor or another value")
        pair = self.pair if device is None else self.pair.to(device)
        if dtype == torch.complex64:
            pair = pair.to(torch.float32)
        elif dtype == torch.complex128:
            pair = pair.to(torch.float64)
        elif dtype is not None:
            raise NotImplementedError("a complex tensor cast to a real dtype")
        return ComplexPair(pair.clone() if copy else pair)

    def conj(self):
        return ComplexPair(torch.stack((self.real, -self.imag), -1))

    def _parts(self, other):
        # other's real and imaginary parts; None for what this does not take.
        if isinstance(other, ComplexPair):
            return other.real, other.imag
        if isinstance(other, torch.Tensor) or (
                isinstance(other, (int, float)) and not isinstance(other, bool)):
            return other, None
        return None

    def __mul__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        c, d = parts
        if d is None:  # a real factor scales both parts
            scale = other.unsqueeze(-1) if isinstance(other, torch.Tensor) else other
            return ComplexPair(self.pair * scale)
        a, b = self.real, self.imag
        return ComplexPair(torch.stack((a * c - b * d, a * d + b * c), -1))

    __rmul__ = __mul__

    def __add__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        c, d = parts
        real = self.real + c
        # A real addend leaves the imaginary part as it was, broadcast.
        imag = self.imag.expand(real.shape) if d is None else self.imag + d
        return ComplexPair(torch.stack((real, imag), -1))

    __radd__ = __add__

    def __neg__(self):
        return ComplexPair(-self.pair)

    def __sub__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        return -self + other


def _real_pair_dtype(tensor):
    if not isinstance(tensor, torch.Tensor) or tensor.dtype not in (torch.float32,
                                                                    torch.float64):
        raise NotImplementedError("a complex tensor of other than f32 or f64 parts")


def view_as_complex(input):
    """torch.view_as_complex: the pairs of input's last dim (of 2)."""
    _real_pair_dtype(input)
    if input.dim() == 0 or input.shape[-1] != 2:
        raise NotImplementedError("torch.view_as_complex of a last dim other than 2")
    return ComplexPair(input)


def view_as_real(input):
    """torch.view_as_real: the pairs themselves."""
    if not isinstance(input, ComplexPair):
        raise NotImplementedError("torch.view_as_real of a tensor made outside the graph")
    return input.pair


def polar(abs, angle):
    """torch.polar: abs * (cos(angle) + i sin(angle))."""
    _real_pair_dtype(abs)
    _real_pair_dtype(angle)
    return ComplexPair(torch.stack((abs * torch.cos(angle), abs * torch.sin(angle)), -1))


def complex(real, imag):
    """torch.complex: real + i imag."""
    _real_pair_dtype(real)
    _real_pair_dtype(imag)
    if real.dtype != imag.dtype:
        raise NotImplementedError("torch.complex of parts of two dtypes (eager raises)")
    shape = _broadcast_shape(real.shape, imag.shape)
    return ComplexPair(torch.stack((real.expand(shape), imag.expand(shape)), -1))


def _broadcast_shape(a, b):
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    return tuple(y if x == 1 else x for x, y in zip(a, b))


POLYFILLS = {torch.view_as_complex: view_as_complex, torch.view_as_real: view_as_real,
             torch.polar: polar, torch.complex: complex}
