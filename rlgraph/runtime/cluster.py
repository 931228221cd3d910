"""Ray start-up: connect to a cluster, or start (and at the end stop) a private local instance.

Three cases, in this order:

1. this process is already connected (`ray.is_initialized()`, e.g. a test session): use that
   connection, start nothing, stop nothing;
2. an address (`--address`, else `RAY_ADDRESS`): connect; start nothing; at the end disconnect,
   having stopped only our own actors and placement groups (the runtime does that);
3. otherwise start a local instance sized for the plan, private to this run: bound to 127.0.0.1,
   no dashboard, no runtime_env, worker logs kept out of the console; stop it at the end.

Never `ray stop`: other people's Ray instances on the same machine are theirs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from rlgraph.plan.model import Plan

# Ray binds its servers to the node's IP; with multi-node clusters "disabled" that IP is 127.0.0.1,
# so a local instance listens on the loopback interface only.
_LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# What a device process imports before it can build a worker (process.py, workers/loading.py): about 5 s
# of CPU, most of an actor's start. A local instance has its idle workers import these as soon as its node
# is up (Ray starts one per CPU: one per device of the plan), while the driver pre-flights; the run's
# processes are then placed on workers that are ready.
WORKER_IMPORTS = ("torch", "transformers", "transformers.models.auto.modeling_auto",
                  "transformers.models.auto.tokenization_auto", "rlgraph.runtime.process")


@dataclass(frozen=True)
class Resources:
    """What the plan's pools occupy in total."""

    cpus: int  # one per device of a cpu pool, plus one per gpu device (the process that drives it)
    gpus: int

    @classmethod
    def of(cls, plan: Plan) -> Resources:
        devices = {"cpu": 0, "gpu": 0}
        for pool in plan.pools:
            if any(p.pool == pool.name for p in plan.placements):
                devices[pool.device] += pool.nodes * pool.devices_per_node
        return cls(cpus=devices["cpu"] + devices["gpu"], gpus=devices["gpu"])


@dataclass
class Cluster:
    mode: str  # "attached" (already connected) | "remote" (connected to an address) | "local" (started here)
    address: str

    @property
    def started_here(self) -> bool:
        return self.mode == "local"


@contextlib.contextmanager
def ray_cluster(plan: Plan, address: str | None = None, *, quiet: bool = True) -> Iterator[Cluster]:
    """A Ray connection for the run; see the module doc for which one."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if _ray_initialized():
        import ray

        yield Cluster("attached", ray.get_runtime_context().gcs_address)
        return
    watchdog = None
    if address:
        cluster = _connect(address, quiet)
    else:
        cluster = _start_local(Resources.of(plan), quiet)
        if sys.platform.startswith("linux"):
            from rlgraph.runtime import watchdog as watchdogs

            watchdog = watchdogs.start()  # cleans up the instance if this process is killed outright
    try:
        yield cluster
    finally:
        import ray

        ray.shutdown()  # for "remote" this only disconnects; for "local" it stops what we started
        if watchdog is not None:
            from rlgraph.runtime import watchdog as watchdogs

            watchdogs.stop(watchdog)


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _connect(address: str, quiet: bool) -> Cluster:
    import ray

    try:
        context = ray.init(
            address=address,
            log_to_driver=False,  # a worker's failure reaches the console as a WorkerError, not as log spam
            logging_level=logging.ERROR if quiet else logging.INFO,
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        from rlgraph.runtime.errors import RunError

        raise RunError(
            f"cannot connect to the Ray cluster at {address!r}: {err}. Check the address (`ray status` on the "
            "head node prints it), or leave out --address and unset RAY_ADDRESS to train on this machine."
        ) from None
    return Cluster("remote", context.address_info.get("gcs_address") or address)


def local_only() -> None:
    """Make the next `ray.init` that starts an instance bind it to 127.0.0.1 (call before it)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ[_LOCAL_ONLY_ENV] = "0"
    if "ray" in sys.modules:  # imported before the variable was set: its constant is already computed
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False


def _start_local(needed: Resources, quiet: bool) -> Cluster:
    local_only()
    import ray

    cpus = max(needed.cpus, 1)
    try:
        context = ray.init(
            address="local",  # a new instance, even if another one runs on this machine
            num_cpus=cpus,  # Ray starts this many idle workers: one per device
            num_gpus=needed.gpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR if quiet else logging.INFO,
            runtime_env=None,
            # Ray keeps as many idle workers as CPUs no placement group holds: once the run's groups hold them
            # all it would stop the workers it started (and their imports) just before the processes start
            _system_config={"preload_python_modules": list(WORKER_IMPORTS), "num_workers_soft_limit": cpus},
        )
    except Exception as err:  # ports taken, /dev/shm too small, a broken ray install
        from rlgraph.runtime.errors import RunError

        raise RunError(f"could not start a local Ray instance: {type(err).__name__}: {err}") from None
    return Cluster("local", context.address_info.get("gcs_address") or "local")
