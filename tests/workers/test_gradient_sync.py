"""Data-parallel gradient averaging overlapped with the backward pass (rlgraph/workers/gradient_sync.py): buckets
start their all-reduce during a mini-batch's last backward, and the update is bit-identical to averaging every
gradient after it, on both ranks, even where one rank's last micro-batch never reaches a parameter."""

import os

import torch
import torch.multiprocessing as mp

from .test_data_parallel import free_port

BATCH, MICRO, MINI = 8, 2, 4  # two mini-batches (optimizer steps) of two micro-batches each


def build(rank: int) -> tuple[torch.nn.Module, torch.nn.Parameter, torch.Tensor]:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4))
    gate = torch.nn.Parameter(torch.ones(4))  # reached by rank 1 only in the first micro-batch of each mini-batch
    inputs = torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(100 + rank))  # each rank its own rows
    return model, gate, inputs


def train(rank: int, overlap: bool) -> tuple[list[torch.Tensor], int, int]:
    """The parameters after one training step of two mini-batches; the fewest buckets started before a backward
    pass ended; how many buckets there are."""
    from rlgraph.workers import optim as optim_module

    optim_module.GRADIENT_BUCKET_BYTES = 1024  # several buckets for this model
    model, gate, inputs = build(rank)
    params = [gate, *model.parameters()]  # the gate first: its bucket is the last to start
    optim = optim_module.Optimization(params, lr=1e-2, betas=(0.9, 0.999), weight_decay=0.0, grad_clip=1.0,
                                      warmup_steps=0)
    average = optim.average
    if not overlap:  # every bucket starts after the last backward: the averaging as it was
        average.arm = lambda: None
    started_in_backward = []
    finish = average.finish
    average.finish = lambda: (finish(), started_in_backward.append(average.launched_during_backward))

    def loss_fn(rows):
        out = model(inputs[rows])
        last_micro = rows[0] % MINI == MINI - MICRO
        if not (rank == 1 and last_micro):
            out = out * gate
        return out.pow(2).mean(), {}

    optim.run_epochs(BATCH, loss_fn, epochs=1, mini_batch_size=MINI, micro_batch_size=MICRO, generator=None)
    average.remove()
    return [p.detach().clone() for p in params], min(started_in_backward), len(average.buckets)


def rank_main(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        overlapped, during, buckets = train(rank, overlap=True)
        after, during_plain, _ = train(rank, overlap=False)
        torch.save({"overlapped": overlapped, "after": after, "during": during, "during_plain": during_plain,
                    "buckets": buckets},
                   os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_buckets_start_during_the_last_backward_and_the_update_is_the_same(tmp_path):
    mp.start_processes(rank_main, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    results = [torch.load(tmp_path / f"{rank}.pt", weights_only=True) for rank in range(2)]
    model, gate, _ = build(0)
    initial = [p.detach() for p in [gate, *model.parameters()]]
    for rank, result in enumerate(results):
        # every bucket but the gate's started before the backward pass ended, on the rank whose last micro-batch
        # never reaches the gate too (it holds back its own bucket only: the last to start)
        assert result["buckets"] > 2 and result["during"] >= result["buckets"] - 1, (rank, result["during"])
        assert result["during_plain"] == 0
        for overlapped, after in zip(result["overlapped"], result["after"]):
            assert torch.equal(overlapped, after)
    for zero, one, start in zip(results[0]["overlapped"], results[1]["overlapped"], initial):
        assert torch.equal(zero, one)  # the replicas stay identical
        assert not torch.equal(zero, start)  # and every parameter learned
