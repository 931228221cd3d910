"""The Plan: what runs where and when, as plain data.

`rlgraph plan` prints it; `rlgraph run` writes it to the run directory and
consumes it. Nothing in the runtime imports the parser: a Plan (or plan.json)
is all it needs. Every field is JSON-serialisable; the schema is documented in
docs/plan.md and versioned by `version`. Each fact is held once, typed: a call's settings (no spec arguments
beside them), a model's ModelSettings. A plan.json of the previous version is read through
rlgraph/plan/migrate.py `upgrade`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from rlgraph.contract.methods import call_settings_class
from rlgraph.contract.settings import (ROLE_SETTINGS, DataSettings, EnvSettings, ModelSettings, RewardSettings,
                                       TrainSettings, settings_from_dict, settings_to_dict)
from rlgraph.plan.migrate import upgrade

_SPEC_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# 2: typed, resolved settings for roles, calls, data and train; 3: environments (envs, generate env);
# 4: one representation of each fact: no call `kwargs` beside its settings, `models` typed (ModelSettings), no
# `max_sequences` in a generate call's settings (the rollout's, given to its engine once). 3 is read too (migrate.py).
PLAN_VERSION = 4
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
    """What runs: a role's kind, model and resolved settings (everything its worker needs)."""

    name: str
    kind: str  # actor | rollout | ref | critic | reward_model | judge
    model: str | None  # declared model name
    model_path: str | None  # as written: a folder or `builtin:...`
    pool: str | None  # the pool it names (None: colocated with another role)
    replicas: int  # data-parallel size
    tp: int  # devices per replica
    colocate: str | None  # the role whose processes this one shares (the root of the chain)
    settings: Any  # the kind's class in rlgraph.contract.settings (ActorSettings, RolloutSettings, ...)
    sequence_parallel: int = 1  # replicas that share each sequence (Ulysses); `rlgraph run` refuses > 1

    @property
    def dtype_label(self) -> str:
        """The dtype as a spec writes it (fp32, bf16, fp16), for plan renderers."""
        return _SPEC_DTYPES.get(getattr(self.settings, "dtype", None), "—")

    @property
    def strategy_label(self) -> str:
        return getattr(self.settings, "strategy", None) if self.kind in ("actor", "critic") else "—"


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
    stage: int
    # resolved, typed (rlgraph.contract.settings, the class `call_settings_class` names): what the runtime reads
    # and what renderers show (view.call_arguments); None only where a value the spec wrote wrongly (reported)
    # left it unresolved
    settings: Any = None


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
    # `<role>/<item>` -> bytes that this device's replicas keep in host memory instead (param_offload,
    # optimizer_offload); not in estimated_bytes
    host: dict[str, int] = field(default_factory=dict)


@dataclass
class Plan:
    spec: str
    pools: list[PoolPlan] = field(default_factory=list)
    roles: list[RolePlan] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    # reward name -> `module:function`; None for a reward service (its url is in reward_settings)
    rewards: dict[str, str | None] = field(default_factory=dict)
    reward_settings: dict[str, RewardSettings] = field(default_factory=dict)  # reward name -> its guards
    calls: list[CallPlan] = field(default_factory=list)
    syncs: list[list[str]] = field(default_factory=list)  # [trained role, rollout role]
    schedule: list[Stage] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    data: DataSettings | None = None  # None only in a plan of a spec without a data block (an error)
    train: TrainSettings | None = None
    # model name -> its block's settings; a model block with a wrong value (reported) is left out, as a reward is
    models: dict[str, ModelSettings] = field(default_factory=dict)
    # env name -> the declared environment; a generate call that uses one holds it in its settings' `env`
    envs: dict[str, EnvSettings] = field(default_factory=dict)
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
        for row, role in zip(data["roles"], self.roles):
            row["settings"] = None if role.settings is None else settings_to_dict(role.settings)
        for row, call in zip(data["calls"], self.calls):
            row["settings"] = None if call.settings is None else settings_to_dict(call.settings)
        for name in ("data", "train"):
            value = getattr(self, name)
            data[name] = None if value is None else settings_to_dict(value)
        data["models"] = {name: settings_to_dict(model) for name, model in self.models.items()}
        data["envs"] = {name: settings_to_dict(env) for name, env in self.envs.items()}
        return {"version": data.pop("version"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        """A plan dict of this version, or of version 3 (a run directory of the previous release: upgraded)."""
        data = upgrade(data)
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')} is not supported (expected {PLAN_VERSION} or 3)")
        return cls(
            spec=data["spec"],
            pools=[PoolPlan(**p) for p in data["pools"]],
            roles=[RolePlan(**{**r, "settings": None if r["settings"] is None
                                  else settings_from_dict(ROLE_SETTINGS[r["kind"]], r["settings"])})
                   for r in data["roles"]],
            placements=[Placement(**p) for p in data["placements"]],
            rewards=data["rewards"],
            reward_settings={name: settings_from_dict(RewardSettings, value)
                             for name, value in data["reward_settings"].items()},
            calls=[CallPlan(**{**c, "settings": _call_settings(c)}) for c in data["calls"]],
            syncs=data["syncs"],
            schedule=[Stage(**s) for s in data["schedule"]],
            memory=[MemoryRow(**m) for m in data["memory"]],
            data=None if data["data"] is None else settings_from_dict(DataSettings, data["data"]),
            train=None if data["train"] is None else settings_from_dict(TrainSettings, data["train"]),
            models={name: settings_from_dict(ModelSettings, value) for name, value in data["models"].items()},
            # a plan written before environments existed has none
            envs={name: settings_from_dict(EnvSettings, value) for name, value in data.get("envs", {}).items()},
            diagnostics=data["diagnostics"],
        )

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))


def _call_settings(call: dict[str, Any]) -> Any:
    if call.get("settings") is None:
        return None
    cls = call_settings_class(call["kind"], call["target"], call.get("role_kind"), call.get("method"))
    return settings_from_dict(cls, call["settings"])
