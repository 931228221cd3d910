"""Schedule: stages from the dataflow; a stage is concurrent when calls of it run on disjoint devices."""

from __future__ import annotations

from pathlib import Path

from .helpers import REPO, plan_text, spec

PPO = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards, values -> gae -> advantages, returns
  values, returns -> critic.update
  old_log_prob, advantages -> actor.update"""


def _stages(plan):
    return [(s.stage, s.lanes, s.concurrent) for s in plan.schedule]


def test_all_colocated_roles_share_one_lane_and_the_driver_runs_beside_them(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 2 }\n"
                "role actor { model = policy  pool = main  replicas = 2 }\n"
                "role rollout { colocate = actor  n = 4 }\n"
                "role ref { model = policy  colocate = actor }\n"
                "role critic { model = policy  colocate = actor }", step=PPO)
    plan, _ = plan_text(tmp_path, text)
    assert _stages(plan) == [
        (1, [["rollout.generate"]], False),
        # the rule reward runs on the driver while the colocated roles take turns on their devices
        (2, [["exact"], ["actor.log_prob", "ref.log_prob", "critic.values"]], True),
        (3, [["kl_penalty"]], False),
        (4, [["gae"]], False),
        (5, [["critic.update", "actor.update"]], False),  # same devices: one after another
    ]
    assert [c.stage for c in plan.calls] == [1, 2, 2, 2, 2, 3, 4, 5, 5]
    assert plan.schedule[1].calls == ["exact", "actor.log_prob", "ref.log_prob", "critic.values"]


def test_roles_on_disjoint_devices_run_at_once(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 2 }\n"
                "pool side { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main  replicas = 1 }\n"
                "role rollout { colocate = actor  n = 4 }\n"
                "role ref { model = policy  pool = main }\n"
                "role critic { model = policy  pool = side }", step=PPO)
    plan, _ = plan_text(tmp_path, text)
    stages = _stages(plan)
    assert stages[1] == (2, [["exact"], ["actor.log_prob"], ["ref.log_prob"], ["critic.values"]], True)
    assert stages[4] == (5, [["critic.update"], ["actor.update"]], True)


def test_driver_calls_share_the_driver(tmp_path):
    step = """\
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> other -> other_scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  other_scores -> rloo_advantage -> other_advantages
  old_log_prob, advantages -> actor.update"""
    text = spec("pool main { nodes = 1  devices_per_node = 1 }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  n = 4 }\n"
                'reward other { fn = "rlgraph.tasks.arith:exact_match" }', step=step)
    plan, _ = plan_text(tmp_path, text)
    stage3 = plan.schedule[2]
    assert stage3.calls == ["grpo_advantage", "rloo_advantage"]
    assert stage3.lanes == [["grpo_advantage", "rloo_advantage"]] and not stage3.concurrent


def test_the_shipped_split_spec_updates_actor_and_critic_at_once():
    path = REPO / "specs" / "ppo_split_arith.rl"
    if not path.exists():
        import pytest
        pytest.skip("specs/ppo_split_arith.rl is not in this checkout")
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    plan = build_plan(compile_spec(str(Path(path))))
    updates = next(s for s in plan.schedule if "actor.update" in s.calls)
    assert updates.concurrent and ["critic.update"] in updates.lanes


def test_an_asynchronous_plan_shows_its_two_loops_and_where_they_meet():
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import plan_spec
    from rlgraph.plan.html import render_html
    from rlgraph.plan.text import render_text

    def plan_of(*overrides: str):
        plan, _ = plan_spec(compile_spec(str(REPO / "specs" / "grpo_arith_async.rl"), list(overrides)))
        return plan

    plan = plan_of()
    text = render_text(plan, color=False, width=200)
    assert "asynchronous: two loops, train.staleness = 1" in text
    generate_row = next(line for line in text.splitlines() if "rollout.generate" in line)
    assert generate_row.rstrip().endswith("rollout loop")
    update_row = next(line for line in text.splitlines() if "actor.update" in line)
    assert update_row.rstrip().endswith("trainer loop")
    assert "meet: weights: sync actor → rollout as soon as each update ends" in text
    assert "at most 1 update old" in text
    html = render_html(plan)
    assert html.count(">trainer loop<") == 3 and ">rollout loop<" in html and "meet: weights" in html
    assert "loop" not in render_text(plan_of("train.staleness=0"), color=False, width=200)
