"""Dynamic shapes (issue 15): one graph for every size. Each test checks the
compiled results against eager on every size (primes, 0 and 1 among them)
and the capture counts that prove which graphs ran: a symbolic graph serves
new sizes without a capture or a compile."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close


def stats():
    return dynafuse.stats()


def run_sizes(compiled, fn, make, sizes, **tolerances):
    for size in sizes:
        args = make(size)
        assert_close(compiled(*args), fn(*args), **tolerances)


def attention(x, w):
    # A head split with -1, softmax, a causal mask from factories of the
    # symbolic length, a slice with symbolic bounds.
    B, T, C = x.shape
    h = (x * w).view(B, T, 4, -1).transpose(1, 2)
    scores = h @ h.transpose(-1, -2) / 4.0
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ h
    return y.transpose(1, 2).reshape(B, T, C)[:, : T - 1] + torch.arange(T - 1).view(1, -1, 1)


def test_automatic_dynamic_compiles_twice_for_every_sequence_length():
    f = dynafuse.compile(attention)
    w = torch.randn(32)
    lengths = [5, 7, 17, 31, 64, 13, 2, 97]
    run_sizes(f, attention, lambda t: (torch.randn(2, t, 32), w), lengths,
              rtol=1e-4, atol=1e-4)
    s = stats()
    # The first length compiles statically, the second symbolically; the
    # other six reuse that graph.
    assert s["captures"] == 2 and s["backend_compiles"] == 2, s
    assert s["symbolic_captures"] == 1 and s["cache_hits"] == len(lengths) - 2, s
    assert s["graph_breaks"] == 0 and s["eager_frames"] == 0, s
    # Again: nothing new.
    run_sizes(f, attention, lambda t: (torch.randn(2, t, 32), w), lengths,
              rtol=1e-4, atol=1e-4)
    assert stats()["captures"] == 2


def test_sizes_zero_and_one_are_specialized():
    f = dynafuse.compile(lambda x: torch.softmax(x * 2, dim=-1).sum(0))
    fn = lambda x: torch.softmax(x * 2, dim=-1).sum(0)  # noqa: E731
    run_sizes(f, fn, lambda n: (torch.randn(n, 8),), [3, 5, 11])
    assert stats()["captures"] == 2
    # 1 and 0 rows: each its own static graph (broadcasting and empty loops
    # depend on them); the symbolic one is not used for them.
    run_sizes(f, fn, lambda n: (torch.randn(n, 8),), [1, 0])
    assert stats()["captures"] == 4
    run_sizes(f, fn, lambda n: (torch.randn(n, 8),), [1, 0, 7])
    assert stats()["captures"] == 4 and stats()["symbolic_captures"] == 1


def test_dynamic_true_is_symbolic_from_the_start_and_false_never():
    fn = lambda x: F.gelu(x) * x.size(0)  # noqa: E731
    dynamic = dynafuse.compile(fn, dynamic=True)
    run_sizes(dynamic, fn, lambda n: (torch.randn(n, 3),), [4, 9, 23, 2])
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1
    dynafuse.reset()
    static = dynafuse.compile(fn, dynamic=False)
    run_sizes(static, fn, lambda n: (torch.randn(n, 3),), [4, 9, 23, 2])
    assert stats()["captures"] == 4 and stats()["symbolic_captures"] == 0


def test_config_switch_turns_automatic_dynamic_off():
    dynafuse.config.automatic_dynamic_shapes = False
    f = dynafuse.compile(lambda x: x.exp() + 1)
    run_sizes(f, lambda x: x.exp() + 1, lambda n: (torch.randn(n),), [3, 4, 5])
    assert stats()["captures"] == 3 and stats()["symbolic_captures"] == 0


def test_mark_dynamic_and_mark_static():
    fn = lambda x: (x - x.mean(-1, keepdim=True)) * 2  # noqa: E731
    f = dynafuse.compile(fn)
    x = torch.randn(6, 10)
    dynafuse.mark_dynamic(x, 0)
    assert_close(f(x), fn(x))
    assert stats()["symbolic_captures"] == 1
    y = torch.randn(13, 10)
    assert_close(f(y), fn(y))  # no mark needed: the graph is symbolic
    assert stats()["captures"] == 1
    z = torch.randn(13, 11)
    assert_close(f(z), fn(z))  # dim 1 was static: a new graph
    assert stats()["captures"] == 2
    dynafuse.reset()
    g = dynafuse.compile(fn, dynamic=True)
    a = torch.randn(6, 10)
    dynafuse.mark_static(a, 1)
    assert_close(g(a), fn(a))
    b = torch.randn(6, 12)
    dynafuse.mark_static(b, 1)
    assert_close(g(b), fn(b))
    assert stats()["captures"] == 2  # dim 1 static: recompiled


def branchy(x):
    if x.size(1) > 8:
        return x * 2
    return x + 1


def test_branches_on_sizes_are_guarded(capfd):
    dynafuse.config.log = "guards"
    f = dynafuse.compile(branchy, dynamic=True)
    run_sizes(f, branchy, lambda n: (torch.randn(3, n),), [12, 9, 40])
    assert stats()["captures"] == 1
    err = capfd.readouterr().err
    assert "s1 > 8" in err and "s0 >= 2" in err, err
    # The other branch: the guard fails, a second graph is compiled.
    run_sizes(f, branchy, lambda n: (torch.randn(3, n),), [3, 8, 5, 12])
    assert stats()["captures"] == 2
    assert "s1 <= 8" in capfd.readouterr().err


def test_broadcast_unifies_symbols_with_a_guard(capfd):
    dynafuse.config.log = "guards,recompiles"
    fn = lambda x, y: x + y  # noqa: E731
    f = dynafuse.compile(fn, dynamic=True)
    run_sizes(f, fn, lambda n: (torch.randn(n, 4), torch.randn(n, 4)), [5, 7, 19])
    assert stats()["captures"] == 1
    assert "s2 == s0" in capfd.readouterr().err
    # Size 1 against a symbol broadcasts: a new graph with the 1 specialized.
    x, y = torch.randn(6, 4), torch.randn(1, 4)
    assert_close(f(x, y), fn(x, y))
    assert stats()["captures"] == 2


def test_symbolic_dim_broadcasts_against_size_one_dims():
    fn = lambda x, y, z: x * y + z  # noqa: E731
    f = dynafuse.compile(fn, dynamic=True)
    for rows, cols in [(3, 5), (7, 2), (11, 13)]:
        x, y, z = torch.randn(rows, 1), torch.randn(1, cols), torch.randn(cols)
        assert_close(f(x, y, z), fn(x, y, z))
    assert stats()["captures"] == 1


def slicing(x):
    t = x.size(1)
    head, tail, middle = x[:, :3], x[:, -2:], x[:, 1 : t - 1]
    clamped = x[:, : t + 5]  # past the end: clamps as Python does
    return head.sum(1) + tail.sum(1) + middle.mean(1) + clamped.amax(1) + x.numel()


def test_slices_with_symbolic_bounds():
    f = dynafuse.compile(slicing, dynamic=True)
    run_sizes(f, slicing, lambda n: (torch.randn(2, n, 3),), [5, 6, 11, 29])
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1
    # Shorter than the constant bound 3: the guard t >= 3 fails.
    run_sizes(f, slicing, lambda n: (torch.randn(2, n, 3),), [2])
    assert stats()["captures"] == 2


def test_outputs_follow_a_symbolic_strided_layout():
    # The output of a pointwise op on a transposed input keeps its layout:
    # the buffer is allocated with strides [1, s0] evaluated per call.
    fn = lambda x: torch.sigmoid(x) * 2  # noqa: E731
    f = dynafuse.compile(fn, dynamic=True)
    for n in [3, 10, 29]:
        x = torch.randn(7, n).t()
        out = f(x)
        assert_close(out, fn(x))
        assert out.stride() == fn(x).stride()
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1


def test_noncontiguous_inputs_keep_symbolic_strides():
    fn = lambda x: torch.relu(x).sum(-1)  # noqa: E731
    f = dynafuse.compile(fn, dynamic=True)
    for n in [4, 9, 17]:
        x = torch.randn(8, n).t()  # [n, 8], strides (1, n)
        assert_close(f(x), fn(x))
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1
    # Not a dense layout (a strided slice): static sizes, still correct.
    dynafuse.reset()
    for n in [4, 9]:
        x = torch.randn(2 * n, 8)[::2]
        assert_close(f(x), fn(x))
    assert stats()["symbolic_captures"] == 0


def sizes_out(x):
    b, t = x.shape
    return x.cumsum(1) if False else x * 2, t, t * b - 1, x.shape


def test_sizes_returned_are_this_calls():
    f = dynafuse.compile(lambda x: (x * 2, x.size(1), x.size(0) * x.size(1) - 1, x.shape),
                         dynamic=True)
    for b, t in [(2, 3), (5, 7), (3, 11)]:
        x = torch.randn(b, t)
        out, t_out, n_out, shape = f(x)
        assert_close(out, x * 2)
        assert (t_out, n_out, tuple(shape)) == (t, b * t - 1, (b, t))
    assert stats()["captures"] == 1


def test_mlp_over_batch_sizes():
    mlp = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 64),
                              torch.nn.GELU(), torch.nn.Linear(64, 16)).eval()
    f = dynafuse.compile(mlp)
    with torch.no_grad():
        run_sizes(f, mlp, lambda b: (torch.randn(b, 16),), [4, 8, 3, 31, 128, 0, 1],
                  rtol=1e-4, atol=1e-4)
    # 4 (static), 8 (symbolic, then 3, 31, 128), 0, 1 (specialized).
    assert stats()["captures"] == 4 and stats()["symbolic_captures"] == 1


def test_a_break_with_a_live_size_is_redone_statically(capfd):
    dynafuse.config.log = "recompiles"

    def fn(x):
        t = x.size(0)
        y = x * 2
        print("length", t)  # a graph break with the symbolic t live
        return y + t

    f = dynafuse.compile(fn, dynamic=True)
    for n in [3, 4]:
        x = torch.randn(n)
        assert_close(f(x), fn(x))
    out = capfd.readouterr()
    assert "captured with static sizes from now on" in out.err, out.err
    assert "length 3" in out.out and "length 4" in out.out


WARM_SCRIPT = textwrap.dedent("""
    import torch, dynafuse
    def f(x):
        return torch.softmax(x * 3, dim=-1) + x.mean()
    g = dynafuse.compile(f)
    for n in [3, 5, 7, 11, 2, 40]:
        x = torch.randn(n, 6)
        torch.testing.assert_close(g(x), f(x))
    s = dynafuse.stats()
    print(s["captures"], s["backend_compiles"], s["disk_cache_hits"])
