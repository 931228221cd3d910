"""`rlgraph plan` as a user runs it: every shipped spec, every format, exit codes, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlgraph.cli import main

from .helpers import FIXTURES, REPO, spec

SHIPPED = sorted((REPO / "specs").glob("*.rl"))
RM_2X8 = REPO / "specs" / "ppo_qwen7b_rm_2x8.rl"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
@pytest.mark.parametrize("fmt", ["text", "json", "dot", "html"])
def test_every_shipped_spec_plans_cleanly(path, fmt, capsys):
    assert main(["plan", str(path), "--format", fmt]) == 0
    out = capsys.readouterr()
    assert out.out.strip()
    assert "error[" not in out.err
    if fmt == "json":
        assert json.loads(out.out)["version"] == 4


def _check_2x8(plan: dict, nodes: set[int]) -> None:
    devices = {(p["pool"], p["node"], d) for p in plan["placements"] for d in p["devices"]}
    assert len(devices) == 16
    assert {node for _, node, _ in devices} == nodes
    assert sum(p["nodes"] * p["devices_per_node"] for p in plan["pools"]) == 16
    for row in plan["memory"]:
        assert row["capacity_bytes"] and 0 < row["estimated_bytes"] <= row["capacity_bytes"], row
    kinds = {r["name"]: r["kind"] for r in plan["roles"]}
    rm = [name for name, kind in kinds.items() if kind == "reward_model"]
    assert len(rm) == 1
    rm_pools = {p["pool"] for p in plan["placements"] if p["role"] == rm[0]}
    assert len(rm_pools) == 1
    others = {p["role"] for p in plan["placements"] if p["pool"] in rm_pools}
    assert others == set(rm), "the reward model shares its pool"
    assert not [d for d in plan["diagnostics"] if d["severity"] == "error"]


def test_the_2x8_reward_model_spec(tmp_path, capsys):
    if not RM_2X8.exists():
        pytest.skip("specs/ppo_qwen7b_rm_2x8.rl is not in this checkout")
    out = tmp_path / "plan.json"
    assert main(["plan", str(RM_2X8), "--format", "json", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""  # -o: nothing on stdout
    _check_2x8(json.loads(out.read_text()), nodes={0, 1})  # every pool spans the 2 nodes


def test_the_2x8_fixture(capsys):
    assert main(["plan", str(FIXTURES / "rm_2x8.rl"), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    _check_2x8(plan, nodes={0})  # two pools of one node each
    assert {p["pool"] for p in plan["placements"] if p["role"] == "reward_model"} == {"reward"}


def test_text_view_has_summary_tree_schedule_memory(capsys):
    assert main(["plan", str(FIXTURES / "rm_2x8.rl")]) == 0
    out = capsys.readouterr().out
    assert "16 devices in 2 pools (train 1×8, reward 1×8); 5 roles; 9 calls in 5 stages; peak 63 GiB / 80 GiB per " \
           "device" in out.replace("\n", " ")
    assert "pool train" in out and "node 0" in out and "gpu 7" in out
    assert "actor/1 │ actor#1 ref#1 critic#1  +  actor/0 │ rollout#0[d0–1]" in out
    assert "concurrent" in out and "reward_model.score [reward_model/0–7]  ‖  actor.log_prob" in out
    assert "rollout/kv_pool" in out and "\x1b[" not in out  # no colour codes when not on a terminal


def test_errors_exit_1_and_still_print_the_partial_plan(tmp_path, capsys):
    path = tmp_path / "bad.rl"
    path.write_text(spec("pool main { nodes = 1  devices_per_node = 2 }\n"
                         "role actor { model = policy  pool = main  replicas = 2 }\n"
                         "role rollout { colocate = actor  n = 4 }\n"
                         "role ref { model = policy  pool = main  replicas = 1 }\n"
                         "role critic { model = policy  pool = main  replicas = 1 }"))
    assert main(["plan", str(path), "--format", "json"]) == 1
    out = capsys.readouterr()
    assert "error[oversubscribed]" in out.err and "--> " in out.err  # full form on stderr
    plan = json.loads(out.out)  # stdout holds only the plan
    assert {p["role"] for p in plan["placements"]} == {"actor", "rollout"}
    assert any(d["code"] == "oversubscribed" for d in plan["diagnostics"])


def test_unreadable_spec_exits_1(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "missing.rl")]) == 1
    assert "error[" in capsys.readouterr().err


def test_plan_imports_no_torch_ray_or_transformers():
    code = ("import sys; from rlgraph.cli import main; "
            f"rc = main(['plan', {str(FIXTURES / 'rm_2x8.rl')!r}, '--format', 'html', '-o', '/dev/null']); "
            "heavy = [m for m in ('torch', 'ray', 'transformers') if m in sys.modules]; "
            "print(rc, heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    rc, heavy = done.stdout.split(" ", 1)
    assert rc == "0" and heavy.strip() == "[]", done.stdout + done.stderr
