"""The user API: decorator forms, modules, backends, dumps, IR utilities,
importability from anywhere."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import dynafuse
from conftest import assert_close, assert_compiled


def test_decorator_forms():
    @dynafuse.compile
    def a(x):
        return x + 1

    @dynafuse.compile()
    def b(x):
        return x + 2

    @dynafuse.compile(fullgraph=True, backend="llvm")
    def c(x):
        return x + 3

    x = torch.randn(3)
    for fn, k in ((a, 1), (b, 2), (c, 3)):
        assert_close(fn(x), x + k)
    assert_compiled(captures=3)
    assert a.__name__ == "a"


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        dynafuse.compile(lambda x: x, backend="tpu")
    with pytest.raises(TypeError):
        dynafuse.compile(42)


class Affine(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n))
        self.bias = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return F.gelu(x * self.weight + self.bias)


def test_module_with_parameters_reads_them_each_call():
    model = Affine(16).eval()
    compiled = dynafuse.compile(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=2e-6, atol=2e-6)
        model.weight.mul_(2)  # an update needs no recompile
        assert_close(compiled(x), model(x), rtol=2e-6, atol=2e-6)
    assert_compiled()
    assert dynafuse.stats()["cache_hits"] == 1


def test_dump_dir_holds_every_stage(tmp_path):
    dynafuse.config.dump_dir = str(tmp_path)
    f = dynafuse.compile(lambda x, y: torch.exp(x) + y)
    f(torch.randn(8), torch.randn(8))
    folders = list(tmp_path.iterdir())
    assert len(folders) == 1
    names = sorted(p.name for p in folders[0].iterdir())
    assert names == ["graph.graph", "kernels.ll", "kernels.loop", "kernels.s", "replay.sh"]
    loop = (folders[0] / "kernels.loop").read_text()
    assert loop.count("kernel @") == 1
    assert "exp" in (folders[0] / "graph.graph").read_text()
    assert "define" in (folders[0] / "kernels.ll").read_text()


def test_lower_graph_and_ir_errors():
    text = "graph @g(%x: f32[4]) {\n  %0 = exp %x : f32[4]\n  return %0\n}\n"
    assert "kernel @g_k0" in dynafuse._C.lower_graph(text)
    with pytest.raises(dynafuse.IRError, match=r"2:\d+: .*undefined value '%y'"):
        dynafuse._C.lower_graph(text.replace("exp %x", "exp %y"))


def test_import_from_any_directory(tmp_path):
    result = subprocess.run([sys.executable, "-c", "import dynafuse; print(dynafuse.__version__)"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "0.1.0", result.stderr


def test_threads_compile_and_run_independently():
    import threading
    f = dynafuse.compile(lambda x: x * x + 1)
    errors = []

    def work(n):
        try:
            for _ in range(20):
                x = torch.randn(n, 7)
                assert_close(f(x), x * x + 1)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Every call ran compiled code: both shapes compiled (once each, unless
    # the threads raced on a first call), the other calls hit the cache.
    stats = dynafuse.stats()
    assert stats["captures"] >= 2 and stats["captures"] + stats["cache_hits"] == 40, stats
    assert_compiled(captures=stats["captures"])


def test_step_trace_and_profile_logs(capfd):
    def f(x, y):
        return torch.softmax(x @ y, -1) * 2

    compiled = dynafuse.compile(f)
    x, y = torch.randn(4, 5), torch.randn(5, 6)
    compiled(x, y)
    capfd.readouterr()
    dynafuse.config.log = "steps,profile"
    assert_close(compiled(x, y), f(x, y))
    err = capfd.readouterr().err
    assert "[dynafuse:steps]" in err and "extern matmul" in err, err
    timed = [line for line in err.splitlines() if line.startswith("[dynafuse:profile]")]
    assert any(" ms  call @" in line for line in timed), err
    assert any(" ms  %" in line and "extern matmul" in line for line in timed), err
    dynafuse.config.log = ""
    compiled(x, y)
    assert "[dynafuse:" not in capfd.readouterr().err


def test_graph_names_do_not_depend_on_what_compiled_before(tmp_path):
    """A graph is named after its code and how many graphs that code object
    compiled before, so kernel names, and the disk cache's keys with them,
    are the same in a process that compiled other code first. Two code
    objects of one name (lambdas) dump into separate folders."""
    dynafuse.config.dump_dir = str(tmp_path)

    def first(x):
        return x.exp() + 1

    def second(x):
        return x.sin() * 2

    x = torch.randn(4, 5)
    dynafuse.compile(second)(x)
    dynafuse.compile(first)(x)
    dynafuse.compile(first)(torch.randn(3, 5))  # a recompile: a new shape
    prefix = "test_graph_names_do_not_depend_on_what_compiled_before__locals__"
    names = [graph["name"].replace(prefix, "") for graph in dynafuse.compiled_graphs()]
    assert names == ["second_0", "first_0", "first_1"], names
    dynafuse.compile(lambda x: x + 1)(x)
    dynafuse.compile(lambda x: x - 1)(x)
    folders = sorted(path.name.replace(prefix, "") for path in tmp_path.iterdir())
    assert folders == ["_lambda__0", "_lambda__0-2", "first_0", "first_1",
                       "second_0"], folders


def test_write_backs_follow_the_input_order(tmp_path):
    """A graph updating several inputs in place lists their write-back
    outputs in the graph's input order, whatever order the updates ran in
    (they followed the values' addresses, which changed between
    processes)."""
    dynafuse.config.dump_dir = str(tmp_path)

    def f(a, b, c, d):
        e = a + b + c + d  # the inputs in this order
        d.neg_()
        b.mul_(2)
        c.sub_(3)
        a.add_(1)
        return e.sum()

    args = [torch.randn(5) for _ in range(4)]
    expected = [t.clone() for t in args]
    f(*expected)
    dynafuse.compile(f)(*args)
    for got, want in zip(args, expected):
        assert torch.equal(got, want)
    (graph,) = [path for path in tmp_path.rglob("graph.graph")]
    text = graph.read_text()
    input_of = dict(re.findall(r"(%\w+) = \w+ %arg(\d+)", text))
    returned = re.search(r"return (.*)", text).group(1).split(", ")
    order = [int(input_of[name]) for name in returned[1:]]
    assert order == sorted(order) and len(order) == 4, text
