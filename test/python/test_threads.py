"""The frame hook and the cache under threads: concurrent compiled calls on
different shapes, recompiles and resets racing with running entries (whose
call_torch steps run Python and so let other threads in), each thread
getting eager's results."""
import sys
import threading

import torch

import dynafuse
from conftest import assert_close


def body(x, index):
    y = torch.sigmoid(x) * 2
    y[index] = -1.0  # a call_torch of Python code: threads switch here
    return torch.cumsum(y, 0) + x.sum()


def test_concurrent_calls_recompiles_and_resets():
    compiled = dynafuse.compile(body)
    shapes = [(5, 3), (7, 2), (4, 4), (6, 1)]
    errors = []
    stop = threading.Event()
    saved_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def worker(shape):
        try:
            for step in range(60):
                x = torch.randn(shape)
                index = torch.tensor([step % shape[0]])
                assert_close(compiled(x, index), body(x, index))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def resetter():
        while not stop.is_set():
            dynafuse.reset()
            stop.wait(0.002)

    threads = [threading.Thread(target=worker, args=(shape,)) for shape in shapes]
    reset_thread = threading.Thread(target=resetter)
    try:
        reset_thread.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        reset_thread.join()
        sys.setswitchinterval(saved_interval)
    assert not errors, errors


def test_the_hook_stays_off_in_other_threads():
    calls = []

    def eager_only(x):
        calls.append(threading.get_ident())  # not capturable: a graph break
        return x * 2

    def outer(x):
        thread = threading.Thread(target=lambda: eager_only(x))  # a graph break
        thread.start()
        thread.join()
        return x + 1

    def frames_seen(report):
        """Every frame of this test the hook tried: graphs compiled and graph
        breaks. (Frames of other files are left out: an audit hook an
        installed package registered, filelock's on 3.13, runs on the
        calling thread when a thread starts, and the hook rightly sees it.)"""
        seen = [graph["name"] for graph in report.graphs] + report.break_reasons
        return [entry for entry in seen if "test_the_hook_stays_off" in entry]

    x = torch.randn(3)
    report = dynafuse.explain(outer)(x)
    assert len(calls) == 1 and calls[0] != threading.get_ident()
    # The hook saw outer only: the thread's frames (its lambda, eager_only)
    # ran without it.
    seen = frames_seen(report)
    assert len(seen) == 1 and "<locals>.outer: " in seen[0], seen
    assert_close(dynafuse.compile(outer)(x), x + 1)
    # The same call made in the compiling thread is seen by the hook, and
    # named so that the check above would catch it.
    seen = frames_seen(dynafuse.explain(lambda t: eager_only(t) + 1)(x))
    assert any("<locals>.eager_only: " in reason for reason in seen), seen
