"""Complex tensors made inside a compiled function (torch.polar,
view_as_complex, torch.complex) are traced as their real pairs
(dynafuse.complex_pairs): rotary embeddings written with complex products,
as Meta's Llama code and transformers' Llama 4 write them, are one graph.
Each test compares with eager's complex arithmetic on random data and
checks the graph ran; complex values that would leave the graph, and
complex ops the pairs do not define, run eagerly and stay correct."""
import pytest
import torch

import dynafuse
from conftest import assert_close, assert_outputs_close


def one_graph():
    s = dynafuse.stats()
    return s["captures"] == 1 and s["graph_breaks"] == 0 and s["eager_frames"] == 0


def rotary_table(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def broadcast_like(table, x):
    shape = [d if i == 1 or i == x.ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return table.view(*shape)


def apply_rotary(xq, xk):
    table = rotary_table(xq.shape[-1], 64)[: xq.shape[1]]
    q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    table = broadcast_like(table, q)
    return (torch.view_as_real(q * table).flatten(3).type_as(xq),
            torch.view_as_real(table * k).flatten(3).type_as(xk))


@pytest.mark.parametrize("shape", [(2, 8, 4, 16), (1, 1, 2, 4), (3, 5, 1, 8)])
def test_rotary_embeddings_as_complex_products(shape):
    xq, xk = torch.randn(shape), torch.randn(shape)
    assert_outputs_close(dynafuse.compile(apply_rotary)(xq, xk), apply_rotary(xq, xk))
    assert one_graph()


def test_rotary_embeddings_of_non_contiguous_inputs_and_their_gradients():
    base = torch.randn(2, 4, 8, 16).transpose(1, 2)  # [2, 8, 4, 16], strided
    xq, xk = base.clone().requires_grad_(), (base * 2).detach().requires_grad_()
    eq, ek = xq.detach().clone().requires_grad_(), xk.detach().clone().requires_grad_()
    got = dynafuse.compile(apply_rotary)(xq.transpose(1, 2).transpose(1, 2), xk)
    want = apply_rotary(eq, ek)
    assert_outputs_close(got, want)
    (got[0].square().sum() + got[1].sum()).backward()
    (want[0].square().sum() + want[1].sum()).backward()
    assert_close(xq.grad, eq.grad)
    assert_close(xk.grad, ek.grad)


def complex_arithmetic(a, b, r):
    z = torch.complex(a, b)  # [4, 3]
    w = torch.polar(r.abs(), a[:1])  # [4, 3] from [4, 1] and [1, 3]
    mixed = (z * w - 2 * z + r - w.conj() * 0.5) * r
    shifted = 1.5 - (-mixed) + z.real.unsqueeze(-1)[..., 0]
    return (torch.view_as_real(shifted), shifted.imag, z.to(torch.complex128).shape,
            torch.view_as_real(z.to("cpu")[None, 1:, ::2].expand(2, 3, 2)))


def test_products_sums_and_views_of_complex_values():
    a, b, r = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 1)
    got, want = dynafuse.compile(complex_arithmetic)(a, b, r), complex_arithmetic(a, b, r)
    assert_outputs_close(got[:2] + got[3:], want[:2] + want[3:])
    assert got[2] == want[2]
    assert one_graph()


def returns_complex(x):
    return torch.view_as_complex(x * 2)


def complex_exp(x):
    return torch.view_as_real(torch.exp(torch.view_as_complex(x)))


@pytest.mark.parametrize("fn", [returns_complex, complex_exp])
def test_complex_values_leaving_the_graph_or_ops_not_defined_run_eagerly(fn):
    x = torch.randn(3, 2)
    got, want = dynafuse.compile(fn)(x), fn(x)
    assert got.dtype == want.dtype
    assert_close(torch.view_as_real(got) if got.is_complex() else got,
                 torch.view_as_real(want) if want.is_complex() else want)
    assert dynafuse.stats()["captures"] == 0
