"""Weight sync over a collective group: the trainer's rank 0 streams its weights to rollouts in other processes.

The group spans the sending process (rank 0) and every receiving rollout process. It is built straight from
a TCPStore and a backend process group (`open_group`), so it leaves alone the one default torch.distributed
group a process may already be in for data parallelism; torch's own `new_group` would need that default.

What travels, per sync:

    header   the bucket layout (names, shapes, dtype of each bucket) as JSON bytes, its length first
    buckets  flattened tensors of one dtype, at most `BUCKET_BYTES` each (a tensor larger than that is a
             bucket of its own), in the header's order

The parameters travel in the receiving engine's dtype where it is narrower (`dtype`), cast as each bucket is
packed: a bf16 rollout of a trainer with fp32 master weights gets half the bytes, and the same values it would
have rounded to on loading them (a copy into a bf16 parameter rounds the same way). Buffers travel as they
are: they are few and small, and an engine may keep one in float32.

The sender packs one bucket at a time and the receivers load each into the engine as it arrives
(`engine.load_weights` takes (name, tensor) pairs), so neither side holds more than one bucket beyond the
model itself: no state dict through Ray's object store, no whole host copy. A model sharded with fsdp is
gathered one parameter at a time (`DTensor.full_tensor`, on every rank of its data-parallel group in the
same order; one gathered parameter more on the sender); only its rank 0 sends.

A rollout colocated with its source that holds weights of its own (sglang, vllm) gets them in its process
instead (`load_in_process`): the same buckets, packed on the process's device and handed to the engine there,
with no group. A parameter whose shard lives on the host (param_offload) is gathered on the GPU all the same
(`gather_device_tensor`): over nccl, not gloo.

Torch only, no Ray: the GPU check script runs it in one process.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from rlgraph.workers import rendezvous

BUCKET_BYTES = 256 * 2**20  # verl and OpenRLHF use buckets of a few hundred MiB

Transfer = Callable[[torch.Tensor], None]  # a broadcast from rank 0, in place on the receivers


@dataclass(frozen=True)
class Bucket:
    """Tensors of one dtype, sent as one flat tensor."""

    dtype: torch.dtype
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def numels(self) -> list[int]:
        return [_numel(shape) for shape in self.shapes]

    @property
    def nbytes(self) -> int:
        return sum(self.numels) * _itemsize(self.dtype)


def plan_buckets(layout: Iterable[tuple[str, tuple[int, ...], torch.dtype]], cap: int = BUCKET_BYTES) -> list[Bucket]:
    """(name, shape, dtype) triples in buckets of one dtype and at most `cap` bytes, in the order given
    within each dtype; a tensor larger than `cap` alone is a bucket."""
    if cap <= 0:
        raise ValueError(f"the bucket cap must be positive, got {cap}")
    by_dtype: dict[torch.dtype, list[tuple[str, tuple[int, ...]]]] = {}
    for name, shape, dtype in layout:
        by_dtype.setdefault(dtype, []).append((name, tuple(shape)))
    buckets: list[Bucket] = []
    for dtype, entries in by_dtype.items():
        current: list[tuple[str, tuple[int, ...]]] = []
        size = 0
        for name, shape in entries:
            nbytes = _numel(shape) * _itemsize(dtype)
            if current and size + nbytes > cap:
                buckets.append(_bucket(dtype, current))
                current, size = [], 0
            current.append((name, shape))
            size += nbytes
        if current:
            buckets.append(_bucket(dtype, current))
    return buckets


def pack(bucket: Bucket, tensors: Iterable[torch.Tensor], device: torch.device | str = "cpu") -> torch.Tensor:
    """The bucket's tensors (in its order) copied into one flat tensor on `device`; floating-point tensors are
    cast to the bucket's floating-point dtype as they are copied (no second copy of a tensor)."""
    flat = torch.empty(sum(bucket.numels), dtype=bucket.dtype, device=device)
    offset = 0
    for name, numel, tensor in zip(bucket.names, bucket.numels, tensors, strict=True):
        castable = tensor.is_floating_point() and bucket.dtype.is_floating_point
        if tensor.numel() != numel or (tensor.dtype != bucket.dtype and not castable):
            raise ValueError(f"`{name}` is {tensor.dtype} {tuple(tensor.shape)}, the bucket expects {bucket.dtype} "
                             f"with {numel} elements")
        flat[offset : offset + numel].copy_(tensor.reshape(-1))
        offset += numel
    return flat


