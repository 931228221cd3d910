"""Resuming with another plan: a change to what is trained stops before Ray starts and names itself, until
--accept-changes takes it (and it takes effect); longer runs need no flag; DIR/history.jsonl keeps every run."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from rlgraph.plan.diff import flatten
from rlgraph.runtime.history import read_history

from .helpers import fast, read_metrics

PPO, GRPO = "specs/ppo_arith.rl", "specs/grpo_arith.rl"  # ppo_arith trains the actor at lr 1e-4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Where a PPO run with a checkpoint at step 2 is made once, by the first test that needs it."""
    return tmp_path_factory.mktemp("changes") / "base"


@pytest.fixture
def run_dir(run_cli, trained, tmp_path):
    """A copy of the trained run directory, for one test to resume."""
    if not (trained / "checkpoints" / "step_2").is_dir():
        code, out = run_cli(PPO, "--output", trained, *fast(steps=2))
        assert code == 0, out
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def test_a_changed_lr_is_refused_until_accepted_and_then_takes_effect(run_cli, run_dir, monkeypatch):
    code, out = run_cli(PPO, "--output", run_dir, *fast(steps=4), "-s", "actor.optim.lr=1e-3")
    assert code == 1, out
    assert "actor.optim.lr: 0.0001 -> 0.001" in out and "--accept-changes" in out
    assert "ray:" not in out  # refused before Ray started
    assert [r["training/global_step"] for r in read_metrics(run_dir)] == [0, 1, 2]

    accept = [PPO, "--output", str(run_dir), *fast(steps=4), "-s", "actor.optim.lr=1e-3", "--accept-changes"]
    monkeypatch.setattr(sys, "argv", ["rlgraph", "run", *accept])  # as the console script sees it
    code, out = run_cli(*accept)
    assert code == 0, out
    records = read_metrics(run_dir)
    lr = {r["training/global_step"]: r["actor/lr"] for r in records if "actor/lr" in r}
    assert lr == {1: 1e-4, 2: 1e-4, 3: 1e-3, 4: 1e-3}
    saved = json.loads((run_dir / "checkpoints" / "step_4" / "plan.json").read_text())
    assert flatten(saved)["actor.optim.lr"] == 1e-3  # the checkpoint keeps the plan it was trained with

    history = read_history(run_dir)
    assert [h["start"] for h in history] == ["fresh", "refused", "resumed"]
    assert [h["resumed_from_step"] for h in history] == [None, 2, 2]
    assert history[2]["accepted_changes"] == [{"key": "actor.optim.lr", "old": 1e-4, "new": 1e-3}]
    assert history[2]["argv"] == ["rlgraph", "run", *accept] and "actor.optim.lr=1e-3" in history[2]["overrides"]
    assert history[0]["plan_hash"] != history[2]["plan_hash"]


def test_raising_train_steps_alone_resumes_without_the_flag(run_cli, run_dir):
    code, out = run_cli(PPO, "--output", run_dir, *fast(steps=3))
    assert code == 0, out
    assert "resuming from" in out
    assert [r["training/global_step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]
    last = read_history(run_dir)[-1]
    assert last["start"] == "resumed" and last["accepted_changes"] == []
    assert last["plan_changes"] == [{"key": "train.steps", "old": 2, "new": 3}]


def test_a_grpo_spec_is_refused_in_a_ppo_run_directory(run_cli, run_dir):
    code, out = run_cli(GRPO, "--output", run_dir, *fast(steps=4))
    assert code == 1, out
    assert "- role critic" in out and "- step critic.update" in out and "+ step grpo_advantage" in out
    assert "ray:" not in out
    assert read_history(run_dir)[-1]["start"] == "refused"


def test_a_checkpoint_without_its_manifest_is_not_resumed_from(run_cli, run_dir):
    for name in ("plan.json", "manifest.json"):  # as an older rlgraph wrote it: nothing says its files are whole
        (run_dir / "checkpoints" / "step_2" / name).unlink()
    code, out = run_cli(PPO, "--output", run_dir, *fast(steps=3))
    out = " ".join(out.split())
    assert code == 1, out
    assert "no complete checkpoint" in out and "step_2 has no manifest.json" in out and "--no-resume" in out
    assert "ray:" not in out and "Traceback" not in out


def test_a_run_directory_of_plan_version_3_resumes_without_a_change(run_cli, run_dir):
    """The previous release wrote plan version 3 (calls' kwargs beside their settings, raw model values, a
    generate call's max_sequences): resuming its run directory with the same spec finds no change but the longer
    run (rlgraph/plan/migrate.py), and the new history entry's hash is that of the same plan."""
    import hashlib

    checkpoint = run_dir / "checkpoints" / "step_2"
    for file in (run_dir / "plan.json", checkpoint / "plan.json"):
        plan = json.loads(file.read_text())
        plan["version"] = 3
        for call in plan["calls"]:
            call["kwargs"] = {}
            if call["method"] == "generate":
                call["settings"]["max_sequences"] = None
        plan["models"] = {name: {k: v for k, v in m.items() if k != "name"} for name, m in plan["models"].items()}
        file.write_text(json.dumps(plan, indent=2) + "\n")
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    data = (checkpoint / "plan.json").read_bytes()
    manifest["files"]["plan.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))

    code, out = run_cli(PPO, "--output", run_dir, *fast(steps=3))
    assert code == 0, out
    last = read_history(run_dir)[-1]
    assert last["start"] == "resumed" and last["accepted_changes"] == []
    assert last["plan_changes"] == [{"key": "train.steps", "old": 2, "new": 3}]
    assert json.loads((run_dir / "plan.json").read_text())["version"] == 4
