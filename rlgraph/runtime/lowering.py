"""Lowering: join what runs (WorkerSpecs) with where it runs (Placements) into Ray actors.

One placement group per (pool, node), STRICT_PACK, one bundle per device ({"CPU": 1} on a cpu pool,
{"GPU": 1, "CPU": 1} on a gpu pool). One `DeviceProcess` actor per process of the plan, pinned to
the bundle of its first device. `lower` is the only place that calls
`ray.remote(...).options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, bundle))`.

Ray leaves a placement group that does not fit pending for ever, so the fit is checked first, per
node, and every wait has a timeout whose error names the pool, the node and what the cluster has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlgraph.plan.model import Plan, PoolPlan
from rlgraph.runtime.errors import PlacementError
from rlgraph.runtime.group import Member, WorkerGroup
from rlgraph.runtime.process import DeviceProcess, HostedRole
from rlgraph.runtime.roles import WorkerSpec, sharded_roles
from rlgraph.runtime.weight_sync import join_sync_groups
from rlgraph.workers.rendezvous import group_host

DEFAULT_PLACEMENT_TIMEOUT_S = 60.0  # also how long a data-parallel group's rendezvous waits for its ranks
# how long one collective of a data-parallel group may wait for the other ranks: one rank may be generating
# longer sequences, or writing a checkpoint, while the others are already in the next gather
COLLECTIVE_TIMEOUT_S = 30 * 60.0


@dataclass(frozen=True)
class ProcessPlacement:
    """Where one process runs."""

    process: str
    pool: str
    node: int
    bundle: int  # its bundle in the node's placement group (the device index when every process has one device)
    hosted: tuple[tuple[str, int], ...]  # (role, replica)
    devices: tuple[int, ...] = ()  # the devices it owns on the node: a tp group owns tp of them


@dataclass
class Lowered:
    """The live Ray side of a run: placement groups, processes, and a group per role."""

    placement_groups: dict[tuple[str, int], Any] = field(default_factory=dict)
    processes: dict[str, Any] = field(default_factory=dict)  # process id -> DeviceProcess handle
    info: dict[str, dict] = field(default_factory=dict)  # process id -> what setup() reported
    node_ids: dict[tuple[str, int], str] = field(default_factory=dict)  # (pool, plan node) -> the Ray node it got
    groups: dict[str, WorkerGroup] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # how long each part of `lower` took
    # Ray actor id (hex) -> "process P (`role` replica i, ...) on node N of pool `p`": a process that dies
    # is named by this in the error (driver.ray_errors) rather than by its Ray id
    actor_names: dict[str, str] = field(default_factory=dict)
    # (source, target) -> the collective group of a sync edge whose rollout has processes of its own
    sync_edges: dict[tuple[str, str], Any] = field(default_factory=dict)

    def process_of(self, role: str, replica: int = 0) -> Any:
        return next(m.handle for m in self.groups[role].members if m.replica == replica)

    def shutdown(self) -> None:
        """Kill our actors and remove our placement groups; nothing else on the cluster is touched."""
        for handle in self.processes.values():
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        for pg in self.placement_groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.processes.clear()
        self.placement_groups.clear()
        self.actor_names.clear()


def process_placements(plan: Plan) -> dict[str, ProcessPlacement]:
    """Each process's node and devices: those of the role whose process it is (`<root role>/<replica>`; the
    roles colocated with it share them), and its bundle in the node's placement group (`node_bundles`)."""
    out = {}
    for process, rows in plan.processes().items():
        root = next((p for p in rows if process == f"{p.role}/{p.replica}"), rows[0])
        out[process] = ProcessPlacement(process, root.pool, root.node, -1, tuple((p.role, p.replica) for p in rows),
                                        tuple(root.devices) or (root.device,))
    for (pool, node), bundles in _bundle_layouts(plan, out).items():
        for process, index in bundles[1].items():
            out[process] = dataclasses.replace(out[process], bundle=index)
    return out


