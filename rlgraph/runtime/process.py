"""One process per device, hosting every role placed on it (verl's hybrid engine).

`DeviceProcess` is a plain class; `lowering.py` turns it into a Ray actor pinned to one bundle of a
placement group. Colocated roles are built side by side in it: a rollout that shares the process of
the policy that syncs into it generates with that policy's module, so its weight sync is free.

Every method that runs worker code catches the worker's exception and raises a `WorkerError`
naming the role, replica, node and process, with the worker's own traceback.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlgraph.contract.judge import JudgeVerdictError
from rlgraph.runtime.errors import CheckpointError, EnvironmentFailedError, ProcessDiedError, RunError, WorkerError
from rlgraph.runtime.roles import ALIAS, BASE, WorkerSpec
from rlgraph.workers.envs.loading import EnvError
from rlgraph.workers.reward_process import ChildKilled


@dataclass(frozen=True)
class HostedRole:
    spec: WorkerSpec
    replica: int


class DeviceProcess:
    """Hosts the workers of the role replicas placed on one device. Build them with `setup()`."""

    def __init__(self, process_id: str, node: int, hosted: list[HostedRole], num_threads: int,
                 bundle: int | None = None) -> None:
        # Cheap on purpose: a failure here would reach the driver as Ray's ActorDiedError, while one in
        # setup() becomes a WorkerError that names the role.
        self.process_id = process_id
        self.node = node
        self.hosted = {h.spec.role: h for h in hosted}
        self.num_threads = num_threads
        self.workers: dict[str, Any] = {}
        self.data_parallel_store: Any = None  # rank 0's, from open_data_parallel_store until the group is joined
        self.node_ip = "?"
        self.bundle = bundle  # the placement group bundle it was scheduled on (Ray does not tell an actor)
        self.placement: dict[str, Any] = {}  # where Ray really put this process (see `where`)
        self.sync_groups: dict[str, Any] = {}  # sync edge -> its store (rank 0), then (group, backend)
        # rank 0's edges whose receivers are an engine's own processes -> whether a bucket travels as bytes
        self.engine_sync_edges: dict[str, bool] = {}

    # --- life cycle ---

    def setup(self) -> dict[str, Any]:
        """Build the workers (policies and critics first, then rollouts that alias them)."""
        import torch

        from rlgraph.workers.cuda import make_current, make_deterministic

        torch.set_num_threads(self.num_threads)
        if any(h.spec.deterministic for h in self.hosted.values()):
            make_deterministic()  # before any worker touches the GPU
        # its own GPU current before any worker runs, as each worker's device is: a library call without a device
        # (an engine's start-up, torch.cuda.get_rng_state) uses this one, never another GPU the process sees
        make_current(self.device())
        try:
            import ray

            if ray.is_initialized():  # not under Ray (a unit test): the node index is enough, and no Ray starts
                self.node_ip = ray.util.get_node_ip_address()
                self.placement = _ray_placement()
        except Exception:  # a Ray that cannot say where this process runs: the node index is enough
            pass
        ordered = sorted(self.hosted.values(), key=lambda h: h.spec.alias_of is not None)
        for hosted in ordered:
            with self._reporting(hosted.spec.role, "building its worker"):
                self.workers[hosted.spec.role] = self._build(hosted.spec)
        return {"process": self.process_id, "node_ip": self.node_ip, "pid": os.getpid()}

    def _build(self, spec: WorkerSpec) -> Any:
        """The role's worker, from its resolved settings (rlgraph.contract.settings)."""
        if spec.worker == ALIAS:  # the policy's engine generates for the rollout, with the rollout's limit
            host = self.workers[spec.alias_of]
            host.host_rollout(spec.settings)
            return host
        import rlgraph.workers as workers

        if spec.worker == BASE:  # the LoRA actor's module with its adapters off
            return workers.BasePolicy(self.workers[spec.alias_of])

        cls = {"policy": workers.PolicyWorker, "critic": workers.CriticWorker,
               "reward_model": workers.RewardModelWorker, "judge": workers.JudgeWorker,
               "rollout": workers.RolloutWorker}[spec.worker]
        try:
            # a rollout engine may honour seeds only in a mode of its own (SGLang): train.deterministic turns it on
            kwargs = {"deterministic": spec.deterministic} if spec.worker in ("rollout", "judge") else {}
            return cls(spec.model_path, spec.settings, seed=spec.seed, device=self.device(), **kwargs)
        except Exception as err:  # a checkpoint's file that cannot be read: named, with what to delete
            from rlgraph.runtime.checkpoint import damaged_load

            if (damaged := damaged_load(spec.model_path, err)) is not None:
                raise damaged from None
            raise

    # --- devices: Ray shows a process its bundle's GPUs; one hosting a tp replica is shown its span's too ---

    def gpu_ids(self) -> list[str]:
        """The GPUs Ray gave this process (their ids on the node), before `setup`."""
        import ray

        return [str(i) for i in ray.get_gpu_ids()]

    def see_devices(self, gpu_ids: list[str]) -> None:
        """Show this process these GPUs (node ids, its own first), before anything touches CUDA: a replica it
        hosts spans devices of other processes (a colocated rollout with tp > 1, in its first device's process);
        none for a process of a cpu pool (Ray leaves a process without GPUs all of the node's in view)."""
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)

    def device(self) -> str | None:
        """The device its workers use: its own GPU (the first Ray gave it, in this process's numbering); the CPU
        for a process Ray gave no GPU (a cpu pool's, even on a GPU node: never the workers' default, which is a
        GPU wherever torch sees one); None outside a Ray actor (a unit test: the workers' default)."""
        try:
            import ray

            # is_initialized first: get_runtime_context would start a Ray instance of its own in a plain process
            if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:  # not lowered
                return None
            gpu_ids = ray.get_gpu_ids()
        except Exception:  # not under Ray (a unit test)
            return None
        return f"cuda:{visible_device_index(gpu_ids, os.environ.get('CUDA_VISIBLE_DEVICES'))}" if gpu_ids else "cpu"

    def devices(self) -> dict[str, Any]:
        """What this process sees and uses, read without touching CUDA."""
        return {"process": self.process_id, "gpu_ids": self.gpu_ids(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": self.device()}

    def where(self) -> dict[str, Any]:
        """Where this process runs, recorded from inside at setup: the Ray node id and placement group id
        (from Ray's runtime context), the node IP; and the plan's node and the bundle index the process was
        scheduled on (Ray does not expose a bundle index to the actor itself)."""
        return {"process": self.process_id, "node": self.node, "bundle": self.bundle, "node_ip": self.node_ip,
                "pid": os.getpid(), **self.placement}

    # --- data parallel: replicas of trained roles average their gradients (workers/optim.py) ---

    def node_address(self) -> str:
        """This node's IP (Ray's), before `setup`: where the groups it joins may listen (workers/rendezvous.py)."""
        return _node_ip()

    def open_data_parallel_store(self, host: str, world_size: int, timeout_s: float) -> int:
        """Rank 0 of the data-parallel group (before `setup`): its store, listening on `host` from now on, on a port
        the system picks; the port, for the other ranks. (A port found free and bound only later may be taken in
        between by another process: EADDRINUSE under load, as the weight-sync group's store avoids too.)"""
        from rlgraph.workers import rendezvous

        self.data_parallel_store = rendezvous.listen_store(host, 0, world_size, timeout_s)
        return self.data_parallel_store.port

    def init_data_parallel(self, backend: str, master_addr: str, master_port: int, rank: int, world_size: int,
                           local_rank: int, rendezvous_timeout_s: float, collective_timeout_s: float) -> None:
        """Join the torch.distributed group of this process's trained role replicas, before the workers are built
        (a worker that will be sharded then builds its model empty: workers/fsdp.py).

        As verl's workers do, MASTER_ADDR/MASTER_PORT (replica 0's node), RANK, WORLD_SIZE and LOCAL_RANK are set
        in the environment. On a GPU, Ray shows the actor only its own device(s), so LOCAL_RANK and the current
        device are its index among those (`visible_device_index`: 0 for one GPU), not its index on the node;
        `local_rank` (the plan's device on the node) is kept on the CPU. The rendezvous waits
        `rendezvous_timeout_s` for the other ranks; each collective afterwards `collective_timeout_s` (a
        generation or a checkpoint write on one rank may keep the others waiting for minutes).
        """
        import datetime

        import torch.distributed as dist

        from rlgraph.workers import rendezvous

        role = next((h.spec.role for h in self.hosted.values() if h.spec.kind in ("actor", "critic")), "?")
        with self._reporting(role, f"joining its data-parallel group ({backend}, {master_addr}:{master_port})"):
            if backend == "nccl":
                import ray
                import torch

                local_rank = visible_device_index(ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"))
                torch.cuda.set_device(local_rank)  # before the group: nccl binds its communicator to it
            os.environ.update({"MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port), "RANK": str(rank),
                               "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(local_rank)})
            for key, value in rendezvous.socket_env(master_addr).items():  # gloo's and nccl's own sockets
                os.environ.setdefault(key, value)  # the user's choice of interface stands
            timeout = datetime.timedelta(seconds=rendezvous_timeout_s)
            if rank == 0:  # its store, opened by open_data_parallel_store (or here, on the port given)
                store = self.data_parallel_store or rendezvous.listen_store(master_addr, master_port, world_size,
                                                                            rendezvous_timeout_s)
                self.data_parallel_store = None
            else:
                store = dist.TCPStore(master_addr, master_port, world_size, is_master=False, timeout=timeout)
            # every rank waits the rendezvous timeout, not the collectives', for the others to come
            store.set(f"rlgraph/joined/{rank}", "1")
            store.wait([f"rlgraph/joined/{r}" for r in range(world_size)], timeout)
            # on GPUs a gloo backend for CPU tensors beside nccl: FSDP2's CPU offload (param_offload) reduces
            # the gradient norm, gathers for weight sync and checkpoints on host-resident shards
            dist.init_process_group("cpu:gloo,cuda:nccl" if backend == "nccl" else backend, store=store, rank=rank,
                                    world_size=world_size, timeout=datetime.timedelta(seconds=collective_timeout_s))

    def shard(self) -> list[str]:
        """Shard the models of the hosted roles with strategy = fsdp over the group just joined; their names."""
        from rlgraph.workers import fsdp

        sharded = []
        for role, worker in self.workers.items():
            if self.hosted[role].spec.alias_of is None and fsdp.will_shard(self.hosted[role].spec.strategy):
                with self._reporting(role, "sharding its model (strategy = fsdp)"):
                    worker.shard()
                    sharded.append(role)
        return sharded

    def data_parallel_info(self) -> dict[str, Any]:
        """The torch.distributed group this process is in (empty when it is in none), with its collective timeout."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return {}
        backend = dist.get_backend()
        backend = "nccl" if "nccl" in backend else backend  # `cpu:gloo,cuda:nccl` on GPUs: the devices' backend
        timeout_s = None
        with contextlib.suppress(Exception):  # torch keeps a group's timeout in private fields
            group = dist.distributed_c10d._get_default_group()
            options = group._get_backend(torch.device("cuda" if backend == "nccl" else "cpu")).options
            timeout_s = options._timeout.total_seconds()
        return {"backend": backend, "rank": dist.get_rank(), "world_size": dist.get_world_size(),
                "timeout_s": timeout_s,
                **{k.lower(): os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}}

    # --- the one entry point for role calls ---

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """`method` of `role`'s worker; returns (result, seconds it took in this process)."""
        from rlgraph.workers.host import to_host

        with self._reporting(role, f"`{role}.{method}`"):
            start = time.perf_counter()
            result = getattr(self.workers[role], method)(*args, **kwargs)
            return to_host(result), time.perf_counter() - start  # results cross Ray: CPU tensors only

    def call_many(self, calls: list[tuple[str, str, list[int], dict]], *args: Any) -> tuple[Any, ...]:
        """Several `call`s in one actor task, in order: `calls` holds (role, method, the places of its
        arguments in `args`, kwargs). Returns result_1, seconds_1, result_2, seconds_2, ..."""
        out: list[Any] = []
        for role, method, places, kwargs in calls:
            out += self.call(role, method, *[args[i] for i in places], **kwargs)
        return tuple(out)

    # --- weight sync to a rollout in other processes, over a group of its own (rlgraph/runtime/weight_sync.py) ---

    def open_weight_sync_store(self, role: str, edge: str, host: str, world_size: int, timeout_s: float) -> int:
        """Rank 0 of `edge`'s group (the source's replica 0): open its store on `host` (this node's IP, or
        loopback for a group on one machine); the port."""
        from rlgraph.workers import weight_sync

        with self._reporting(role, f"opening the weight-sync group `{edge}`"):
            store = weight_sync.open_store(host, world_size, timeout_s)
            self.sync_groups[edge] = store
            return store.port

    def join_weight_sync(self, role: str, edge: str, host: str, port: int, rank: int, world_size: int, backend: str,
                         rendezvous_timeout_s: float, collective_timeout_s: float, engine_group: bool = False,
                         as_bytes: bool = True) -> None:
        """Join `edge`'s group as `rank`. `engine_group` (rank 0 only): the other ranks are a rollout engine's own
        processes, which get only the buckets (as bytes or, `as_bytes` False, in their dtype)."""
        from rlgraph.workers import weight_sync

        with self._reporting(role, f"joining the weight-sync group `{edge}` ({backend}, {host}:{port}, rank {rank})"):
            store = self.sync_groups.pop(edge, None) if rank == 0 else None
            if engine_group:
                group = weight_sync.open_engine_group(store, world_size, backend, group_name=edge,
                                                      collective_timeout_s=collective_timeout_s)
                self.engine_sync_edges[edge] = as_bytes
            else:
                group = weight_sync.open_group(host, port, rank, world_size, backend, store=store,
                                               own_ip=self.node_ip if self.node_ip != "?" else host,
                                               rendezvous_timeout_s=rendezvous_timeout_s,
                                               collective_timeout_s=collective_timeout_s)
            self.sync_groups[edge] = (group, backend)

    def engine_group_receiver(self, role: str) -> dict[str, Any] | None:
        """How `role`'s engine takes a sync in its own processes (SGLangEngine.group_receiver); None: it cannot."""
        with self._reporting(role, "asking its engine how it receives weights"):
            engine = getattr(self.workers[role], "engine", None)
            return engine.group_receiver() if hasattr(engine, "group_receiver") else None

    def join_engine_weight_sync(self, role: str, edge: str, host: str, port: int, rank_offset: int,
                                world_size: int) -> None:
        """`role`'s engine's own processes join `edge`'s group as ranks rank_offset.. (its schedulers)."""
        with self._reporting(role, f"joining its engine to the weight-sync group `{edge}` ({host}:{port}, ranks "
                                   f"from {rank_offset})"):
            self.workers[role].engine.join_sync_group(host, port, rank_offset, world_size, edge)

    def weight_sync_layout(self, role: str, bucket_bytes: int | None = None, dtype: str | None = None) -> bytes:
        """The buckets a sync of `role`'s weights sends (names, shapes, dtype), for receivers that get no header."""
        from rlgraph.workers import weight_sync

        with self._reporting(role, "listing the buckets of its weights"):
            return weight_sync.encoded_layout(self.workers[role].module, bucket_bytes or weight_sync.BUCKET_BYTES,
                                              dtype)

    def receive_weights_in_engine(self, role: str, edge: str, layout: bytes) -> float:
        """Have `role`'s engine take each bucket of `layout` over `edge`'s group in its own processes; the
        seconds it took, from the call's start (the wait for the sender included)."""
        from rlgraph.workers import weight_sync

        start = time.perf_counter()
        with self._reporting(role, f"receiving weights over `{edge}` in its engine's processes"):
            engine = self.workers[role].engine
            for bucket in weight_sync.decoded_layout(layout):
                engine.receive_bucket(bucket.names, str(bucket.dtype).removeprefix("torch."), bucket.shapes, edge)
        return time.perf_counter() - start

    def send_weights(self, role: str, edge: str | None, bucket_bytes: int | None = None,
                     dtype: str | None = None) -> int:
        """Stream `role`'s weights to `edge`'s rollouts, the parameters in `dtype` (the rollout's); bytes sent.
        `edge` None: a rank of a sharded source outside the group, which only takes part in the gathers."""
        from rlgraph.workers import weight_sync

        with self._reporting(role, f"sending its weights over `{edge}`" if edge else "gathering its weights"):
            group, backend = self.sync_groups[edge] if edge else (None, "gloo")
            as_bytes = self.engine_sync_edges.get(edge, True)
            send = weight_sync.broadcaster(group, as_bytes=as_bytes) if group is not None else None
            return weight_sync.send_weights(self.workers[role].module, send, cap=bucket_bytes or weight_sync.BUCKET_BYTES,
                                            device=weight_sync.transport_device(backend), dtype=dtype,
                                            header=edge not in self.engine_sync_edges)

    def receive_weights(self, role: str, edge: str) -> float:
        """Load the weights streamed over `edge` into `role`'s rollout, bucket by bucket; the seconds it took,
        from the call's start: the wait for the sender (its update, in asynchronous training) and the transfer."""
        from rlgraph.workers import weight_sync

        start = time.perf_counter()
        with self._reporting(role, f"receiving weights over `{edge}`"):
            group, backend = self.sync_groups[edge]
            worker = self.workers[role]
            weight_sync.receive_weights(weight_sync.broadcaster(group), worker.load_weights,
                                        device=weight_sync.transport_device(backend),
                                        keep_buckets=worker.capabilities.reads_weights_later)
        return time.perf_counter() - start

    def sync_in_process(self, source: str, target: str | None, bucket_bytes: int | None = None,
                        dtype: str | None = None) -> float:
        """Hand `source`'s weights to `target`'s rollout in this process, bucket by bucket on this process's device,
        the parameters in `dtype` (the rollout's); the seconds it took. `target` None: a rank of a sharded source
        without a rollout replica, which only takes part in the gathers (rlgraph/runtime/weight_sync.py)."""
        from rlgraph.workers import weight_sync

        start = time.perf_counter()
        with self._reporting(target or source, f"loading `{source}`'s weights in its process" if target
                             else "gathering its weights"):
            rollout = self.workers[target] if target is not None else None
            weight_sync.load_in_process(
                self.workers[source].module, rollout.load_weights if rollout is not None else None,
                device=weight_sync.local_device(), cap=bucket_bytes or weight_sync.BUCKET_BYTES, dtype=dtype,
                keep_buckets=rollout is not None and rollout.capabilities.reads_weights_later)
        return time.perf_counter() - start

    # --- the whole step in this process (every role of the plan lives here: rlgraph/runtime/step.py) ---

    def prepare_local_step(self, plan: Any, rewards: dict[str, Any], time_shared: list[str] = ()) -> None:
        from rlgraph.contract.rollouts import filter_call
        from rlgraph.runtime.step import InProcessRoles, StepRunner
        from rlgraph.runtime.time_share import TimeShare
        from rlgraph.runtime.transforms import DriverCalls

        with self._reporting(next(iter(self.hosted)), "preparing to run whole steps in its process"):
            if filter_call(plan.calls) is not None:
                raise ValueError("a step with filter_groups draws more prompts while it runs: the driver runs it")
            roles = InProcessRoles(self.call)
            self.local_calls = DriverCalls(plan, rewards)
            self.local_step = StepRunner(plan, roles, self.local_calls, TimeShare(roles, time_shared))

    def run_step(self, step: int, prompts: list[dict], version: int,
                 kl_state: dict[str, float]) -> tuple[Any, dict[str, float]]:
        """One whole step (rlgraph/runtime/step.py); the adaptive KL coefficients come in and go out."""
        self.local_calls.load_state_dict(kl_state)
        return self.local_step.run(step, prompts, version), self.local_calls.state_dict()

    # --- checkpoints ---

    def save(self, role: str, model_dir: str, optimizer_file: str | None) -> None:
        """The role's weights as an HF folder; its optimizer + LR-scheduler state to `optimizer_file`."""
        import torch

        from rlgraph.runtime.checkpoint import writing  # an I/O error: a CheckpointError naming the file

        with self._reporting(role, f"saving a checkpoint to {model_dir}"):
            worker = self.workers[role]
            # A sharded worker gathers in both calls (same order on every rank) and hands rank 0 the state.
            state = worker.optimizer_state() if optimizer_file and getattr(worker, "optim", None) else None
            with writing(model_dir):
                worker.save(model_dir)
            if state:
                # through a Python file: torch's own writer fails with "basic_ios::clear", no cause
                with writing(optimizer_file):
                    Path(optimizer_file).parent.mkdir(parents=True, exist_ok=True)
                    with open(optimizer_file, "wb") as f:
                        torch.save(state, f)

    def load_optimizer(self, role: str, optimizer_file: str) -> None:
        """Onto the CPU first, whatever device wrote it (the optimizer moves each tensor to its parameter's);
        memory-mapped, so pages are read as they are used. Sharded, rank 0 alone reads the file and sends
        every rank its shards (workers/fsdp.py `load_optimizer_state`); the others pass None."""
        import torch

        from rlgraph.runtime.checkpoint import unreadable
        from rlgraph.workers import fsdp

        with self._reporting(role, f"loading the optimizer state from {optimizer_file}"):
            worker = self.workers[role]
            state = None
            if not getattr(worker, "sharded", False) or fsdp.rank() == 0:
                # checkpoint files are written whole and renamed, never rewritten in place: the mapping stays valid
                try:
                    state = torch.load(optimizer_file, map_location="cpu", mmap=True, weights_only=True)
                except Exception as err:  # damaged after the resume verified it: the file and what to do
                    raise unreadable(optimizer_file, err) from None
            worker.load_optimizer_state(state)

    def rng_state(self) -> dict[str, Any]:
        return rng_state()

    def set_rng_state(self, state: dict[str, Any]) -> None:
        set_rng_state(state)

    # --- errors ---

    def _reporting(self, role: str, action: str) -> "_Reporting":
        hosted = self.hosted.get(role)
        return _Reporting(role, hosted.replica if hosted else -1, f"{self.node} ({self.node_ip})", self.process_id, action)


class _Reporting:
    """Turns any exception in the block into a WorkerError carrying the worker's traceback."""

    def __init__(self, role: str, replica: int, node: str, process: str, action: str) -> None:
        self.where = (role, replica, node, process, action)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or isinstance(exc, (WorkerError, CheckpointError)):  # already say what and where
            return False
        if isinstance(exc, EnvError):  # names the environment, the sample and its own traceback
            raise EnvironmentFailedError(str(exc)) from None
        if isinstance(exc, ChildKilled):  # an environment's or reward's process: recovered from as this one's death
            role, replica, node, process, action = self.where
            raise ProcessDiedError(f"role `{role}` (replica {replica}, node {node}) could not finish {action}: {exc}.",
                                   died=str(exc)) from None
        if isinstance(exc, JudgeVerdictError):  # names the row and its verdict: the spec's error, not rlgraph's
            raise RunError(f"judge `{self.where[0]}` failed in {self.where[4]}: {exc}") from None
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        raise WorkerError(*self.where, f"{exc_type.__name__}: {exc}", text) from None


def visible_device_index(gpu_ids: list[Any], cuda_visible_devices: str | None) -> int:
    """The index, in this process's numbering (cuda:<index>), of the first GPU that Ray gave it.

    Ray sets CUDA_VISIBLE_DEVICES to the actor's own GPU ids, so its first GPU is cuda:0 whatever its index on
    the node; where Ray leaves CUDA_VISIBLE_DEVICES alone (unset, or RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES),
    it is the id within what the process sees."""
    if not gpu_ids:
        raise RuntimeError("this process has no GPU from Ray, but its data-parallel group uses nccl: "
                           "give the pool `device = gpu` and one GPU per bundle")
    first = str(gpu_ids[0])
    visible = [d.strip() for d in (cuda_visible_devices or "").split(",") if d.strip()]
    if not visible:
        return int(first)
    if first not in visible:
        raise RuntimeError(f"Ray gave this process GPU {first}, which is not in CUDA_VISIBLE_DEVICES "
                           f"({cuda_visible_devices}); do not set CUDA_VISIBLE_DEVICES inside the workers")
    return visible.index(first)


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # not under Ray (a unit test)
        return "127.0.0.1"


def _ray_placement() -> dict[str, Any]:
    """The Ray node id and placement group id of the calling actor, from Ray's runtime context."""
    import ray

    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "placement_group": context.get_placement_group_id(),
            "resources": context.get_assigned_resources()}


# --- RNG state as plain data (torch.load(weights_only=True) reads it back) ---


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
    }
    if torch.cuda.is_initialized():
        # the current device's only: get_rng_state_all would open a context on every GPU the process sees. A
        # process that has not used CUDA (the driver, a cpu pool's, on a GPU node) has no state there to keep, and
        # asking would open a context on its first visible GPU, another process's
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    python = state["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state({
        "bit_generator": numpy["bit_generator"],
        "state": {"key": numpy["key"].numpy().astype(np.uint32), "pos": numpy["pos"]},
        "has_gauss": numpy["has_gauss"],
        "gauss": numpy["gauss"],
    })
    if "cuda" in state and torch.cuda.is_initialized():  # as it was saved: by a process that used CUDA
        cuda = state["cuda"]  # a list (every visible GPU's) in checkpoints of earlier versions: the first is ours
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, list) else cuda)
