"""The plan diff that guards a resume: keys as a user writes them, whole roles and calls as one line."""

from __future__ import annotations

import copy
import json

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from rlgraph.plan.diff import Change, diff_plans, flatten, plan_hash, render_diff

from .helpers import REPO


def plan_dict(spec: str, *overrides: str) -> dict:
    plan, diagnostics = plan_spec(compile_spec(str(REPO / "specs" / spec), list(overrides)))
    assert plan.ok, [d.to_json() for d in diagnostics]
    return json.loads(plan.to_json())  # as a checkpoint's plan.json reads back


@pytest.fixture(scope="module")
def ppo() -> dict:
    return plan_dict("ppo_arith.rl")


def lines(old: dict, new: dict) -> list[str]:
    return render_diff(diff_plans(old, new)).splitlines()


def test_the_same_plan_has_no_changes_and_the_same_hash(ppo):
    again = plan_dict("ppo_arith.rl")
    again["spec"] = "runs/ppo_arith/spec/ppo_arith.rl"  # the copy in the run directory: the same run
    assert diff_plans(ppo, again) == []
    assert plan_hash(ppo) == plan_hash(again)


def test_the_same_spec_planned_from_two_checkouts_has_one_hash_and_no_changes(tmp_path):
    """A spec with an environment (its class's folder is stored absolute) and a file of rows, copied to two
    folders: what is trained is the same, so a moved project resumes without --accept-changes."""
    import shutil

    plans = []
    for checkout in ("one", "two"):
        shutil.copytree(REPO / "specs", tmp_path / checkout / "specs")
        spec = tmp_path / checkout / "specs" / "grpo_arith_tool.rl"
        plan, diagnostics = plan_spec(compile_spec(str(spec), []))
        assert plan.ok, [d.to_json() for d in diagnostics]
        plans.append(json.loads(plan.to_json()))
    assert json.dumps(plans[0]) != json.dumps(plans[1])  # the folders are in it, for the processes to import from
    assert diff_plans(*plans) == [] and plan_hash(plans[0]) == plan_hash(plans[1])


def test_keys_are_those_a_user_writes(ppo):
    flat = flatten(ppo)
    assert flat["actor.optim.lr"] == 1e-4
    assert flat["actor.replicas"] == 1 and flat["critic.colocate"] == "actor"
    assert flat["step.actor.update.clip_low"] == flat["step.actor.update.clip_high"] == 0.2
    assert flat["step.gae.lam"] == 0.95
    assert flat["data.batch_size"] == 32 and flat["train.seed"] == 0
    assert flat["models.policy.path"] == "builtin:arith-gpt"
    assert flat["pools.main.devices_per_node"] == 1
    assert flat["rewards.exact"] == "rlgraph.tasks.arith:exact_match"
    assert flat["sync actor -> rollout"] is True


def test_an_override_shows_as_its_key_with_old_and_new_value(ppo):
    changed = plan_dict("ppo_arith.rl", "actor.optim.lr=1e-3")
    assert lines(ppo, changed) == ["actor.optim.lr: 0.0001 -> 0.001"]
    assert plan_hash(ppo) != plan_hash(changed)


def test_a_call_argument_shows_as_step_label_key(ppo, tmp_path):
    text = (REPO / "specs" / "ppo_arith.rl").read_text()
    (tmp_path / "ppo_arith.rl").write_text(text.replace("actor.update(clip = 0.2", "actor.update(clip = 0.3"))
    plan, _ = plan_spec(compile_spec(str(tmp_path / "ppo_arith.rl")))
    # a call's values are its settings': `clip` is the two sides it resolves to
    assert lines(ppo, json.loads(plan.to_json())) == ["step.actor.update.clip_low: 0.2 -> 0.3",
                                                      "step.actor.update.clip_high: 0.2 -> 0.3"]


def test_only_changes_that_extend_or_observe_the_run_are_resume_safe(ppo):
    longer = plan_dict("ppo_arith.rl", "train.steps=500", "train.validate_every=5", "data.val_batch_size=64")
    assert [c.resume_safe for c in diff_plans(ppo, longer)] == [True, True, True]
    other_data = plan_dict("ppo_arith.rl", "data.batch_size=16", "train.seed=1")
    assert [(c.key, c.resume_safe) for c in diff_plans(ppo, other_data)] == [
        ("data.batch_size", False), ("train.seed", False)]


def test_grpo_against_ppo_names_roles_and_calls_added_and_removed(ppo):
    got = lines(ppo, plan_dict("grpo_arith.rl"))
    assert "- role critic" in got
    assert "- step critic.update" in got and "- step gae" in got
    assert "+ step grpo_advantage" in got
    # the removed role's and calls' own keys are said by their one line
    assert not any(line.startswith(("critic.", "step.critic.", "step.gae.")) for line in got)
    assert got.index("- role critic") < got.index("rollout.n: 4 -> 8")  # structure first


def test_reads_role_values_under_settings_or_the_older_config(ppo):
    older, newer = copy.deepcopy(ppo), copy.deepcopy(ppo)
    for old in older["roles"]:
        old["config"] = old.pop("settings")
    assert diff_plans(older, newer) == []
    older["roles"][0]["config"]["optim"]["lr"] = 3e-4
    assert lines(older, newer) == ["actor.optim.lr: 0.0003 -> 0.0001"]