def _bundle_layouts(plan: Plan, where: dict[str, ProcessPlacement]) -> dict[tuple[str, int], tuple[list[int], dict]]:
    """(pool, node) -> (devices per bundle, process -> bundle index). A process owns one bundle holding all
    its devices (Ray gives an actor the resources of one bundle), devices no process uses get one each;
    bundles follow the devices' order, so with one device per process bundle i is device i."""
    pools = {p.name: p for p in plan.pools}
    out: dict[tuple[str, int], tuple[list[int], dict]] = {}
    for key in sorted({(w.pool, w.node) for w in where.values()}):
        owner = {d: w.process for w in where.values() if (w.pool, w.node) == key for d in w.devices}
        sizes: list[int] = []
        index: dict[str, int] = {}
        for device in range(pools[key[0]].devices_per_node):
            process = owner.get(device)
            if process is None:
                sizes.append(1)
            elif process not in index:
                index[process] = len(sizes)
                sizes.append(len(where[process].devices))
        out[key] = (sizes, index)
    return out


def bundle_of(pool: PoolPlan) -> dict[str, float]:
    return {"GPU": 1.0, "CPU": 1.0} if pool.device == "gpu" else {"CPU": 1.0}


def lower(plan: Plan, specs: dict[str, WorkerSpec], lowered: Lowered, *, timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S,
          process_class: type = DeviceProcess) -> Lowered:
    """Reserve the devices, start one process per device, build the workers in them.

    Fills `lowered` as it goes, so the caller can tear down whatever was made if a step fails.
    `process_class` is what each process runs: DeviceProcess, or a subclass of it (tests inject faults
    and delays with one; it must be importable or picklable by value in Ray's worker processes).
    """
    start_processes(plan, specs, lowered, timeout_s=timeout_s, process_class=process_class)
    clock = time.perf_counter()

    # --- the data-parallel groups before the workers: a worker that will be sharded builds its model empty
    # (workers/fsdp.py). This wait includes starting the processes of the groups.
    join_data_parallel_groups(plan, lowered, {p.name: p for p in plan.pools}, timeout_s)
    lowered.seconds["data_parallel"] = time.perf_counter() - clock
    clock = time.perf_counter()

    # --- build the workers, all processes at once (this wait includes starting the other processes)
    setups = {process: handle.setup.remote() for process, handle in lowered.processes.items()}
    for process, ref in setups.items():
        lowered.info[process] = ray.get(ref)

    roles = {r.name: r for r in plan.roles}
    sharded = sharded_roles(plan, specs)
    for role in roles:
        members = [Member(lowered.processes[p.process], p.replica, p.process) for p in plan.placements_of(role)]
        lowered.groups[role] = WorkerGroup(role, roles[role].kind, members, sharded=role in sharded)
    shard_data_parallel_groups(plan, lowered)
    lowered.seconds["workers"] = time.perf_counter() - clock  # models loaded (and sharded)
    clock = time.perf_counter()
    join_sync_groups(plan, specs, lowered, timeout_s, COLLECTIVE_TIMEOUT_S)
    lowered.seconds["weight_sync_groups"] = time.perf_counter() - clock
    return lowered


def start_processes(plan: Plan, specs: dict[str, WorkerSpec], lowered: Lowered, *,
                    timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S, process_class: type = DeviceProcess) -> None:
    """Reserve the devices and start one process per device (per tp group), each shown its devices (no worker
    is built yet: `lower` goes on from here)."""
    clock = time.perf_counter()
    where = process_placements(plan)
    pools = {p.name: p for p in plan.pools}
    used = sorted({(w.pool, w.node) for w in where.values()})
    check_fit(pools, used)

    # --- reserve: every placement group is requested before waiting on any
    targets = target_nodes(pools, used)
    for pool_name, node in used:
        pool = pools[pool_name]
        sizes = _bundle_layouts(plan, where)[(pool_name, node)][0]
        lowered.placement_groups[(pool_name, node)] = placement_group(
            [{k: v * size for k, v in bundle_of(pool).items()} for size in sizes], strategy="STRICT_PACK",
            _soft_target_node_id=targets.get((pool_name, node)),
        )
    for (pool_name, node), pg in lowered.placement_groups.items():
        if not pg.wait(timeout_s):
            raise PlacementError(
                f"pool `{pool_name}` node {node}: its {pools[pool_name].devices_per_node} "
                f"{pools[pool_name].device} device(s) were not granted within {timeout_s:.0f} s. "
                f"The cluster has {_resources(ray.cluster_resources())} in total, "
                f"{_resources(ray.available_resources())} free now. Free the devices, make the pool "
                "smaller, or point --address at a larger cluster."
            )
        with contextlib.suppress(Exception):
            lowered.node_ids[(pool_name, node)] = placement_group_table(pg)["bundles_to_node_id"][0]

    lowered.seconds["placement"] = time.perf_counter() - clock
    clock = time.perf_counter()

    # --- start: one DeviceProcess per device (per tp group), pinned to its bundle
    remote = ray.remote(process_class)
    for process, w in where.items():
        pool = pools[w.pool]
        owned = len(w.devices)
        options = {
            "num_cpus": owned,
            "num_gpus": owned if pool.device == "gpu" else 0,
            "max_restarts": 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                lowered.placement_groups[(w.pool, w.node)], placement_group_bundle_index=w.bundle,
            ),
        }
        hosted = [HostedRole(specs[role], replica) for role, replica in w.hosted]
        num_threads = int(bundle_of(pool)["CPU"]) * owned  # torch threads = the CPUs the bundle reserves
        handle = remote.options(**options).remote(process, w.node, hosted, num_threads, w.bundle)
        lowered.processes[process] = handle
        roles = ", ".join(f"`{role}` replica {replica}" for role, replica in w.hosted)
        lowered.actor_names[handle._actor_id.hex()] = f"process {process} ({roles}) on node {w.node} of pool `{w.pool}`"
    show_devices(plan, where, lowered)  # before anything touches CUDA, the data-parallel groups included


