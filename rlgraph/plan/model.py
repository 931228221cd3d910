"""The Plan: what runs where and when, as plain data.

`rlgraph plan` prints it; `rlgraph run` writes it to the run directory and
consumes it. Nothing in the runtime imports the parser: a Plan (or plan.json)
is all it needs. Every field is JSON-serialisable; the schema is documented in
docs/plan.md and versioned by `version`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PLAN_VERSION = 1
DRIVER = "driver"  # the process that runs transforms (kl_penalty, gae, ...) and rule rewards


@dataclass
class PoolPlan:
    name: str
    nodes: int
    devices_per_node: int
    device: str  # cpu | gpu
    device_memory_bytes: int | None


@dataclass
class RolePlan:
    """What runs: a role's kind, model and settings (everything its worker needs)."""

    name: str
    kind: str  # actor | rollout | ref | critic | reward_model
    model: str | None  # declared model name
    model_path: str | None  # as written: a folder or `builtin:...`
    replicas: int  # data-parallel size
    tp: int  # devices per replica
    colocate: str | None  # the role whose processes this one shares (the root of the chain)
    config: dict[str, Any]  # every key of the role block, defaults filled, optim included


@dataclass
class Placement:
    """Where it runs: one row per role replica."""

    role: str
    replica: int  # data-parallel rank within the role
    pool: str
    node: int
    device: int  # first device on the node (tp > 1 spans device..device+tp-1)
    devices: list[int]
    process: str  # the process that hosts it: `<root role>/<replica>`; colocated roles share one


@dataclass
class CallPlan:
    id: str
    label: str
    kind: str  # role | reward | transform
    target: str
    method: str | None
    role_kind: str | None
    inputs: list[list[str]]  # [port, field]
    outputs: list[list[str]]
    kwargs: dict[str, Any]
    stage: int


@dataclass
class Stage:
    stage: int
    calls: list[str]  # call ids
    concurrent: bool  # True when two or more of its calls run at once on disjoint devices
    # Calls grouped by shared devices: a lane's calls run one after another, lanes run at once.
    lanes: list[list[str]] = field(default_factory=list)


@dataclass
class MemoryRow:
    pool: str
    node: int
    device: int
    estimated_bytes: int
    capacity_bytes: int | None
    breakdown: dict[str, int]  # `<role>/<item>` -> bytes, e.g. `actor/optimizer`


@dataclass
class Plan:
    spec: str
    pools: list[PoolPlan] = field(default_factory=list)
    roles: list[RolePlan] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    rewards: dict[str, str] = field(default_factory=dict)  # reward name -> `module:function`
    calls: list[CallPlan] = field(default_factory=list)
    syncs: list[list[str]] = field(default_factory=list)  # [trained role, rollout role]
    schedule: list[Stage] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # model name -> its block's values
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    version: int = PLAN_VERSION

    # ---- queries the runtime and renderers share
    def role(self, name: str) -> RolePlan:
        return next(r for r in self.roles if r.name == name)

    def placements_of(self, role: str) -> list[Placement]:
        return sorted((p for p in self.placements if p.role == role), key=lambda p: p.replica)

    def processes(self) -> dict[str, list[Placement]]:
        """Process id -> the role replicas it hosts."""
        out: dict[str, list[Placement]] = {}
        for p in self.placements:
            out.setdefault(p.process, []).append(p)
        return out

    def call(self, call_id: str) -> CallPlan:
        return next(c for c in self.calls if c.id == call_id)

    @property
    def ok(self) -> bool:
        return not any(d["severity"] == "error" for d in self.diagnostics)

    # ---- serialisation
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"version": data.pop("version"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        data = dict(data)
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')} is not supported (expected {PLAN_VERSION})")
        return cls(
            spec=data["spec"],
            pools=[PoolPlan(**p) for p in data["pools"]],
            roles=[RolePlan(**r) for r in data["roles"]],
            placements=[Placement(**p) for p in data["placements"]],
            rewards=data["rewards"],
            calls=[CallPlan(**c) for c in data["calls"]],
            syncs=data["syncs"],
            schedule=[Stage(**s) for s in data["schedule"]],
            memory=[MemoryRow(**m) for m in data["memory"]],
            data=data["data"],
            train=data["train"],
            models=data["models"],
            diagnostics=data["diagnostics"],
        )

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))
