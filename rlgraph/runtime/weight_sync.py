"""Weight sync from a trained role to each rollout with weights of its own: which path an edge takes, and
starting one sync over it. `sync_path` is the one place that decides:

    alias         the rollout generates with its source's module in place (engine hf, colocated): nothing moves
    collective    the rollout has processes of its own: one collective group per edge, opened at start-up,
                  spanning the source's rank-0 process (rank 0, the sender) and every process of a rollout
                  replica (ranks 1..k), gloo on CPU pools and nccl when every one of them is on a GPU pool (a
                  group of its own, rlgraph/workers/weight_sync.py `open_group`: the processes keep their
                  default torch.distributed group for data parallelism). The sender streams its weights in
                  buckets and every replica loads each as it arrives. Over nccl into an engine that can
                  (SGLang: `into_engine_processes`), the engine's own processes are ranks 1.. instead and
                  receive the buckets themselves (`SyncEdge.engine_ranks`), told their layout beforehand.
    in_process    every rollout replica is colocated with a replica of its source but holds its own copy (engine
                  sglang or vllm): each process that hosts a rollout replica packs its source's weights bucket by
                  bucket on its own device and hands them to the engine there (SGLang's schedulers take each
                  bucket as CUDA-IPC handles on the same GPUs; vLLM's core runs in the process). No group, no
                  object store, no host copy: a sharded source gathers each parameter on all of its ranks, those
                  without a rollout replica only take part in the gathers; an unsharded one holds the whole
                  model on every replica, so only the processes with a rollout replica take part.
    object_store  what is left: some rollout replicas colocated with the source and some not (a process
                  cannot be two ranks of one group). The whole state dict goes through Ray's object store
                  (`rlgraph.runtime.weights.WeightSync.through_object_store`).

In every path but the object store's the parameters travel in the rollout's dtype where it is narrower (half
the bytes of fp32 master weights for a bf16 rollout). The driver only starts the calls and waits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import ray

from rlgraph.contract.engines import ENGINES
from rlgraph.plan.model import Plan
from rlgraph.runtime.roles import ALIAS, WorkerSpec, sharded_roles
from rlgraph.workers.rendezvous import group_host


class LoweredView(Protocol):
    """What the syncs read of the lowered plan (rlgraph.runtime.lowering.Lowered, which imports this module:
    said here as a protocol, so the two do not import each other)."""

    processes: dict[str, Any]  # process id -> its Ray actor handle
    info: dict[str, dict[str, Any]]  # process id -> where it runs (node_ip, ...)
    groups: dict[str, Any]  # role -> its WorkerGroup
    sync_edges: dict[tuple[str, str], SyncEdge | InProcessEdge]


PATHS = ("alias", "collective", "in_process", "object_store")


@dataclass(frozen=True)
class SyncEdge:
    """An edge whose sync goes through a collective group of its own."""

    source: str
    target: str
    processes: tuple[str, ...]  # in rank order: the source's rank-0 process, then the rollout replicas'
    backend: str  # gloo | nccl
    dtype: str  # the rollout's dtype: what the parameters travel in (half the bytes of fp32 masters for bf16)
    # the ranks each rollout process's engine brings where the engine's own processes are the group's receivers
    # (SGLang's schedulers: `EngineFacts.receives_in_own_processes`); empty: the rollout processes receive
    engine_ranks: tuple[int, ...] = ()
    as_bytes: bool = True  # how a bucket travels: as bytes, or in its dtype (what the engine's side posts)

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def receivers(self) -> int:
        """How many of `start_sync`'s refs (the last ones) are the rollout's side: each its seconds."""
        return len(self.processes) - 1

    @property
    def world_size(self) -> int:
        return 1 + sum(self.engine_ranks) if self.engine_ranks else len(self.processes)


@dataclass(frozen=True)
class InProcessEdge:
    """An edge whose rollout replicas each share a process with a replica of the source (path in_process)."""

    source: str
    target: str
    gatherers: tuple[str, ...]  # processes of a sharded source without a rollout replica: they only gather
    loaders: tuple[str, ...]  # processes that host a rollout replica: they pack and load
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def receivers(self) -> int:
        return len(self.loaders)


def sync_path(plan: Plan, specs: dict[str, WorkerSpec], source: str, target: str) -> str:
    """How the weights of `source` reach rollout `target` (one of PATHS; the module's docstring says each)."""
    if specs[target].worker == ALIAS:
        return "alias"
    source_processes = {p.process for p in plan.placements_of(source)}
    target_processes = {p.process for p in plan.placements_of(target)}
    if not source_processes & target_processes:
        return "collective"
    if target_processes <= source_processes:
        return "in_process"
    return "object_store"


def collective_edges(plan: Plan, specs: dict[str, WorkerSpec]) -> list[SyncEdge]:
    """The sync edges that go through a collective group (path collective)."""
    device = {p.name: p.device for p in plan.pools}
    edges = []
    for source, target in plan.syncs:
        if sync_path(plan, specs, source, target) != "collective":
            continue
        source_rows = plan.placements_of(source)
        target_rows = plan.placements_of(target)
        rank0 = next(p for p in source_rows if p.replica == 0)
        rows = [rank0, *sorted(target_rows, key=lambda p: p.replica)]
        backend = "nccl" if all(device[p.pool] == "gpu" for p in rows) else "gloo"
        edges.append(SyncEdge(source, target, tuple(p.process for p in rows), backend, plan.role(target).settings.dtype))
    return edges


def in_process_edges(plan: Plan, specs: dict[str, WorkerSpec]) -> list[InProcessEdge]:
    """The sync edges whose rollout replicas each live in a process of the source (path in_process)."""
    sharded = sharded_roles(plan, specs)
    edges = []
    for source, target in plan.syncs:
        if sync_path(plan, specs, source, target) != "in_process":
            continue
        loaders = tuple(p.process for p in plan.placements_of(target))
        others = tuple(p.process for p in plan.placements_of(source) if p.process not in loaders)
        edges.append(InProcessEdge(source, target, others if source in sharded else (), loaders,
                                   plan.role(target).settings.dtype))
    return edges


def join_sync_groups(plan: Plan, specs: dict[str, WorkerSpec], lowered: LoweredView, rendezvous_timeout_s: float,
                     collective_timeout_s: float) -> None:
    """Record every edge that `start_sync` serves in `lowered.sync_edges`, opening the group of each collective
    one: rank 0 opens a store on a port of its node, then every member joins it at once (a group forms only
    when all are there), waiting up to `rendezvous_timeout_s`; a sync then may take `collective_timeout_s` (the
    whole model over the network). A group on one machine listens on loopback only (workers/rendezvous.py)."""
    for edge in collective_edges(plan, specs):
        edge = into_engine_processes(plan, lowered, edge)
        master, receivers = edge.processes[0], edge.processes[1:]
        host = group_host([lowered.info[process]["node_ip"] for process in edge.processes])
        port = ray.get(lowered.processes[master].open_weight_sync_store.remote(
            edge.source, edge.name, host, edge.world_size, rendezvous_timeout_s))
        sender = lowered.processes[master].join_weight_sync.remote(
            edge.source, edge.name, host, port, 0, edge.world_size, edge.backend, rendezvous_timeout_s,
            collective_timeout_s, engine_group=bool(edge.engine_ranks), as_bytes=edge.as_bytes)
        if edge.engine_ranks:  # the engines' schedulers join as ranks 1.., each process's after the ones before
            offsets = [1 + sum(edge.engine_ranks[:i]) for i in range(len(receivers))]
            joins = [lowered.processes[process].join_engine_weight_sync.remote(
                edge.target, edge.name, host, port, offset, edge.world_size)
                for process, offset in zip(receivers, offsets)]
        else:
            joins = [lowered.processes[process].join_weight_sync.remote(
                edge.target, edge.name, host, port, rank, edge.world_size, edge.backend, rendezvous_timeout_s,
                collective_timeout_s) for rank, process in enumerate(receivers, start=1)]
        ray.get([sender, *joins])
        lowered.sync_edges[(edge.source, edge.target)] = edge
    for in_process in in_process_edges(plan, specs):
        lowered.sync_edges[(in_process.source, in_process.target)] = in_process


def into_engine_processes(plan: Plan, lowered: LoweredView, edge: SyncEdge) -> SyncEdge:
    """`edge` with the engines' own processes as its receivers, where the rollout's engine can take a sync there
    (`EngineFacts.receives_in_own_processes`), the group is nccl, and every replica's engine says how
    (`group_receiver`: an SGLang that has the path); else as it is."""
    facts = ENGINES.get(plan.role(edge.target).settings.engine)
    if edge.backend != "nccl" or facts is None or not facts.receives_in_own_processes:
        return edge
    answers = ray.get([lowered.processes[p].engine_group_receiver.remote(edge.target) for p in edge.processes[1:]])
    if any(a is None for a in answers) or len({a["as_bytes"] for a in answers}) != 1:
        return edge
    return dataclasses.replace(edge, engine_ranks=tuple(a["ranks"] for a in answers), as_bytes=answers[0]["as_bytes"])


def start_sync(lowered: LoweredView, edge: SyncEdge | InProcessEdge, bucket_bytes: int | None = None) -> list[Any]:
    """Start one sync over `edge`; the refs to wait on, the rollout's side last (`edge.receivers` of them, each
    the seconds it took). `bucket_bytes`: the bucket cap (None: rlgraph/workers/weight_sync.py BUCKET_BYTES)."""
    if isinstance(edge, InProcessEdge):
        # gatherers first: each process runs its part of every gather in the same order
        return [lowered.processes[process].sync_in_process.remote(edge.source, target, bucket_bytes, edge.dtype)
                for target, processes in ((None, edge.gatherers), (edge.target, edge.loaders)) for process in processes]
    source = lowered.groups[edge.source]
    # the engines receive only the buckets: their layout, asked of rank 0 before its send (an actor runs its calls
    # in the order they came), goes to each rollout process
    layout = (lowered.processes[edge.processes[0]].weight_sync_layout.remote(edge.source, bucket_bytes, edge.dtype)
              if edge.engine_ranks else None)
    # a sharded source: every rank gathers each parameter, rank 0 (replica 0) sends it
    refs = [m.handle.send_weights.remote(edge.source, edge.name if m.replica == 0 else None, bucket_bytes, edge.dtype)
            for m in source.members_for_one()]
    if layout is not None:
        return refs + [lowered.processes[process].receive_weights_in_engine.remote(edge.target, edge.name, layout)
                       for process in edge.processes[1:]]
    refs += [lowered.processes[process].receive_weights.remote(edge.target, edge.name)
             for process in edge.processes[1:]]
    return refs