""")


def test_a_warm_process_compiles_nothing_for_any_size(tmp_path):
    env = dict(os.environ, DYNAFUSE_CACHE_DIR=str(tmp_path), DYNAFUSE_DISK_CACHE="1")
    env.pop("DYNAFUSE_DUMP_DIR", None)
    runs = [subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, text=True,
                           capture_output=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    cold = [int(v) for v in runs[0].stdout.split()]
    warm = [int(v) for v in runs[1].stdout.split()]
    assert cold == [2, 2, 0], cold
    assert warm == [2, 2, 2], warm  # both modules came from the disk cache


def test_int_min_and_max_of_sizes():
    def fn(x):
        t = int(x.size(1))
        window = min(t, 6)
        return x[:, :window] * max(t, 3)

    f = dynafuse.compile(fn, dynamic=True)
    run_sizes(f, fn, lambda n: (torch.randn(2, n),), [8, 11, 37])
    assert stats()["captures"] == 1
    run_sizes(f, fn, lambda n: (torch.randn(2, n),), [4, 5])  # min picks t
    assert stats()["captures"] == 2


def test_torch_calls_outside_the_op_table_take_symbolic_sizes():
    # scaled_dot_product_attention runs as a call_torch extern; its result
    # sizes are found on meta tensors at two sets of sizes.
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    f = dynafuse.compile(fn, dynamic=True)
    for t in [5, 12, 33]:
        q, k, v = (torch.randn(2, 3, t, 8) for _ in range(3))
        assert_close(f(q, k, v), fn(q, k, v), rtol=1e-5, atol=1e-5)
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1


def test_torch_call_operands_of_one_symbol_expression_share_the_symbol():
    # Two layers' caches grown by one token: the mask's width comes from
    # layer 0's length (s0 + 1), the keys from layer 1's (s1 + 1). sdpa needs
    # them equal; the meta run at moved sizes moves s0 and s1 apart unless
    # the two are one symbol, as they are at the hints.
    def fn(x, k0, k1, v1):
        length = k0.size(2) + 1
        keys = torch.cat([k1, x], dim=2)
        values = torch.cat([v1, x], dim=2)
        mask = torch.ones(1, 1, 1, length, dtype=torch.bool)
        return F.scaled_dot_product_attention(x, keys, values, attn_mask=mask) + 1

    f = dynafuse.compile(fn, dynamic=True)
    for t in [3, 7, 20]:
        x = torch.randn(2, 3, 1, 8)
        k0, k1, v1 = (torch.randn(2, 3, t, 8) for _ in range(3))
        assert_close(f(x, k0, k1, v1), fn(x, k0, k1, v1), rtol=1e-5, atol=1e-5)
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1
    assert stats()["graph_breaks"] == 0


def test_a_torch_calls_result_keeps_its_type_when_its_symbol_is_unified():
    # sdpa's result length is q's symbol; adding x (another symbol of the
    # same size, first operand) unifies them after the call recorded its
    # result type: the type is declared anew, and the capture stays symbolic.
    def fn(x, q, k, v):
        return x + F.scaled_dot_product_attention(q, k, v)

    f = dynafuse.compile(fn, dynamic=True)
    for t in [5, 9, 17]:
        x = torch.randn(2, 3, t, 8)
        q, k, v = (torch.randn(2, 3, t, 8) for _ in range(3))
        assert_close(f(x, q, k, v), fn(x, q, k, v), rtol=1e-5, atol=1e-5)
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1


def test_float_arithmetic_on_a_size_specializes_that_size(capfd):
    dynafuse.config.log = "recompiles"

    def fn(x, y):
        # x's dim is needed as a float (its value, guarded); y's stays a
        # symbol.
        return (x * (1.0 / x.size(0)) + y[:3].sum()) * 2

    f = dynafuse.compile(fn, dynamic=True)
    run_sizes(f, fn, lambda n: (torch.randn(n), torch.randn(n + 1)), [3, 7])
    assert stats()["captures"] == 2, stats()
    assert "guard failed: s0 == 3" in capfd.readouterr().err
    dynafuse.reset()
    f = dynafuse.compile(fn, dynamic=True)
    x = torch.randn(3)
    run_sizes(f, fn, lambda n: (x, torch.randn(n)), [4, 5, 9])
    assert stats()["captures"] == 1, stats()


def test_norms_over_a_symbolic_last_dim():
    # normalized_shape from x.shape: a symbolic count; weight and bias are
    # unified with the input's last dim.
    def fn(x, w, b):
        y = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
        return y + x.var(-1, keepdim=True) + x.std(0)

    f = dynafuse.compile(fn, dynamic=True)
    for rows, cols in [(4, 8), (6, 16), (5, 33), (7, 2)]:
        x, w, b = torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)
        assert_close(f(x, w, b), fn(x, w, b), rtol=1e-5, atol=1e-5)
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1


@pytest.mark.parametrize("fn", [
    lambda x, y: x.expand_as(y) * y,
    lambda x, y: x.expand(y.shape) + y,
    lambda x, y: x.expand(y.size(0), -1) - y.sum(-1, keepdim=True),
], ids=["expand_as", "expand_to_shape", "expand_minus_one"])
def test_expand_to_another_inputs_size_stays_symbolic(fn):
    """x [n, 1] expanded to y [n, 4]: the two inputs' n are two symbols
    of one hint, unified with a guard as broadcasting does, so one graph
    serves every n; a mismatch raises as in eager."""
    f = dynafuse.compile(fn, dynamic=True)
    run_sizes(f, fn, lambda n: (torch.randn(n, 1), torch.randn(n, 4)), [3, 5, 11, 2])
    assert stats()["captures"] == 1 and stats()["symbolic_captures"] == 1
    with pytest.raises(RuntimeError):
        fn(torch.randn(3, 1), torch.randn(5, 4))
    with pytest.raises(RuntimeError):
        f(torch.randn(3, 1), torch.randn(5, 4))


def offset_by_type(x, cache_len):
    # transformers' masking_utils: q_offset may be a tensor (a static cache)
    # or an int (a size); under dynamic shapes it is a symbolic size
    q_offset = x.shape[0] + cache_len.shape[0]
    q_offset = q_offset.to(x.device) if isinstance(q_offset, torch.Tensor) else q_offset
    kinds = (isinstance(q_offset, int), isinstance(q_offset, (float, torch.SymInt)), type(q_offset) is int)
    return torch.arange(q_offset) + x.sum(), kinds


def test_symbolic_sizes_are_ints_to_isinstance_and_type():
    compiled = dynafuse.compile(offset_by_type, dynamic=True, fullgraph=True)
    for n in (3, 5, 8):
        x, cache = torch.randn(n), torch.randn(n + 1)
        actual, expected = compiled(x, cache), offset_by_type(x, cache)
        assert actual[1] == expected[1] == (True, False, True)
        torch.testing.assert_close(actual[0], expected[0])
    assert dynafuse.stats()["captures"] == 1