def unpack(bucket: Bucket, flat: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs viewing `flat` (no copy)."""
    parts = flat.split(bucket.numels)
    return [(name, part.view(shape)) for name, part, shape in zip(bucket.names, parts, bucket.shapes, strict=True)]


# --- the two ends ---


@torch.no_grad()
def send_weights(module: torch.nn.Module, send: Transfer | None, *, device: torch.device | str = "cpu",
                 cap: int = BUCKET_BYTES, dtype: torch.dtype | str | None = None, header: bool = True) -> int:
    """Stream `module`'s weights through `send` (rank 0 of the sync group); bytes sent.

    `dtype`: the receiving engine's dtype, which the floating-point parameters travel in (None: each in its
    own). A module sharded with fsdp: every rank of its data-parallel group calls this (each parameter is
    gathered by all of them in the same order); the ranks outside the sync group pass `send=None`.
    `header` False: the receivers know the layout already (`encoded_layout`, handed to them beforehand: an
    engine's own processes, which receive only the buckets)."""
    weights, buckets = sync_layout(module, cap, dtype)
    if send is not None and header:
        encoded = torch.frombuffer(bytearray(_encode(buckets)), dtype=torch.uint8).to(device)
        send(torch.tensor([encoded.numel()], dtype=torch.int64, device=device))
        send(encoded)
    sent = 0
    for _, flat in packed_buckets(weights, buckets, device, gather_only=send is None):
        if flat is None:
            continue
        send(flat)
        sent += flat.numel() * flat.element_size()
        del flat
    return sent


@torch.no_grad()
def load_in_process(module: torch.nn.Module, load: Callable[[list[tuple[str, torch.Tensor]]], None] | None, *,
                    device: torch.device | str = "cpu", cap: int = BUCKET_BYTES, dtype: torch.dtype | str | None = None,
                    keep_buckets: bool = False) -> int:
    """Hand `module`'s weights to an engine in this process (`load`, with each bucket's (name, tensor) pairs),
    bucket by bucket on `device`, with no group and no copy through the host; bytes handed over.

    For a rollout colocated with its source without generating with its module: the engine is in this process
    (vLLM's core) or reached from it (SGLang's scheduler processes take each bucket's tensors as CUDA-IPC
    handles, on the same GPUs: `update_weights_from_tensor`). A sharded source: every rank calls this, in the
    same order (each parameter is gathered by all of them); a rank that hosts no replica of the rollout passes
    `load=None` and only takes part in the gathers. `keep_buckets` as for `receive_weights`."""
    weights, buckets = sync_layout(module, cap, dtype)
    loaded = 0
    kept: list[torch.Tensor] = []
    for bucket, flat in packed_buckets(weights, buckets, device, gather_only=load is None):
        if flat is None:
            continue
        load(unpack(bucket, flat))
        loaded += flat.numel() * flat.element_size()
        if keep_buckets:
            kept.append(flat)
        del flat
    return loaded


def encoded_layout(module: torch.nn.Module, cap: int = BUCKET_BYTES, dtype: torch.dtype | str | None = None) -> bytes:
    """The header `send_weights` would send (the buckets' names, shapes and dtype), for receivers told it
    another way; `decoded_layout` reads it back. No gather: the shapes are the whole tensors'."""
    return _encode(sync_layout(module, cap, dtype)[1])


def decoded_layout(raw: bytes) -> list[Bucket]:
    return list(_decode(raw))


def sync_layout(module: torch.nn.Module, cap: int, dtype: torch.dtype | str | None
                ) -> tuple[dict[str, torch.Tensor], list[Bucket]]:
    """The weights a sync moves (one name per tied tensor) and their buckets, in the dtype they travel in."""
    weights = _unique_weights(module)
    return weights, plan_buckets(wire_layout(weights, dtype), cap)


def packed_buckets(weights: dict[str, torch.Tensor], buckets: list[Bucket], device: torch.device | str, *,
                   gather_only: bool = False) -> Iterator[tuple[Bucket, torch.Tensor | None]]:
    """Each bucket packed into one flat tensor on `device`, one at a time (sharded parameters gathered as they
    are packed). `gather_only`: a rank of a sharded module that takes part in the gathers and packs nothing
    (None in place of each bucket)."""
    for bucket in buckets:
        tensors = (_full(weights[name]) for name in bucket.names)
        if gather_only:
            for _ in tensors:
                pass
            yield bucket, None
        else:
            yield bucket, pack(bucket, tensors, device)


def receive_weights(receive: Transfer, load: Callable[[list[tuple[str, torch.Tensor]]], None], *,
                    device: torch.device | str = "cpu", keep_buckets: bool = False) -> int:
    """Take what `send_weights` streams (a non-zero rank of the sync group), calling `load` with each
    bucket's (name, tensor) pairs as it arrives; bytes received.

    `keep_buckets`: for an engine whose `load` returns before it has read the tensors (SGLang answers once its
    copies are queued, in its own processes): every bucket stays allocated until the last is loaded, so the
    caching allocator cannot hand a bucket's memory to the next one while those copies wait (slime keeps its
    buffers the same way). The receiving process allocates nothing on the device between syncs, and the
    engine's next generation runs after its copies, so freeing them when the update ends is safe."""
    length = torch.zeros(1, dtype=torch.int64, device=device)
    receive(length)
    header = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    receive(header)
    received = 0
    kept: list[torch.Tensor] = []
    for bucket in _decode(bytes(header.cpu().numpy())):
        flat = torch.empty(sum(bucket.numels), dtype=bucket.dtype, device=device)
        receive(flat)
        load(unpack(bucket, flat))
        received += flat.numel() * flat.element_size()
        if keep_buckets:
            kept.append(flat)
        del flat
    return received


# --- the group ---


def open_group(host: str, port: int, rank: int, world_size: int, backend: str, *, rendezvous_timeout_s: float,
               collective_timeout_s: float, store: Any = None, own_ip: str = rendezvous.LOOPBACK) -> Any:
    """A process group of its own (gloo or nccl) over a TCPStore at host:port, not the default group.
    Rank 0 passes the store it opened (`open_store`); the others connect to it within `rendezvous_timeout_s`.
    Each broadcast may then take `collective_timeout_s`. Gloo's pairs listen on loopback when `host` is
    loopback, else on `own_ip` (this member's node)."""
    import torch.distributed as dist

    if store is None:
        store = dist.TCPStore(host, port, world_size, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=rendezvous_timeout_s))
    timeout = datetime.timedelta(seconds=collective_timeout_s)
    # the same constructors torch's own new_group uses, over a store no other group shares
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    if backend == "gloo":
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        options._devices = [rendezvous.gloo_device(rendezvous.bind_host(host, own_ip))]
        return dist.ProcessGroupGloo(store, rank, world_size, options)
    raise ValueError(f"unknown backend {backend!r} for a weight-sync group; expected gloo or nccl")


