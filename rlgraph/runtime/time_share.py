"""A rollout's device memory, on devices it shares with a trained role: it sleeps while the role trains.

A rollout with an engine of its own (not generating with a policy's module in place) in a process that also
hosts a trained role (SGLang colocated with the actor, verl's hybrid engine with a separate engine) holds device
memory the role needs while it trains: after its generate it frees its KV cache and weights (`release_memory`),
before the next it takes them back (`resume_memory`). Weights synced meanwhile are kept (the engine takes back
only their memory). The step (rlgraph/runtime/step.py) wakes it before its generate calls and puts it to sleep
once they are done; validation does the same around its own (rlgraph/runtime/loop.py).
"""

from __future__ import annotations

from typing import Any

from rlgraph.plan.model import Plan
from rlgraph.runtime.roles import WorkerSpec


def time_shared_rollouts(plan: Plan, specs: dict[str, WorkerSpec]) -> list[str]:
    """Rollouts with an engine of their own (not generating with a policy's module in place) in processes that
    also host a trained role: they hold device memory the role needs while it trains."""
    trained = {p.process for r in plan.roles if r.kind in ("actor", "critic") for p in plan.placements_of(r.name)}
    return [r.name for r in plan.roles if r.kind == "rollout" and specs[r.name].worker != "alias"
            and {p.process for p in plan.placements_of(r.name)} & trained]


class TimeShare:
    """Wakes and puts to sleep `rollouts` (`time_shared_rollouts`), their calls made through `roles`
    (rlgraph.runtime.step.Roles). Sent, not awaited: a process runs its calls in order, so the generate sent
    next finds the memory there; the next wake or sleep waits for the one before (its error surfaces there)."""

    def __init__(self, roles: Any, rollouts: tuple[str, ...] | list[str]) -> None:
        self.roles = roles
        self.rollouts = list(rollouts)
        self.sent: list[Any] = []  # release/resume calls sent, not yet waited on

    def wake(self) -> None:
        """Before a generate: rollouts that gave their device memory back take it again."""
        self._memory("resume_memory")

    def sleep(self) -> None:
        """After a generate: the rollouts give their device memory back while the trained roles train."""
        self._memory("release_memory")

    def _memory(self, method: str) -> None:
        if not self.rollouts:
            return
        with self.roles.errors():
            self.roles.settle(self.sent)
            self.sent = [ref for role in self.rollouts for ref in self.roles.send(role, method)]
