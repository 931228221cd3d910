"""A role's resources read off its resolved settings: what the compiler's resource rules (batch arithmetic,
param_offload's sharding; rlgraph.compiler.topology.RoleResources) read, so that the planner checks a change of
the settings with those very rules, on the graph compiled once (memory.fit_test), not by compiling again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlgraph.compiler.topology import RoleResources
from rlgraph.lang.program import Decl, InvalidValue, Program
from rlgraph.plan.model import PoolPlan, RolePlan


@dataclass(frozen=True)
class PlannedResources:
    """`plan`'s resources: its data-parallel size, tp and colocation as placement resolved them, its micro-batch
    and sharding as its settings say. `plans`: every role's plan by name (for its root's); `devices`: each
    pool's device kind; `decl`: the role's declaration, only for where its keys are written."""

    plan: RolePlan
    plans: Mapping[str, RolePlan]
    devices: Mapping[str, str]
    decl: Decl

    @property
    def _settings(self) -> Any:
        if self.plan.settings is None:  # a value its settings read is wrong (reported): the rule is skipped
            raise InvalidValue(f"role {self.plan.name}")
        return self.plan.settings

    @property
    def _root(self) -> RolePlan:
        root = self.plans.get(self.root)
        if root is None:  # a root of no known kind (reported)
            raise InvalidValue(f"role {self.root}")
        return root

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def kind(self) -> str | None:
        return self.plan.kind

    @property
    def replicas(self) -> int:
        return self.plan.replicas

    @property
    def tp(self) -> int:
        return self.plan.tp

    @property
    def sequence_parallel(self) -> int:
        return self.plan.sequence_parallel

    @property
    def root(self) -> str:
        return self.plan.colocate or self.plan.name

    @property
    def root_tp(self) -> int:
        return self._root.tp

    @property
    def device(self) -> str | None:
        return self.devices.get(self._root.pool)

    @property
    def micro_batch(self) -> int | None:
        return getattr(self._settings, "micro_batch", None)

    @property
    def micro_batch_tokens(self) -> int | None:
        return getattr(self._settings, "micro_batch_tokens", None)

    @property
    def strategy(self) -> str | None:
        return getattr(self._settings, "strategy", None)

    @property
    def param_offload(self) -> bool:
        return bool(getattr(self._settings, "param_offload", False))


def planned_resources(program: Program, pools: list[PoolPlan], roles: list[RolePlan]) -> dict[str, RoleResources]:
    """Every placed role's resources, by name. `program`: the spec, for where keys are written only."""
    plans = {r.name: r for r in roles}
    devices = {p.name: p.device for p in pools}
    return {r.name: PlannedResources(r, plans, devices, program.roles[r.name]) for r in roles}