def open_store(host: str, world_size: int, timeout_s: float) -> Any:
    """The group's TCPStore on rank 0's node, listening on `host` only, on a port the system picks (read it
    from `.port`)."""
    return rendezvous.listen_store(host, 0, world_size, timeout_s)


def broadcaster(group: Any, as_bytes: bool = True) -> Transfer:
    """A broadcast from rank 0 of `group`, sent as bytes (every backend moves bytes; not every one each dtype),
    or in the tensor's own dtype (`as_bytes` False: receivers that post it typed, as nccl needs the same count
    and dtype on every rank)."""

    def transfer(tensor: torch.Tensor) -> None:
        group.broadcast(tensor.view(torch.uint8) if as_bytes and tensor.dtype != torch.uint8 else tensor, 0).wait()

    return transfer


def open_engine_group(store: Any, world_size: int, backend: str, *, group_name: str,
                      collective_timeout_s: float) -> Any:
    """Rank 0 of a group whose other ranks are a rollout engine's own processes (SGLang's schedulers, joined
    by `init_weights_update_group`), over the store rank 0 opened (`open_store`).

    The engine builds its side with torch's own group constructor over the store under `group_name`
    (sglang.srt.utils init_custom_process_group: a tcp:// rendezvous to this store, a PrefixStore named
    after the group, then torch's `_new_process_group_helper`, which prefixes the store again by group and
    device); this side is built the same way, so that both read and write the same keys."""
    from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world

    timeout = datetime.timedelta(seconds=collective_timeout_s)
    group, _ = _new_process_group_helper(world_size, 0, [], Backend(backend), PrefixStore(group_name, store),
                                         group_name=group_name, timeout=timeout)
    _world.pg_group_ranks[group] = {rank: rank for rank in range(world_size)}
    return group