def device_spans(plan: Plan, where: dict[str, ProcessPlacement]) -> dict[str, tuple[str, ...]]:
    """Process -> the processes that own the devices its replicas run on, itself first. A replica with tp > 1
    spans devices of other processes: a colocated rollout lives in the process of its first device, and the
    others belong to the processes of the role it is colocated with."""
    owner = {(w.pool, w.node, device): w.process for w in where.values() for device in w.devices}
    spans: dict[str, tuple[str, ...]] = {}
    for process, rows in plan.processes().items():
        span = [process]
        for row in rows:
            span += [owner[(row.pool, row.node, device)] for device in row.devices or [row.device]
                     if owner[(row.pool, row.node, device)] not in span]
        spans[process] = tuple(span)
    return spans


def show_devices(plan: Plan, where: dict[str, ProcessPlacement], lowered: Lowered) -> None:
    """Ray shows each process the GPUs of its own bundle (CUDA_VISIBLE_DEVICES). A process whose replicas span
    the devices of others is shown theirs too, after its own, so its own GPU stays cuda:0 for the roles it
    hosts, and a tp engine sees all of its span (as verl's SGLang rollout gathers its tp group's devices).
    A process of a cpu pool is shown none: Ray leaves every GPU of the node in view of a process it gave none,
    where torch, and any library or child process that takes a GPU when it sees one, would use another's."""
    pools = {p.name: p for p in plan.pools}
    spans = {process: span for process, span in device_spans(plan, where).items()
             if len(span) > 1 and pools[where[process].pool].device == "gpu"}
    cluster_has_gpus = ray.cluster_resources().get("GPU", 0) > 0  # on a CPU cluster there is none to hide
    shown = {process: [] for process, w in where.items() if cluster_has_gpus and pools[w.pool].device != "gpu"}
    needed = sorted({process for span in spans.values() for process in span})
    ids = dict(zip(needed, ray.get([lowered.processes[process].gpu_ids.remote() for process in needed])))
    shown.update({process: [gpu for other in span for gpu in ids[other]] for process, span in spans.items()})
    ray.get([lowered.processes[process].see_devices.remote(gpus) for process, gpus in shown.items()])


def data_parallel_groups(plan: Plan) -> list[tuple[str, ...]]:
    """The processes of each trained role with several replicas, in rank (= replica) order.

    torch.distributed has one default group per process, so the trained roles a process hosts must
    agree on it: colocated roles share their root's processes and replica numbers, so they do.
    """
    groups: dict[tuple[str, ...], str] = {}
    member_of: dict[str, tuple[str, ...]] = {}
    for role in plan.roles:
        rows = plan.placements_of(role.name)
        if role.kind not in ("actor", "critic") or len(rows) < 2:
            continue
        group = tuple(p.process for p in rows)
        for process in group:
            if member_of.get(process, group) != group:
                raise PlacementError(
                    f"process {process} hosts replicas of two trained roles with different data-parallel groups "
                    f"(`{groups[member_of[process]]}` and `{role.name}`); give them the same replicas or separate pools"
                )
            member_of[process] = group
        groups.setdefault(group, role.name)
    return list(groups)


