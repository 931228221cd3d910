"""The step's weight sync: every sync edge, trained role -> rollout, at the start of each step.

verl syncs right after the update; this is the same thing seen from the next generate. A rollout that
generates with its source's module in place syncs for free; any other takes the path
`rlgraph.runtime.weight_sync.sync_path` chose: one with processes of its own gets the weights over the edge's
collective group, one colocated with its source in each process that hosts a replica of it, in buckets
either way; the driver only starts the calls and waits on them. Asynchronously (train.staleness > 0) it only
starts them: the rollout loads them after the batch it is generating, and the step that generates next waits on
them with its batch (`started`, `InFlight.weights`). Which version the rollouts hold: rlgraph/runtime/versions.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from rlgraph.plan.model import Plan
from rlgraph.runtime.driver import ray_errors, wait_fail_fast
from rlgraph.runtime.lowering import Lowered
from rlgraph.runtime.roles import WorkerSpec
from rlgraph.runtime.versions import PolicyVersions
from rlgraph.runtime.weight_sync import start_sync


class WeightSync:
    def __init__(self, plan: Plan, lowered: Lowered, specs: dict[str, WorkerSpec], versions: PolicyVersions) -> None:
        self.plan, self.lowered, self.specs, self.versions = plan, lowered, specs, versions
        self.refs: list[tuple[list[Any], list[Any]]] = []  # syncs started, not yet waited on: (every ref, receives)

    def sync(self, wait: bool = True) -> float:
        """Every sync edge; seconds spent (0 for an in-place rollout, or when the rollouts already hold the
        weights of the latest update: validation syncs before the next step does). `wait` False: only started."""
        if self.versions.in_sync:
            return 0.0
        self.versions.synced()
        start = time.perf_counter()
        copies = [(source, target) for source, target in self.plan.syncs if self.specs[target].worker != "alias"]
        if not copies:
            return 0.0  # every rollout generates with its source's own module: nothing moves
        for source, target in copies:
            with ray_errors(self.lowered.actor_names):
                edge = self.lowered.sync_edges.get((source, target))
                if edge is not None:
                    refs = start_sync(self.lowered, edge)
                    # the rollout's side of the sync: how long it waited for the weights and loaded them
                    self.refs.append((refs, refs[-edge.receivers:]))
                else:
                    self.through_object_store(source, target)
        if wait:
            self.wait()
        return time.perf_counter() - start

    def started(self) -> Callable[[], float] | None:
        """The syncs started so far and not waited on, handed to the step that generates next (they go before its
        generate: a process runs its calls in the order they were sent): a call that waits for them and returns the
        longest seconds a rollout spent on one; None when there are none."""
        refs, self.refs = self.refs, []
        return (lambda: self._wait(refs)) if refs else None

    def wait(self) -> float:
        """Wait for the syncs started so far; the longest seconds a rollout process spent in one."""
        refs, self.refs = self.refs, []
        return self._wait(refs)

    def _wait(self, refs: list[tuple[list[Any], list[Any]]]) -> float:
        with ray_errors(self.lowered.actor_names):
            wait_fail_fast([r for every, _ in refs for r in every])
            return max((float(ray.get(r)) for _, receives in refs for r in receives), default=0.0)

    def through_object_store(self, source: str, target: str) -> None:
        """The whole state dict through Ray's object store: for a rollout with some replicas in processes of its
        source and some apart from it (path object_store: a process cannot be two ranks of the edge's group)."""
        # dispatch `one`: the replicas of a trained role hold the same weights, rank 0's are put into the
        # object store once; dispatch `all`: every rollout replica loads that one object
        state_ref = self.lowered.groups[source].one("state_dict").result()
        ray.get(self.lowered.groups[target].broadcast("load_state_dict", state_ref).refs())
