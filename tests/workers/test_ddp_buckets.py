"""Data-parallel gradient averaging goes in buckets of bounded size: each all-reduce (and the flat copy
it needs) stays under the cap, where one flat copy of every gradient would double gradient memory, and
the averaged gradients are exactly those of one all-reduce of everything."""

import os

import torch
import torch.multiprocessing as mp

from .test_data_parallel import free_port

CAP = 1024  # bytes: 256 float32 values
SHAPES = [(300,), (10, 10), (7,), (50, 4), (3,), (2, 2)]  # one gradient over the cap, the others in several buckets


def grads_of(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    grads = [torch.randn(shape, generator=g) for shape in SHAPES]
    grads[-1] = grads[-1].double()  # a second dtype: never in one bucket with float32
    return grads


def rank_main(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from rlgraph.workers import optim

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sizes = []
        all_reduce = dist.all_reduce
        dist.all_reduce = lambda t, *a, **k: sizes.append(t.numel() * t.element_size()) or all_reduce(t, *a, **k)
        results = {}
        for name, cap in (("given", CAP), ("default", None)):
            params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads_of(rank)]
            for p, g in zip(params, grads_of(rank)):
                p.grad = g
            if cap is None:
                optim.GRADIENT_BUCKET_BYTES = 2 * CAP  # what a call without a cap uses
            sizes.clear()
            optim.average_gradients(params, bucket_bytes=cap)
            results[name] = {"grads": [p.grad for p in params], "sizes": list(sizes)}
        dist.all_reduce = all_reduce
        torch.save(results, os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_gradients_average_in_buckets_under_the_cap(tmp_path):
    mp.start_processes(rank_main, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    expected = [(a + b) / 2 for a, b in zip(grads_of(0), grads_of(1))]
    total = sum(g.numel() * g.element_size() for g in expected)
    for rank in range(2):
        results = torch.load(tmp_path / f"{rank}.pt", weights_only=True)
        for name, cap in (("given", CAP), ("default", 2 * CAP)):
            out = results[name]
            assert len(out["sizes"]) > 2 and max(out["sizes"]) <= cap < total, (rank, name, out["sizes"])
            assert sum(out["sizes"]) == total  # every gradient reduced once
            for got, want in zip(out["grads"], expected):
                assert got.dtype == want.dtype and torch.equal(got, want)
