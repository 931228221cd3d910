"""One process per device, hosting every role placed on it (verl's hybrid engine).

`DeviceProcess` is a plain class; `lowering.py` turns it into a Ray actor pinned to one bundle of a
placement group. Colocated roles are built side by side in it: a rollout that shares the process of
the policy that syncs into it generates with that policy's module, so its weight sync is free.

Every method that runs worker code catches the worker's exception and raises a `WorkerError`
naming the role, replica, node and process, with the worker's own traceback.
"""

from __future__ import annotations

import os
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlgraph.runtime.errors import WorkerError
from rlgraph.runtime.roles import ALIAS, WorkerSpec


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
        self.node_ip = "?"
        self.bundle = bundle  # the placement group bundle it was scheduled on (Ray does not tell an actor)
        self.placement: dict[str, Any] = {}  # where Ray really put this process (see `where`)

    # --- life cycle ---

    def setup(self) -> dict[str, Any]:
        """Build the workers (policies and critics first, then rollouts that alias them)."""
        import torch

        torch.set_num_threads(self.num_threads)
        try:
            import ray

            self.node_ip = ray.util.get_node_ip_address()
            self.placement = _ray_placement()
        except Exception:  # not under Ray (a unit test): the node index is enough
            pass
        ordered = sorted(self.hosted.values(), key=lambda h: h.spec.worker == ALIAS)
        for hosted in ordered:
            with self._reporting(hosted.spec.role, "building its worker"):
                self.workers[hosted.spec.role] = self._build(hosted.spec)
        return {"process": self.process_id, "node_ip": self.node_ip, "pid": os.getpid()}

    def _build(self, spec: WorkerSpec) -> Any:
        """The role's worker, from its resolved settings (rlgraph.contract.settings)."""
        if spec.worker == ALIAS:
            return self.workers[spec.alias_of]
        import rlgraph.workers as workers

        cls = {"policy": workers.PolicyWorker, "critic": workers.CriticWorker,
               "reward_model": workers.RewardModelWorker, "rollout": workers.RolloutWorker}[spec.worker]
        return cls(spec.model_path, spec.settings, seed=spec.seed)

    def where(self) -> dict[str, Any]:
        """Where this process runs, recorded from inside at setup: the Ray node id and placement group id
        (from Ray's runtime context), the node IP; and the plan's node and the bundle index the process was
        scheduled on (Ray does not expose a bundle index to the actor itself)."""
        return {"process": self.process_id, "node": self.node, "bundle": self.bundle, "node_ip": self.node_ip,
                "pid": os.getpid(), **self.placement}

    # --- data parallel: replicas of trained roles average their gradients (workers/optim.py) ---

    def free_port(self) -> int:
        """A free TCP port on this node, for the data-parallel group's rendezvous."""
        import socket

        with socket.socket() as sock:
            sock.bind((self.node_ip if self.node_ip != "?" else "127.0.0.1", 0))
            return sock.getsockname()[1]

    def init_data_parallel(self, backend: str, master_addr: str, master_port: int, rank: int, world_size: int,
                           local_rank: int, timeout_s: float) -> None:
        """Join the torch.distributed group of this process's trained role replicas.

        As verl's workers do, the group comes from the environment: MASTER_ADDR/MASTER_PORT (replica 0's
        node), RANK, WORLD_SIZE and LOCAL_RANK are set here, then `init_method="env://"` reads them.
        """
        import datetime

        import torch.distributed as dist

        role = next((h.spec.role for h in self.hosted.values() if h.spec.kind in ("actor", "critic")), "?")
        env = {"MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port), "RANK": str(rank),
               "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(local_rank)}
        with self._reporting(role, f"joining its data-parallel group ({backend}, {master_addr}:{master_port})"):
            os.environ.update(env)
            dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))

    def shard(self) -> list[str]:
        """Shard the models of the hosted roles with strategy = fsdp over the group just joined; their names."""
        from rlgraph.workers import fsdp

        sharded = []
        for role, worker in self.workers.items():
            if self.hosted[role].spec.worker != ALIAS and self.hosted[role].spec.strategy == "fsdp":
                with self._reporting(role, "sharding its model (strategy = fsdp)"):
                    if fsdp.world_size() > 1:
                        worker.shard()
                        sharded.append(role)
        return sharded

    def data_parallel_info(self) -> dict[str, Any]:
        """The torch.distributed group this process is in (empty when it is in none)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return {}
        return {"backend": dist.get_backend(), "rank": dist.get_rank(), "world_size": dist.get_world_size(),
                **{k.lower(): os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}}

    # --- the one entry point for role calls ---

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """`method` of `role`'s worker; returns (result, seconds it took in this process)."""
        with self._reporting(role, f"`{role}.{method}`"):
            start = time.perf_counter()
            result = getattr(self.workers[role], method)(*args, **kwargs)
            return result, time.perf_counter() - start

    def call_many(self, calls: list[tuple[str, str, list[int], dict]], *args: Any) -> tuple[Any, ...]:
        """Several `call`s in one actor task, in order: `calls` holds (role, method, the places of its
        arguments in `args`, kwargs). Returns result_1, seconds_1, result_2, seconds_2, ..."""
        out: list[Any] = []
        for role, method, places, kwargs in calls:
            out += self.call(role, method, *[args[i] for i in places], **kwargs)
        return tuple(out)

    # --- the whole step in this process (every role of the plan lives here: rlgraph/runtime/step.py) ---

    def prepare_local_step(self, plan: Any, rewards: dict[str, Any]) -> None:
        from rlgraph.runtime.step import LocalStep
        from rlgraph.runtime.transforms import DriverCalls

        with self._reporting(next(iter(self.hosted)), "preparing to run whole steps in its process"):
            self.local_step = LocalStep(plan, self.call, DriverCalls(plan, rewards))

    def run_step(self, step: int, prompts: list[dict], kl_state: dict[str, float]) -> tuple[Any, dict[str, float]]:
        return self.local_step.run(step, prompts, kl_state)

    # --- checkpoints ---

    def save(self, role: str, model_dir: str, optimizer_file: str | None) -> None:
        """The role's weights as an HF folder; its optimizer + LR-scheduler state to `optimizer_file`."""
        import torch

        with self._reporting(role, f"saving a checkpoint to {model_dir}"):
            worker = self.workers[role]
            # A sharded worker gathers in both calls (same order on every rank) and hands rank 0 the state.
            state = worker.optimizer_state() if optimizer_file and getattr(worker, "optim", None) else None
            worker.save(model_dir)
            if state:
                Path(optimizer_file).parent.mkdir(parents=True, exist_ok=True)
                torch.save(state, optimizer_file)

    def load_optimizer(self, role: str, optimizer_file: str) -> None:
        import torch

        with self._reporting(role, f"loading the optimizer state from {optimizer_file}"):
            self.workers[role].load_optimizer_state(torch.load(optimizer_file, weights_only=True))

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
        if exc is None or isinstance(exc, WorkerError):
            return False
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        raise WorkerError(*self.where, f"{exc_type.__name__}: {exc}", text) from None


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
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
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
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
