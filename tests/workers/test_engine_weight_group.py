"""A weight sync straight into a rollout engine's own processes (SGLang's schedulers): rank 0 builds its side of the
group the way the engine builds its own (workers/weight_sync.py open_engine_group), and sends only the buckets;
the engine's ranks, told the layout beforehand, receive each bucket as one flat tensor and end with the trainer's
weights cast to the rollout's dtype. Over gloo, in processes of their own (a group registers process-wide)."""

import os
import time

import torch
import torch.multiprocessing as mp

GROUP = "actor->rollout"
CAP = 256  # bytes: several buckets of this model in bf16


def module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 8))


def sender(world: int, out_dir: str, as_bytes: bool) -> None:
    from rlgraph.workers import weight_sync as ws

    store = ws.open_store("127.0.0.1", world, 30)
    with open(os.path.join(out_dir, "layout.json"), "wb") as f:
        f.write(ws.encoded_layout(module(), CAP, "bfloat16"))
    with open(os.path.join(out_dir, "port.tmp"), "w") as f:
        f.write(str(store.port))
    os.rename(os.path.join(out_dir, "port.tmp"), os.path.join(out_dir, "port"))
    group = ws.open_engine_group(store, world, "gloo", group_name=GROUP, collective_timeout_s=60)
    sent = ws.send_weights(module(), ws.broadcaster(group, as_bytes=as_bytes), cap=CAP, dtype="bfloat16",
                           header=False)
    with open(os.path.join(out_dir, "sent"), "w") as f:
        f.write(str(sent))
    close(group)


def engine_rank(rank: int, world: int, out_dir: str, as_bytes: bool) -> None:
    """What SGLang's scheduler does, from its documented behaviour: a tcp:// rendezvous to rank 0's store, a
    PrefixStore named after the group, torch's group constructor; then per update_weights_from_distributed
    (load_format flattened_bucket) one broadcast from rank 0 into a flat tensor (bytes in the SGLang versions
    whose FlattenedTensorBucket supports several dtypes, else the bucket's dtype), cut into the named tensors."""
    import datetime

    import torch.distributed as dist
    from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

    from rlgraph.workers import weight_sync as ws

    while not os.path.exists(os.path.join(out_dir, "port")):
        time.sleep(0.05)
    port = int(open(os.path.join(out_dir, "port")).read())
    timeout = datetime.timedelta(seconds=60)
    store, rank, world = next(rendezvous(f"tcp://127.0.0.1:{port}", rank, world, timeout=timeout))
    store.set_timeout(timeout)
    group, _ = _new_process_group_helper(world, rank, [], Backend("gloo"), PrefixStore(GROUP, store),
                                         group_name=GROUP, timeout=timeout)
    _world.pg_group_ranks[group] = {r: r for r in range(world)}
    received = {}
    for bucket in ws.decoded_layout(open(os.path.join(out_dir, "layout.json"), "rb").read()):
        numel = sum(bucket.numels)
        flat = torch.empty(numel * bucket.dtype.itemsize if as_bytes else numel,
                           dtype=torch.uint8 if as_bytes else bucket.dtype)
        dist.broadcast(flat, src=0, group=group)
        typed = flat.view(bucket.dtype) if as_bytes else flat
        received.update((name, t.clone()) for name, t in ws.unpack(bucket, typed))
    torch.save(received, os.path.join(out_dir, f"{rank}.pt"))
    close(group)


def close(group) -> None:
    """Every rank leaves together and takes its group down before the interpreter exits: a gloo group left to the
    exit's destructors, while rank 0 (the store's owner) is already gone, aborts its process ("terminate called
    without an active exception"; seen once in CI)."""
    import torch.distributed as dist

    dist.barrier(group=group)
    dist.destroy_process_group(group)


def main(rank: int, world: int, out_dir: str, as_bytes: bool) -> None:
    torch.set_num_threads(1)
    if rank == 0:
        sender(world, out_dir, as_bytes)
    else:
        engine_rank(rank, world, out_dir, as_bytes)


def test_an_engines_own_ranks_receive_the_buckets_as_bytes_or_typed(tmp_path):
    from rlgraph.workers import weight_sync as ws

    expected = {n: t.detach().to(torch.bfloat16) for n, t in module().state_dict().items()}
    for as_bytes in (True, False):
        out = tmp_path / str(as_bytes)
        out.mkdir()
        mp.start_processes(main, args=(3, str(out), as_bytes), nprocs=3, join=True, start_method="spawn")
        layout = ws.decoded_layout((out / "layout.json").read_bytes())
        assert len(layout) > 2  # several buckets
        assert int((out / "sent").read_text()) == sum(t.numel() * 2 for t in expected.values())
        for rank in (1, 2):  # two scheduler ranks (tp = 2, or two replicas)
            received = torch.load(out / f"{rank}.pt", weights_only=True)
            assert received.keys() == expected.keys()
            for name, tensor in expected.items():
                assert received[name].dtype == torch.bfloat16 and torch.equal(received[name], tensor), name
