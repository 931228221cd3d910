"""plan.json of an older plan version -> the current one, as plain data.

A run directory written by the previous release still resumes: `Plan.from_dict` reads its plan.json through
`upgrade`, and the resume check (rlgraph/plan/diff.py `flatten`, `plan_hash`) compares and hashes the upgraded
form, so the plan of an unchanged spec is no change and has the same hash as the version-4 plan of it.

Version 3 -> 4 (one representation of each fact):
  - a call's `kwargs` (its spec arguments, defaults filled) are dropped: its typed `settings` hold what it does;
  - `models` holds each model block's ModelSettings (`{"name": NAME, **its values}`), not the values alone;
  - a generate call's settings lose `max_sequences`: the limit is its rollout role's, given to the engine once.
"""

from __future__ import annotations

from typing import Any

def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """`data` as a version-4 plan dict (a new dict; `data` is left as it is). A dict of version 4 comes back
    equal; any other version than 3 or 4 comes back unchanged, for the caller to refuse or compare as it is."""
    if data.get("version") != 3:
        return data
    out = {**data, "version": 4}
    out["calls"] = [_call_v4(call) for call in data.get("calls") or []]
    out["models"] = {name: {"name": name, **values} for name, values in (data.get("models") or {}).items()}
    return out


def _call_v4(call: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in call.items() if k != "kwargs"}
    settings = call.get("settings")
    if call.get("kind") == "role" and call.get("method") == "generate" and isinstance(settings, dict):
        out["settings"] = {k: v for k, v in settings.items() if k != "max_sequences"}
    return out
