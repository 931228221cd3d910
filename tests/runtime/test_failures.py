"""A replica that raises or dies stops the run at once and cleanly: the error names the role, the
replica and the node; no wait on the replica's peers (blocked in their gradient all-reduce); every
actor and placement group released; the last checkpoint intact."""

from __future__ import annotations

import dataclasses
import time

import pytest
import ray

from rlgraph.runtime.errors import ProcessDiedError, WorkerError

from .faults import FaultyDeviceProcess
from .helpers import Started
from .plans import grpo_plan


def _quiet():
    from rlgraph.runtime.console import RunConsole

    return RunConsole(enabled=False)


def _all_cpus_free_again() -> bool:
    deadline = time.time() + 30
    while ray.available_resources().get("CPU") != ray.cluster_resources().get("CPU") and time.time() < deadline:
        time.sleep(0.5)
    return ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU")


def test_a_replica_that_raises_stops_the_run_and_keeps_the_last_checkpoint(ray_session, arith_model, tmp_path):
    from safetensors.torch import load_file

    from rlgraph.runtime import checkpoint as ckpt
    from rlgraph.runtime.loop import Trainer

    plan = grpo_plan(actor_replicas=2, steps=3)
    plan.train = dataclasses.replace(plan.train, checkpoint_every=1)
    with pytest.raises(WorkerError) as caught, Started(plan, process_class=FaultyDeviceProcess) as started:
        replica1 = started.lowered.process_of("actor", 1)
        ray.get(replica1.set_fault.remote("actor", "update", 1))  # step 1 updates, step 2 raises on replica 1
        trainer = Trainer(plan, started.lowered, started.specs, started.prepared, tmp_path, _quiet())
        t0 = time.perf_counter()
        try:
            trainer.fit(t0)
        finally:
            elapsed = time.perf_counter() - t0
    message = str(caught.value)
    assert "role `actor` (replica 1, node 0" in message and "process actor/1" in message
    assert "injected fault in actor.update" in message
    assert elapsed < 30  # not the 60 s gloo timeout of replica 0, waiting in its all-reduce
    assert _all_cpus_free_again()
    last = ckpt.latest_checkpoint(tmp_path)
    assert last is not None and last.step == 1
    assert load_file(last.model_dir("actor") / "model.safetensors")  # complete and readable


def test_a_killed_replica_is_named_and_the_run_stops(ray_session, arith_model, tmp_path):
    from rlgraph.runtime.loop import Trainer

    plan = grpo_plan(actor_replicas=2, steps=2)
    with pytest.raises(ProcessDiedError) as caught, Started(plan) as started:
        ray.kill(started.lowered.process_of("actor", 1), no_restart=True)
        Trainer(plan, started.lowered, started.specs, started.prepared, tmp_path, _quiet()).fit(time.perf_counter())
    message = str(caught.value)
    assert "process actor/1" in message and "`actor` replica 1" in message and "node 0" in message
    assert _all_cpus_free_again()
