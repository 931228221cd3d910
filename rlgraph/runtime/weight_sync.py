"""Weight sync to a rollout with processes of its own: one collective group per sync edge, opened at start-up.

The group of an edge `actor -> rollout` spans the source's rank-0 process (rank 0, the sender) and every
process of a rollout replica (ranks 1..k), in gloo on CPU pools and nccl when every one of them is on a
GPU pool. It is a group of its own (rlgraph/workers/weight_sync.py `open_group`): the processes keep
their default torch.distributed group for data parallelism.

Each sync, the sender streams its weights in buckets and every rollout replica loads them as they arrive;
the driver only starts the calls and waits. A sharded (fsdp) source gathers each parameter on all of its
ranks, so every one of them takes part, and only rank 0 sends.

An edge whose rollout shares a process with its source (a process cannot be two ranks of one group), but
is not its in-place alias, keeps the object-store path (`StepDriver.sync_through_object_store`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import ray

from rlgraph.plan.model import Plan
from rlgraph.runtime.roles import ALIAS, WorkerSpec
from rlgraph.workers.rendezvous import group_host


class LoweredView(Protocol):
    """What the syncs read of the lowered plan (rlgraph.runtime.lowering.Lowered, which imports this module:
    said here as a protocol, so the two do not import each other)."""

    processes: dict[str, Any]  # process id -> its Ray actor handle
    info: dict[str, dict[str, Any]]  # process id -> where it runs (node_ip, ...)
    groups: dict[str, Any]  # role -> its WorkerGroup
    sync_edges: dict[tuple[str, str], SyncEdge]


@dataclass(frozen=True)
class SyncEdge:
    source: str
    target: str
    processes: tuple[str, ...]  # in rank order: the source's rank-0 process, then the rollout replicas'
    backend: str  # gloo | nccl
    dtype: str  # the rollout's dtype: what the parameters travel in (half the bytes of fp32 masters for bf16)

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"


def collective_edges(plan: Plan, specs: dict[str, WorkerSpec]) -> list[SyncEdge]:
    """The sync edges that go through a collective group: those whose rollout has weights of its own
    (not an in-place alias) in processes apart from every process of the source."""
    device = {p.name: p.device for p in plan.pools}
    edges = []
    for source, target in plan.syncs:
        if specs[target].worker == ALIAS:
            continue
        source_rows = plan.placements_of(source)
        target_rows = plan.placements_of(target)
        if {p.process for p in source_rows} & {p.process for p in target_rows}:
            continue
        rank0 = next(p for p in source_rows if p.replica == 0)
        rows = [rank0, *sorted(target_rows, key=lambda p: p.replica)]
        backend = "nccl" if all(device[p.pool] == "gpu" for p in rows) else "gloo"
        edges.append(SyncEdge(source, target, tuple(p.process for p in rows), backend, plan.role(target).settings.dtype))
    return edges


def join_sync_groups(plan: Plan, specs: dict[str, WorkerSpec], lowered: LoweredView, rendezvous_timeout_s: float,
                     collective_timeout_s: float) -> None:
    """Open the group of every collective edge (`lowered.sync_edges`): rank 0 opens a store on a port of
    its node, then every member joins it at once (a group forms only when all are there), waiting up to
    `rendezvous_timeout_s`; a sync then may take `collective_timeout_s` (the whole model over the network).
    A group on one machine listens on loopback only (workers/rendezvous.py)."""
    for edge in collective_edges(plan, specs):
        master = edge.processes[0]
        host = group_host([lowered.info[process]["node_ip"] for process in edge.processes])
        port = ray.get(lowered.processes[master].open_weight_sync_store.remote(
            edge.source, edge.name, host, len(edge.processes), rendezvous_timeout_s))
        ray.get([lowered.processes[process].join_weight_sync.remote(
            edge.source if rank == 0 else edge.target, edge.name, host, port, rank, len(edge.processes),
            edge.backend, rendezvous_timeout_s, collective_timeout_s) for rank, process in enumerate(edge.processes)])
        lowered.sync_edges[(edge.source, edge.target)] = edge


def start_sync(lowered: LoweredView, edge: SyncEdge, bucket_bytes: int | None = None) -> list[Any]:
    """Start one sync over `edge`'s group; the refs to wait on. `bucket_bytes`: the bucket cap
    (None: rlgraph/workers/weight_sync.py BUCKET_BYTES)."""
    source = lowered.groups[edge.source]
    # a sharded source: every rank gathers each parameter, rank 0 (replica 0) sends it
    refs = [m.handle.send_weights.remote(edge.source, edge.name if m.replica == 0 else None, bucket_bytes, edge.dtype)
            for m in source.members_for_one()]
    refs += [lowered.processes[process].receive_weights.remote(edge.target, edge.name)
             for process in edge.processes[1:]]
    return refs
