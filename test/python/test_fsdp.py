"""FSDP2 (`fully_shard`) with two processes on gloo (issue 43): each block
and the root sharded, parameters DTensors all-gathered by FSDP's hooks
before each block runs and resharded after. Per-block compiled forwards
(`block.forward = compile(block.forward)`) are one graph each with no break
(the blocks share one entry); compiling the whole sharded model runs FSDP's
hooks eagerly around the compiled pieces. After several SGD steps every
parameter equals eager FSDP's on every rank."""
import textwrap

import pytest

from two_process_runs import run_two_ranks

WORKER = textwrap.dedent("""
    import copy, faulthandler, json, os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    class Block(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.up = torch.nn.Linear(d, 2 * d)
            self.down = torch.nn.Linear(2 * d, d)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(12, 16)
            self.blocks = torch.nn.ModuleList(Block(16) for _ in range(3))
            self.out = torch.nn.Linear(16, 4)

        def forward(self, x):
            x = self.inp(x)
            for block in self.blocks:
                x = block(x)
            return self.out(x)


    def worker(rank, world, mode, port, out):
        faulthandler.enable()
        torch._C._set_print_stack_traces_on_fatal_signal(True)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.set_num_threads(1)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        import dynafuse
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        model = Net()
        reference = copy.deepcopy(model)
        for net in (model, reference):
            for block in net.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(net, mesh=mesh)
        if mode == "blocks":
            for block in model.blocks:
                block.forward = dynafuse.compile(block.forward)
            run = model
        else:
            run = dynafuse.compile(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        torch.manual_seed(rank + 1)
        for step in range(4):
            x = torch.randn(6, 12)
            target = torch.randn(6, 4)
            for net, opt in ((run, optimizer), (reference, reference_optimizer)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(x), target).backward()
                opt.step()
        difference = max((p.full_tensor() - q.full_tensor()).abs().max().item()
                         for p, q in zip(model.parameters(), reference.parameters()))
        stats = dynafuse.stats()
        with open(f"{out}.{rank}", "w") as handle:
            json.dump({"difference": difference, "captures": stats["captures"],
                       "breaks": stats["graph_breaks"],
                       "cache_hits": stats["cache_hits"],
                       "run_failures": stats["run_failures"],
                       "reasons": dynafuse._C.break_reasons()}, handle)
        dist.destroy_process_group()
        os._exit(0)  # no interpreter teardown with gloo threads (test_ddp.py)


    if __name__ == "__main__":
        mode, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        mp.spawn(worker, args=(2, mode, port, out), nprocs=2)
""")


@pytest.mark.parametrize("mode", ["blocks", "whole"])
def test_fully_sharded_blocks_match_eager_fsdp(tmp_path, mode):
    for report in run_two_ranks(tmp_path, WORKER, mode):
        assert report["difference"] < 1e-5, report
        assert report["captures"] >= 1 and report["run_failures"] == 0, report
        if mode == "blocks":
            # one entry for the three blocks, every later call a hit
            assert report["breaks"] == 0, report
            assert report["cache_hits"] >= 4 * 3 - report["captures"], report
