"""`--format json`: the stable schema of docs/plan.md, and a lossless round trip through Plan."""

from __future__ import annotations

import json

from rlgraph.plan.model import Plan

from .helpers import FIXTURES, REPO, plan_text, spec


def _plan(path):
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    return build_plan(compile_spec(str(path)))


def test_schema_keys():
    data = json.loads(_plan(FIXTURES / "rm_2x8.rl").to_json())
    assert list(data)[:2] == ["version", "spec"] and data["version"] == 4
    assert {"pools", "placements", "schedule", "memory", "diagnostics", "roles", "calls", "syncs", "rewards", "data",
            "train", "models"} <= set(data)
    assert set(data["pools"][0]) == {"name", "nodes", "devices_per_node", "device", "device_memory_bytes"}
    assert {"role", "replica", "pool", "node", "device", "process", "devices"} == set(data["placements"][0])
    assert {"stage", "calls", "concurrent", "lanes"} == set(data["schedule"][0])
    assert {"pool", "node", "device", "estimated_bytes", "capacity_bytes", "breakdown", "host"} == \
        set(data["memory"][0])
    assert {"name", "kind", "model", "model_path", "pool", "replicas", "tp", "sequence_parallel", "colocate", "settings"} == \
        set(data["roles"][0])
    assert {"id", "label", "kind", "target", "method", "role_kind", "inputs", "outputs",
            "stage", "settings"} == set(data["calls"][0])
    assert data["syncs"] == [["actor", "rollout"]]
    assert data["data"]["batch_size"] == 256 and data["train"]["steps"] == 100
    assert data["models"]["policy"]["params"] == 7_600_000_000 and data["models"]["policy"]["name"] == "policy"
    kl = next(c for c in data["calls"] if c["id"] == "kl_penalty")
    assert kl["inputs"] == [["scores", "scores"], ["log_prob", "old_log_prob"], ["ref_log_prob", "ref_log_prob"]]
    assert kl["stage"] == 3
    assert kl["settings"] == {"kind": "k1", "coef": 0.001, "target": None, "horizon": 10000}


def test_round_trip_for_every_shipped_spec():
    for path in [FIXTURES / "rm_2x8.rl", *sorted((REPO / "specs").glob("*.rl"))]:
        plan = _plan(path)
        again = Plan.from_json(plan.to_json())
        assert again == plan, path
        assert again.to_json() == plan.to_json()


def test_diagnostics_are_json_dicts(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main  replicas = 3 }\n"
                "role rollout { colocate = actor  n = 4 }")
    plan, _ = plan_text(tmp_path, text)
    placement = next(d for d in plan.diagnostics if d["code"] == "placement")
    assert placement["severity"] == "error" and placement["line"] == 4 and placement["hints"]
    assert not plan.ok
    json.dumps(plan.to_dict())


def _as_version_3(data: dict) -> dict:
    """`data` (a version-4 plan dict) as the previous release wrote it: each call's spec arguments (`kwargs`) beside
    its settings, each model as its block's values (no `name`), a generate call's `max_sequences` (its rollout's)."""
    old = json.loads(json.dumps(data))
    old["version"] = 3
    rollouts = {r["name"]: r["settings"] for r in old["roles"] if r["kind"] == "rollout"}
    for call in old["calls"]:
        call["kwargs"] = {"some_argument": 1}  # what they held does not matter: the upgrade drops them
        if call["method"] == "generate":
            call["settings"]["max_sequences"] = rollouts[call["target"]]["max_sequences"]
    old["models"] = {name: {k: v for k, v in model.items() if k != "name"} for name, model in old["models"].items()}
    return old


def test_a_version_3_plan_reads_as_the_version_4_plan_of_the_same_spec():
    """A run directory of the previous release resumes: its plan.json reads back as today's plan, its resume check
    finds no change and its hash is today's."""
    from rlgraph.plan.diff import diff_plans, plan_hash
    from rlgraph.plan.migrate import upgrade

    for path in [FIXTURES / "rm_2x8.rl", REPO / "specs" / "grpo_arith_tool.rl", REPO / "specs" / "ppo_arith.rl"]:
        plan = _plan(path)
        new = json.loads(plan.to_json())
        old = _as_version_3(new)
        assert Plan.from_json(json.dumps(old)) == plan, path
        assert upgrade(old) == new and upgrade(new) == new
        assert diff_plans(old, new) == [] and plan_hash(old) == plan_hash(new)
    changed = _as_version_3(new)
    changed["train"]["seed"] = 1
    assert [c.render() for c in diff_plans(changed, new)] == ["train.seed: 1 -> 0"]


def test_another_plan_version_is_refused():
    data = json.loads(_plan(FIXTURES / "rm_2x8.rl").to_json())
    for version in (2, 5):
        try:
            Plan.from_dict({**data, "version": version})
        except ValueError as err:
            assert f"plan version {version} is not supported" in str(err)
        else:
            raise AssertionError(version)
