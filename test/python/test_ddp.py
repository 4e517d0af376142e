"""DistributedDataParallel with two processes on gloo (issue 43):
compile(DDP(model)) runs DDP's forward eagerly and compiles the wrapped
module (one graph, no break), DDP(compile(model)) compiles it inside; after
several SGD steps every parameter equals eager DDP's on every rank, with
no_sync gradient accumulation and find_unused_parameters."""
import textwrap

import pytest

from two_process_runs import run_two_ranks

WORKER = textwrap.dedent("""
    import copy, faulthandler, json, os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Net(torch.nn.Module):
        def __init__(self, with_unused):
            super().__init__()
            self.first = torch.nn.Linear(12, 24)
            self.second = torch.nn.Linear(24, 4)
            if with_unused:  # a layer forward never reaches
                self.unused = torch.nn.Linear(24, 4)

        def forward(self, x):
            return self.second(torch.relu(self.first(x)))


    def worker(rank, world, mode, unused, port, out):
        # A crash prints every thread's Python and C++ stack into the
        # failure's stderr.
        faulthandler.enable()
        torch._C._set_print_stack_traces_on_fatal_signal(True)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.set_num_threads(1)
        import dynafuse
        torch.manual_seed(0)
        model = Net(unused)
        reference = copy.deepcopy(model)
        options = {"find_unused_parameters": unused}
        if mode == "outer":
            ddp = DDP(model, **options)
            run = dynafuse.compile(ddp)
        else:
            ddp = DDP(dynafuse.compile(model), **options)
            run = ddp
        eager = DDP(reference, **options)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        torch.manual_seed(rank + 1)
        for step in range(4):
            x = torch.randn(6, 12)
            target = torch.randn(6, 4)
            for net, wrapper, opt in ((run, ddp, optimizer), (eager, eager, reference_optimizer)):
                opt.zero_grad()
                if step == 1:  # accumulate locally, then synchronize
                    with wrapper.no_sync():
                        torch.nn.functional.mse_loss(net(x), target).backward()
                torch.nn.functional.mse_loss(net(x * 2), target).backward()
                opt.step()
        difference = max((p - q).abs().max().item()
                         for p, q in zip(model.parameters(), reference.parameters()))
        stats = dynafuse.stats()
        with open(f"{out}.{rank}", "w") as handle:
            json.dump({"difference": difference, "captures": stats["captures"],
                       "breaks": stats["graph_breaks"],
                       "reasons": dynafuse._C.break_reasons()}, handle)
        dist.destroy_process_group()
        # No interpreter teardown: a gloo worker thread that runs a Python
        # callback while the interpreter finalizes is ended by CPython
        # (pthread_exit), whose forced unwinding aborts in torch's C++
        # frames ("terminate called without an active exception", the
        # thread in ProcessGroupGloo::runLoop; 2 of ~100 runs, both with DDP
        # around the compiled module). The results are written by then.
        os._exit(0)


    if __name__ == "__main__":
        mode, unused, port, out = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
        mp.spawn(worker, args=(2, mode, unused, port, out), nprocs=2)
""")


@pytest.mark.parametrize("unused", [False, True], ids=["all_used", "find_unused"])
@pytest.mark.parametrize("mode", ["outer", "inner"])
def test_ddp_two_processes_match_eager_ddp(tmp_path, mode, unused):
    for report in run_two_ranks(tmp_path, WORKER, mode, "1" if unused else "0"):
        assert report["difference"] < 1e-5, report
        assert report["breaks"] == 0, report
        assert report["captures"] >= 1, report