def local_device() -> torch.device:
    """Where an in-process sync packs its buckets: this process's current GPU (the engine beside it reads them
    there), else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def transport_device(backend: str) -> torch.device:
    """Where the buckets live: nccl moves CUDA tensors (on this process's current device), gloo CPU ones."""
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


# --- helpers ---


def wire_layout(weights: dict[str, Any], dtype: torch.dtype | str | None) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """(name, shape, dtype on the wire) of each weight: a floating-point parameter in `dtype` where that is
    narrower than its own (widening would only add bytes: the engine widens exactly on loading), anything
    else (a buffer, an integer tensor, `dtype` None) in its own."""
    from rlgraph.workers import lora
    from rlgraph.workers.loading import as_dtype

    wire = as_dtype(dtype) if dtype is not None else None

    def on_wire(tensor: Any) -> torch.dtype:
        parameter = isinstance(tensor, (torch.nn.Parameter, lora.MergedWeight))
        narrower = wire is not None and wire.is_floating_point and wire.itemsize < tensor.dtype.itemsize
        return wire if narrower and parameter and tensor.dtype.is_floating_point else tensor.dtype

    return [(name, tuple(t.shape), on_wire(t)) for name, t in weights.items()]


def _unique_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of a tied weight (the receiver's module ties it the same
    way, so loading one name loads both). The tensors themselves (`keep_vars`), so the choice is by
    identity and the same on every rank of a sharded module, whose entries stay DTensors: nothing is
    gathered yet."""
    from rlgraph.workers import fsdp

    from rlgraph.workers import lora

    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    state = fsdp.resharded(module).state_dict(keep_vars=True)
    if lora.has_adapters(module):  # the rollout's engine takes plain weights: each LoRA layer merged as it is sent
        state = lora.merged_weights(module, state)
    for name, tensor in state.items():
        key = id(tensor.base if isinstance(tensor, lora.MergedWeight) else tensor)
        if key not in seen:
            seen.add(key)
            out[name] = tensor
    return out


def _full(tensor: Any) -> torch.Tensor:
    """The whole tensor: a sharded parameter gathered, a merged LoRA weight computed, anything else as it is."""
    if not hasattr(tensor, "full_tensor"):
        return tensor
    return gather_device_tensor(tensor).full_tensor()


def gather_device_tensor(tensor: Any) -> Any:
    """A DTensor whose shard lives on the host (param_offload: FSDP2's CPU offload keeps the shards there)
    with its shard moved to this process's GPU, so that its gather runs over nccl, one parameter at a time,
    not over gloo through host memory; anything else as it is (on a CPU there is nothing to move)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor) or not torch.cuda.is_available():
        return tensor
    local = tensor.to_local()
    if local.device.type != "cpu" or tensor.device_mesh.device_type != "cuda":
        return tensor
    return DTensor.from_local(local.to(torch.device("cuda", torch.cuda.current_device()), non_blocking=True),
                              tensor.device_mesh, tensor.placements, run_check=False, shape=tensor.shape,
                              stride=tensor.stride())


def _bucket(dtype: torch.dtype, entries: list[tuple[str, tuple[int, ...]]]) -> Bucket:
    return Bucket(dtype, tuple(n for n, _ in entries), tuple(s for _, s in entries))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _encode(buckets: list[Bucket]) -> bytes:
    return json.dumps([{"dtype": str(b.dtype).removeprefix("torch."), "names": b.names, "shapes": b.shapes}
                       for b in buckets]).encode()


def _decode(raw: bytes) -> Iterator[Bucket]:
    for b in json.loads(raw):
        yield Bucket(getattr(torch, b["dtype"]), tuple(b["names"]), tuple(tuple(s) for s in b["shapes"]))