def join_data_parallel_groups(plan: Plan, lowered: Lowered, pools: dict[str, PoolPlan], rendezvous_timeout_s: float,
                              collective_timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """Start one gloo (cpu) / nccl (gpu) group per set of trained replicas, as verl's worker env does:
    rank = replica (replicas are numbered node by node, so ranks are ordered by node), world size = the
    replicas, MASTER_ADDR:MASTER_PORT = the store rank 0 opens on its node (a port the system picks), LOCAL_RANK = the device on its node
    on a cpu pool, its index among the GPUs Ray shows the process on a gpu pool (`init_data_parallel`).
    A group on one machine listens on loopback only (workers/rendezvous.py)."""
    device_of = {p.process: pools[p.pool].device for p in plan.placements}
    local_rank = {p.process: p.device for p in plan.placements}
    for group in data_parallel_groups(plan):
        address = group_host(ray.get([lowered.processes[process].node_address.remote() for process in group]))
        port = ray.get(lowered.processes[group[0]].open_data_parallel_store.remote(address, len(group),
                                                                                    rendezvous_timeout_s))
        backend = "nccl" if device_of[group[0]] == "gpu" else "gloo"
        ray.get([lowered.processes[process].init_data_parallel.remote(
            backend, address, port, rank, len(group), local_rank[process], rendezvous_timeout_s, collective_timeout_s)
            for rank, process in enumerate(group)])


def shard_data_parallel_groups(plan: Plan, lowered: Lowered) -> None:
    """strategy = fsdp, once the workers are built: shard and fill from rank 0, in the same order on every rank
    (filling broadcasts rank 0's weights)."""
    for group in data_parallel_groups(plan):
        ray.get([lowered.processes[process].shard.remote() for process in group])


def target_nodes(pools: dict[str, PoolPlan], used: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """A Ray node for each (pool, plan node): the nodes of one pool go to different Ray nodes when the
    cluster has enough that can hold them (else they share one, as on a single machine). Nodes are
    taken in Ray's order and filled by what this run asks for; Ray is asked softly
    (`_soft_target_node_id`), so a node that someone else has filled is replaced by one that has room."""
    alive = [(n["NodeID"], dict(n["Resources"])) for n in ray.nodes() if n.get("Alive")]
    room = {node_id: res for node_id, res in alive}
    out: dict[tuple[str, int], str] = {}
    for pool_name in dict.fromkeys(p for p, _ in used):
        pool = pools[pool_name]
        need = {k: v * pool.devices_per_node for k, v in bundle_of(pool).items()}
        taken: set[str] = set()
        for _, node in [u for u in used if u[0] == pool_name]:
            fits = [node_id for node_id, res in room.items() if all(res.get(k, 0) >= v for k, v in need.items())]
            choice = next((n for n in fits if n not in taken), fits[0] if fits else None)
            if choice is None:
                continue  # check_fit has already said whether some node could ever hold it
            out[(pool_name, node)] = choice
            taken.add(choice)
            for k, v in need.items():
                room[choice][k] = room[choice].get(k, 0) - v
    return out


def check_fit(pools: dict[str, PoolPlan], used: list[tuple[str, int]]) -> None:
    """Fail at once, with a hint, when no alive node could ever hold a pool node's bundles."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    for pool_name, node in used:
        pool = pools[pool_name]
        need = {k: v * pool.devices_per_node for k, v in bundle_of(pool).items()}
        if not any(all(res.get(k, 0) >= v for k, v in need.items()) for res in nodes):
            have = "; ".join(_resources(res) for res in nodes) or "no alive nodes"
            raise PlacementError(
                f"pool `{pool_name}` node {node} needs {_resources(need)} on one machine, but no node of the "
                f"cluster has that (nodes: {have}). Lower `devices_per_node` of pool `{pool_name}`, or point "
                "--address at a cluster whose nodes are large enough."
            )


def _resources(res: dict[str, float]) -> str:
    keys = [k for k in ("CPU", "GPU") if res.get(k)]
    return ", ".join(f"{res[k]:g} {k}" for k in keys) or "nothing"
