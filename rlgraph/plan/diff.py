"""What changed between two plans, in the keys a user writes in a spec (`actor.optim.lr`, `step.actor.update.clip`).

    flatten(plan)        plan dict (Plan.to_dict() or a checkpoint's plan.json) -> {dotted key: JSON value}
    diff_plans(old, new) -> [Change]: `actor.optim.lr: 0.0003 -> 0.001`, `+ role critic`, `- step critic.update`
    plan_hash(plan)      sha256 of what is trained (not the spec's path, diagnostics, estimates or schedule)

Plain data in, plain data out: reads plan dicts of older and newer schemas alike (a role's values under
"settings" and/or the older "config"; a call's under "settings"). A plan of version 3 is read as its
upgraded form (rlgraph/plan/migrate.py): its calls' kwargs, raw models and generate `max_sequences` are as the
version-4 plan of the same spec holds them, so a run directory of the previous release resumes with no change
and `plan_hash` of its plan.json is that of the version-4 plan. (The hashes a previous release wrote into
history.jsonl are of the version-3 form, and differ.)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterator

from rlgraph.plan.migrate import upgrade

# Changes a resumed run takes without --accept-changes: they make the run longer or change what is
# watched (validation, checkpoints), never the update a step makes, so the weights up to the checkpoint
# and the steps after it are the ones the same run would have made.
RESUME_SAFE = frozenset({
    "train.steps",
    "train.validate_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.val_samples",  # plans before version 3; now the rollout's `val.n`
    "train.max_failures",
    "train.samples_every",
    "train.loggers",
    "data.val",
    "data.val_batch_size",
})
# Role fields (`<role>.<field>`) that move a role's state between device and host memory, not what a step
# computes: a run that ran out of device memory turns them on and resumes. (An fsdp role's param_offload
# steps AdamW on the CPU: the same update, though not bit for bit the device kernel's rounding.)
RESUME_SAFE_ROLE_FIELDS = frozenset({"param_offload", "optimizer_offload"})
# Reward fields (`rewards.<name>.<field>`) that change how fast rows are scored, not their scores.
RESUME_SAFE_REWARD_FIELDS = frozenset({"workers", "concurrency", "rows_per_request"})  # a service's too

# Plan fields that describe the plan rather than what it trains: the spec's path (the same spec run from
# the copy in the run directory), findings and estimates, and the schedule (derived from the calls).
NOT_TRAINED = ("spec", "diagnostics", "memory", "schedule")
# Fields, at any depth, that say where the spec lies rather than what it trains: a user function's or
# environment's folder (absolute: the processes that import it need it so) and the line that declared it. The
# same spec planned from two checkouts has one hash, and a moved project resumes without --accept-changes.
LOCATION_FIELDS = frozenset({"base_dir", "declared_at"})

# Keys of a whole role, call, pool, model or sync: added or removed as one line, their values not listed.
_ENTITY_PREFIX = {"role": "{}.", "step": "step.{}.", "pool": "pools.{}.", "model": "models.{}."}


class _Absent:
    def __repr__(self) -> str:
        return "(unset)"


ABSENT: Any = _Absent()  # the key is not in that plan


@dataclass(frozen=True)
class Change:
    key: str  # `actor.optim.lr`; a whole thing is `role critic`, `step critic.update`, `sync actor -> rollout`
    old: Any = ABSENT
    new: Any = ABSENT

    @property
    def is_entity(self) -> bool:
        return " " in self.key

    @property
    def resume_safe(self) -> bool:
        role_field = not self.is_entity and self.key.count(".") == 1 and self.key.split(".")[1]
        reward_field = self.key.startswith("rewards.") and self.key.count(".") == 2 and self.key.split(".")[2]
        validation = not self.is_entity and self.key.split(".")[1:2] == ["val"]  # a rollout's `val { ... }`
        return (self.key in RESUME_SAFE or role_field in RESUME_SAFE_ROLE_FIELDS
                or reward_field in RESUME_SAFE_REWARD_FIELDS or validation)

    def render(self) -> str:
        if self.is_entity:
            return f"{'+' if self.old is ABSENT else '-'} {self.key}"
        return f"{self.key}: {_show(self.old)} -> {_show(self.new)}"

    def to_json(self) -> dict[str, Any]:
        """{"key", "old", "new"}; a side where the key is absent is left out."""
        out: dict[str, Any] = {"key": self.key}
        if self.old is not ABSENT:
            out["old"] = self.old
        if self.new is not ABSENT:
            out["new"] = self.new
        return out


def _show(value: Any) -> str:
    return repr(value) if value is ABSENT else json.dumps(value)


def flatten(plan: dict[str, Any]) -> dict[str, Any]:
    """{dotted key: value} of everything a plan trains with; whole things as `role <name>` etc. -> True."""
    plan = _without_locations(json.loads(json.dumps(upgrade(plan), default=str)))  # tuples as lists, as in plan.json
    out: dict[str, Any] = {}
    for pool in plan.get("pools") or []:
        out[f"pool {pool['name']}"] = True
        out.update(_dotted(f"pools.{pool['name']}", {k: v for k, v in pool.items() if k != "name"}))
    for name, model in (plan.get("models") or {}).items():
        out[f"model {name}"] = True
        out.update(_dotted(f"models.{name}", {k: v for k, v in model.items() if k != "name"}))
    for role in plan.get("roles") or []:
        name = role["name"]
        out[f"role {name}"] = True
        fields = {k: role[k] for k in ("kind", "model", "model_path", "pool", "replicas", "tp", "colocate") if k in role}
        # the role's resolved fields win over the same key in its block (e.g. a rollout's model is its actor's)
        out.update(_dotted(name, {**_values(role, "config"), **fields}))
    for name, fn in (plan.get("rewards") or {}).items():
        out[f"rewards.{name}"] = fn
    for name, guards in (plan.get("reward_settings") or {}).items():  # timeout_s, max_invalid_fraction
        out.update(_dotted(f"rewards.{name}", guards))
    for source, target in plan.get("syncs") or []:
        out[f"sync {source} -> {target}"] = True
    for call in plan.get("calls") or []:
        label = call["label"]
        out[f"step {label}"] = True
        what = call["target"] + (f".{call['method']}" if call.get("method") else "")
        out[f"step.{label}.call"] = f"{call['kind']} {what}"
        out.update(_dotted(f"step.{label}", call.get("settings") or {}))
    out.update(_dotted("data", plan.get("data") or {}))
    out.update(_dotted("train", plan.get("train") or {}))
    return out


def _values(row: dict[str, Any], older: str) -> dict[str, Any]:
    """A role's values: the resolved "settings", and the values under the older key ("config") where a plan
    has them too."""
    return {**(row.get("settings") or {}), **(row.get(older) or {})}


def _dotted(prefix: str, values: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _dotted(f"{prefix}.{key}", value)
        else:
            yield f"{prefix}.{key}", value


def diff_plans(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The changes from `old` to `new`: whole things added or removed first (the keys of such a role, call,
    pool or model are left out: its `+ role <name>` line says it), then changed values in `old`'s order."""
    a, b = flatten(old), flatten(new)
    changes = [Change(k, a[k], b.get(k, ABSENT)) for k in a if k not in b or b[k] != a[k]]
    changes += [Change(k, ABSENT, b[k]) for k in b if k not in a]
    whole = [_ENTITY_PREFIX[c.key.split(" ", 1)[0]].format(c.key.split(" ", 1)[1])
             for c in changes if c.is_entity and c.key.split(" ", 1)[0] in _ENTITY_PREFIX]
    kept = [c for c in changes if c.is_entity or not any(c.key.startswith(p) for p in whole)]
    return sorted(kept, key=lambda c: not c.is_entity)  # what was added or removed first


def render_diff(changes: list[Change]) -> str:
    return "\n".join(c.render() for c in changes)


def plan_hash(plan: dict[str, Any]) -> str:
    """sha256 of the plan's canonical JSON without the fields in NOT_TRAINED; a version-3 plan's is that of its
    upgraded form (the version-4 plan of the same spec)."""
    kept = {k: v for k, v in upgrade(plan).items() if k not in NOT_TRAINED}
    canonical = json.dumps(_without_locations(json.loads(json.dumps(kept, default=str))), sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _without_locations(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_locations(v) for k, v in value.items() if k not in LOCATION_FIELDS}
    if isinstance(value, list):
        return [_without_locations(v) for v in value]
    return value