def test_a_version_3_plan_is_compared_as_upgraded(ppo):
    """The previous release's plan.json: its calls' kwargs and generate max_sequences, and its raw model values,
    are read as version 4 holds them (rlgraph/plan/migrate.py): no change, and a changed setting still shows."""
    older = copy.deepcopy(ppo)
    older["version"] = 3
    for call in older["calls"]:
        call["kwargs"] = {"clip": 0.3} if call["label"] == "actor.update" else {}
        if call["method"] == "generate":
            call["settings"]["max_sequences"] = None
    older["models"] = {name: {k: v for k, v in m.items() if k != "name"} for name, m in older["models"].items()}
    assert diff_plans(older, ppo) == [] and plan_hash(older) == plan_hash(ppo)
    next(c for c in older["calls"] if c["label"] == "actor.update")["settings"]["epochs"] = 4
    assert lines(older, ppo) == ["step.actor.update.epochs: 4 -> 2"]


def test_a_change_serialises_without_the_absent_side():
    assert Change("role critic", True).to_json() == {"key": "role critic", "old": True}
    assert Change("role critic", True).render() == "- role critic"
    assert Change("actor.foo", new=1).render() == "actor.foo: (unset) -> 1"


def test_a_reward_guard_change_is_listed_and_needs_accepting():
    old = plan_dict("grpo_arith.rl")
    new = plan_dict("grpo_arith.rl", "exact.max_invalid_fraction=0.1")
    changes = diff_plans(old, new)
    assert [c.render() for c in changes] == ["rewards.exact.max_invalid_fraction: 0.0 -> 0.1"]
    assert not changes[0].resume_safe  # it changes which rows the update learns from


def test_turning_tis_on_is_listed_and_needs_accepting(tmp_path):
    old = plan_dict("grpo_arith_split_tis.rl")
    text = (REPO / "specs" / "grpo_arith_split_tis.rl").read_text().replace("tis = token, tis_cap = 2.0",
                                                                             "tis = sequence, tis_cap = 5.0")
    (tmp_path / "common").symlink_to(REPO / "specs" / "common")
    (tmp_path / "grpo_arith_split_tis.rl").write_text(text)
    plan, _ = plan_spec(compile_spec(str(tmp_path / "grpo_arith_split_tis.rl")))
    changes = diff_plans(old, json.loads(plan.to_json()))
    assert [c.render() for c in changes] == ['step.actor.update.tis: "token" -> "sequence"',
                                             "step.actor.update.tis_cap: 2.0 -> 5.0"]
    assert not any(c.resume_safe for c in changes)  # they change the update the weights come from


def test_offload_settings_are_resume_safe_where_they_move_state_not_the_math(ppo):
    """A run out of device memory turns offload on and resumes without --accept-changes."""
    offloaded = plan_dict("ppo_arith.rl", "actor.optimizer_offload=true", "critic.optimizer_offload=true",
                          "ref.param_offload=true")
    assert sorted((c.key, c.resume_safe) for c in diff_plans(ppo, offloaded)) == [
        ("actor.optimizer_offload", True), ("critic.optimizer_offload", True), ("ref.param_offload", True)]


def test_a_reward_service_s_concurrency_and_request_size_are_resume_safe_its_address_and_retries_are_not(tmp_path):
    spec = tmp_path / "service.rl"
    spec.write_text((REPO / "specs" / "common" / "arith_base.rl").read_text().replace(
        'fn = "rlgraph.tasks.arith:exact_match"', 'url = "http://127.0.0.1:8000/score"') + "\n" +
        (REPO / "specs" / "grpo_arith.rl").read_text().split('include "common/arith_base.rl"')[1])

    def planned(*overrides: str) -> dict:
        plan, diagnostics = plan_spec(compile_spec(str(spec), list(overrides)))
        assert plan.ok, [d.to_json() for d in diagnostics]
        return json.loads(plan.to_json())

    changed = planned("exact.concurrency=2", "exact.rows_per_request=16", "exact.retries=0",
                      'exact.url="http://127.0.0.1:8001/score"')
    assert sorted((c.key, c.resume_safe) for c in diff_plans(planned(), changed)) == [
        ("rewards.exact.concurrency", True), ("rewards.exact.retries", False),
        ("rewards.exact.rows_per_request", True), ("rewards.exact.url", False)]


def test_loggers_and_reward_workers_are_resume_safe_they_change_where_metrics_go_and_how_fast_rows_score():
    old = plan_dict("grpo_arith.rl")
    new = plan_dict("grpo_arith.rl", "train.loggers=[console, tensorboard]", "exact.workers=8")
    assert sorted((c.render(), c.resume_safe) for c in diff_plans(old, new)) == [
        ("rewards.exact.workers: 4 -> 8", True), ('train.loggers: ["console"] -> ["console", "tensorboard"]', True)]


def test_the_failure_budget_and_the_samples_cadence_are_resume_safe(ppo):
    # after train.max_failures is spent, a resume with a larger budget must not need --accept-changes
    changed = plan_dict("ppo_arith.rl", "train.max_failures=10", "train.samples_every=1")
    assert sorted((c.key, c.resume_safe) for c in diff_plans(ppo, changed)) == [
        ("train.max_failures", True), ("train.samples_every", True)]


def test_docs_list_every_change_a_resume_takes_without_the_flag():
    import re

    from rlgraph.plan.diff import RESUME_SAFE, RESUME_SAFE_REWARD_FIELDS, RESUME_SAFE_ROLE_FIELDS

    text = " ".join((REPO / "docs" / "runtime.md").read_text().split())
    start = text.index("Only changes that make the run longer")
    listed = re.findall(r"`([^`]+)`", text[start:text.index("exits 1", start)])
    keys = RESUME_SAFE | RESUME_SAFE_ROLE_FIELDS | RESUME_SAFE_REWARD_FIELDS
    missing = [k for k in sorted(keys) if not any(name.split(".")[-1] == k.split(".")[-1] for name in listed)]
    assert not missing, missing
