"""Ray start-up: connect to a cluster, or start (and at the end stop) a private local instance.

Three cases, in this order:

1. this process is already connected (`ray.is_initialized()`, e.g. a test session): use that
   connection, start nothing, stop nothing;
2. an address (`--address`, else `RAY_ADDRESS`): connect; start nothing; at the end disconnect,
   having stopped only our own actors and placement groups (the runtime does that);
3. otherwise start a local instance sized for the plan, private to this run: bound to 127.0.0.1,
   no dashboard, no runtime_env, worker logs kept out of the console; stop it at the end.

Never `ray stop`: other people's Ray instances on the same machine are theirs.

A local instance can die under the run: a signal to the process group (a scheduler's or a container's stop)
reaches Ray's GCS and raylet too. Every call to a dead GCS waits 60 s and then aborts the process, so the end
of such a run calls none (`Cluster.alive`): it kills what is left of the instance and leaves `RAY_LEFT_DEAD`
set, and `rlgraph` then ends its process without Ray's exit hooks (cli.main). (A Python caller's process keeps
a Ray connection to nothing: Ray ends that process a minute later.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
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

# Ray starts its workers at nice 15 so that its own servers stay responsive; a run's workers are where all of its
# training and generation happen, and at nice 15 any other busy process on the machine (a build, a browser,
# another run) takes nearly all the CPU from them (the kernel weighs nice 15 at 36 against 1,024 for nice 0:
# beside two busy loops on 2 cores a test run made no progress for minutes). At the driver's priority they share.
WORKER_NICENESS = 0

# Two of Ray's waits that a local instance need not pay (measured: docs/benchmarks.md, start-up):
# - Ray starts its idle workers when the first driver registers, the end of ray.init; started with the raylet
#   instead, they import WORKER_IMPORTS about 0.6 s sooner, while ray.init still polls for its node.
# - the raylet connects to its own object store as soon as it starts the store's thread; when the store's socket is
#   not bound yet it retries after the connect timeout, 1 s by default, in about half the starts here. 50 ms tries,
#   as many times more, keep the whole wait (10 s) that a worker connecting to a loaded raylet also gets.
STARTUP_CONFIG = {"enable_worker_prestart": True,
                   "raylet_client_connect_timeout_milliseconds": 50, "raylet_client_num_connect_attempts": 200}


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


# Set when a local instance this process started died under it: no call may go to Ray any more (see the doc).
RAY_LEFT_DEAD = threading.Event()
_RAY_CORE = ("gcs_server", "raylet")  # ray_constants.PROCESS_TYPE_*: without either the instance is gone


@dataclass
class Cluster:
    mode: str  # "attached" (already connected) | "remote" (connected to an address) | "local" (started here)
    address: str

    @property
    def started_here(self) -> bool:
        return self.mode == "local"

    def alive(self) -> bool:
        """False when the local instance started here has lost its GCS or raylet; calls to it would hang.
        An instance not started here is taken as alive: its processes are not this one's to watch."""
        if not self.started_here or RAY_LEFT_DEAD.is_set():
            return not RAY_LEFT_DEAD.is_set()
        node = _local_node()
        if node is not None and any(info.process.poll() is not None for kind in _RAY_CORE
                                    for info in node.all_processes.get(kind, [])):
            return False
        # a GCS that got SIGTERM closes its port at once but its process lingers: ask the port
        host, _, port = self.address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except (OSError, ValueError):
            return False
        return True


@contextlib.contextmanager
def ray_cluster(plan: Plan, address: str | None = None, *, quiet: bool = True) -> Iterator[Cluster]:
    """A Ray connection for the run; see the module doc for which one."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if _ray_initialized():
        import ray

        yield Cluster("attached", ray.get_runtime_context().gcs_address)
        return
    from rlgraph.runtime import watchdog as watchdogs

    watchdog = None
    if address:
        cluster = _connect(address, quiet)
    else:
        if sys.platform.startswith("linux"):
            # before Ray starts: it cleans up an instance whose driver is killed outright, even during ray.init
            watchdog = watchdogs.start()
        # a start that fails or is stopped keeps its watchdog: once this process ends, it kills what is left
        cluster = _start_local(Resources.of(plan), quiet)
    try:
        yield cluster
    finally:
        import ray

        if cluster.alive():
            ray.shutdown()  # for "remote" this only disconnects; for "local" it stops what we started
            watchdogs.stop(watchdog)
        else:  # the watchdog stays, for the workers of a raylet already gone (no longer below a node process)
            RAY_LEFT_DEAD.set()
            _kill_node()


def _local_node():
    """The Ray node (its processes) this process started, or None."""
    worker = sys.modules.get("ray._private.worker")
    return getattr(worker, "_global_node", None) if worker is not None else None


def _kill_node() -> None:
    """SIGKILL the processes of the local node this process started, and theirs (the raylet's workers),
    without a call to Ray: for an instance whose GCS or raylet died, or whose start failed."""
    from rlgraph.runtime.watchdog import descendants

    node = _local_node()
    if node is None:
        return
    pids: set[int] = set()
    for infos in list(node.all_processes.values()):
        for info in infos:
            if info.process.poll() is None:
                pids.add(info.process.pid)
                pids.update(descendants(info.process.pid))
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        node.kill_all_processes(check_alive=False, allow_graceful=False)  # reaps them


@contextlib.contextmanager
def keeping_signal_handlers() -> Iterator[None]:
    """Around ray.init: the SIGTERM and SIGINT handlers stay the caller's (rlgraph's StopRequest). ray.init
    sets its own SIGTERM handler (sys.exit(15): exit code 15, no message) through
    ray._private.utils.set_sigterm_handler, and its C++ core one that prints a stack dump; the first is
    skipped, the second replaced again once ray.init returns."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    from ray._private import utils as ray_utils

    set_sigterm_handler = ray_utils.set_sigterm_handler
    if callable(handlers[signal.SIGTERM]):  # someone owns SIGTERM: keep it theirs
        ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = set_sigterm_handler
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _stop_partial_start() -> None:
    """Stop the processes of a ray.init that failed or was interrupted: ray.shutdown when its GCS and raylet
    are up, else (or if ray.init stopped before it knew its node) kill them without a call to Ray."""
    import ray

    node = _local_node()
    with contextlib.suppress(Exception):
        if node is not None and Cluster("local", getattr(node, "gcs_address", None) or "").alive():
            ray.shutdown()
    _kill_node()  # ray.init stopped before it connected: ray.shutdown does not know the node


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
        with keeping_signal_handlers():
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
                _system_config={"preload_python_modules": list(WORKER_IMPORTS), "num_workers_soft_limit": cpus,
                                "worker_niceness": WORKER_NICENESS, **STARTUP_CONFIG},
            )
    except BaseException as err:  # ports taken, /dev/shm too small, a broken ray install; a signal
        _stop_partial_start()  # what ray.init started before it failed or was stopped
        if not isinstance(err, Exception):
            raise
        from rlgraph.runtime.errors import RunError

        raise RunError(f"could not start a local Ray instance: {type(err).__name__}: {err}") from None
    return Cluster("local", context.address_info.get("gcs_address") or "local")
