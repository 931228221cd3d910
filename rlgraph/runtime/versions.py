"""Policy versions: how many updates the trained roles have made, and which of them the rollouts hold.

A step's update makes a new version (`updated`); a weight sync brings the rollouts to it (`synced`,
rlgraph/runtime/weights.py). A step generates with the rollouts' version (`rollout`): step - 1 when training
is synchronous, fewer when the rollout runs ahead (train.staleness), which `async/staleness_*` reports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PolicyVersions:
    trained: int = 0  # updates the trained roles have made (the step last finished)
    rollout: int = 0  # the trained version the rollouts were last synced to
    # whether every rollout holds the weights of the latest update: not at the start (a rollout loads its
    # model's own weights, a resumed run's actor the checkpoint's), and not after an update
    in_sync: bool = False

    def start(self, step: int) -> None:
        """The loop starting after step `step` (0, or the checkpoint it resumed from). Whether the rollouts hold
        its weights stays as it is (validation before the first step syncs them)."""
        self.trained = self.rollout = step

    def updated(self, step: int) -> None:
        """Step `step`'s updates changed the trained roles' weights."""
        self.trained = step
        self.in_sync = False

    def synced(self) -> None:
        """The rollouts were sent the trained roles' weights of now."""
        self.rollout = self.trained
        self.in_sync = True
