"""The plan of a spec with an environment: Plan.envs and the generate call's settings resolved (and read back from
plan.json), and the text and html views showing the environment and the step's multi-turn generate."""

from __future__ import annotations

from rlgraph.contract.settings import EnvSettings
from rlgraph.plan.html import render_html
from rlgraph.plan.model import Plan
from rlgraph.plan.text import render_text

from .helpers import GRPO_STEP, line_of, plan_text, spec

CALC = """\
env calc {
  class = "rlgraph.workers.envs.calculator:Calculator"
  args { digits = 2 }
  max_turns = 3
  max_observation_tokens = 8
  timeout_s = 10
}"""
ROLES = """\
pool main { nodes = 1  devices_per_node = 2 }
role actor { model = policy  pool = main  replicas = 2 }
role rollout { colocate = actor  n = 4  max_new_tokens = 32 }"""
ENV_STEP = GRPO_STEP.replace("rollout.generate", "rollout.generate(env = calc)")


def _plan(tmp_path, step: str = ENV_STEP, env: str = CALC):
    text = spec(ROLES + "\n" + env, step=step)
    plan, diagnostics = plan_text(tmp_path, text)
    return plan, diagnostics, text


def test_the_env_is_resolved_once_and_the_generate_call_holds_it(tmp_path):
    plan, diagnostics, text = _plan(tmp_path)
    assert diagnostics == []
    assert plan.envs == {"calc": EnvSettings(
        name="calc", cls="rlgraph.workers.envs.calculator:Calculator", base_dir=str(tmp_path),
        declared_at=f"{tmp_path / 'spec.rl'}:{line_of(text, 'env calc')}", args={"digits": 2}, max_turns=3,
        max_observation_tokens=8, timeout_s=10.0, workers=4, max_failed_fraction=0.1, tool_format="auto")}
    generate = plan.call("rollout.generate")
    assert generate.settings.env == plan.envs["calc"] and generate.settings.max_new_tokens == 32


def test_a_generate_without_an_env_is_one_turn(tmp_path):
    plan, diagnostics, _ = _plan(tmp_path, step=GRPO_STEP)
    assert [d.code for d in diagnostics] == ["unused-env"]
    assert plan.call("rollout.generate").settings.env is None
    assert "calc" in plan.envs  # declared, so listed, even unused


def test_plan_json_reads_back_the_env(tmp_path):
    plan, _, _ = _plan(tmp_path)
    again = Plan.from_json(plan.to_json())
    assert again.envs == plan.envs and isinstance(again.envs["calc"], EnvSettings)
    assert again.call("rollout.generate").settings == plan.call("rollout.generate").settings
    assert again.to_json() == plan.to_json()
    # a plan.json written before environments existed has none
    data = plan.to_dict()
    del data["envs"]
    assert Plan.from_dict(data).envs == {}


def test_the_text_plan_shows_the_environment_and_the_multi_turn_generate(tmp_path):
    plan, _, _ = _plan(tmp_path)
    text = render_text(plan, color=False, width=200)
    lines = text.splitlines()
    assert "Environments (multi-turn episodes)" in text
    assert any("env calc" in line and "rlgraph.workers.envs.calculator:Calculator" in line for line in lines)
    assert "limits    up to 3 turns · replies cut at 8 tokens · 10 s per call · tool format auto" in text
    assert ("failures  a failed episode scores 0 and is left out of the loss; the run stops above 10% failed in a "
            "step") in text
    assert "used by   rollout.generate(env = calc)" in text
    assert "episodes  4 processes per rollout process (actor/0–1), on its host" in text
    generate_row = next(line for line in lines if line.lstrip().startswith("1 ") and "rollout.generate" in line)
    assert "rollout.generate  multi-turn: up to 3 turns with env calc (4 processes) [actor/0–1]" in generate_row
    # the environments come before the schedule, after the devices
    assert text.index("Devices") < text.index("Environments") < text.index("Schedule")


def test_the_html_plan_shows_the_environment_and_the_multi_turn_generate(tmp_path):
    plan, _, _ = _plan(tmp_path)
    page = render_html(plan)
    assert "<h2>Environments" in page and 'data-env="calc"' in page
    assert "rlgraph.workers.envs.calculator:Calculator" in page and "rollout.generate(env = calc)" in page
    assert "4 processes per rollout process (actor/0–1), on its host" in page
    assert "up to 3 turns · replies cut at 8 tokens" in page and "the run stops above 10% failed" in page
    assert '<span class="note">multi-turn: up to 3 turns with env calc (4 processes)</span>' in page
    assert "actor/0–1 · env calc" in page  # the dataflow box of the generate call


def test_a_plan_without_envs_shows_no_environment_section(tmp_path):
    plan, diagnostics, _ = _plan(tmp_path, step=GRPO_STEP, env="")
    assert diagnostics == [] and plan.envs == {}
    assert "Environments" not in render_text(plan, color=False, width=200)
    page = render_html(plan)
    assert "Environments" not in page and "multi-turn" not in page


def test_a_plan_with_errors_in_its_env_still_renders(tmp_path):
    plan, diagnostics, _ = _plan(tmp_path, env="env calc { max_turns = 2 }")
    assert sorted(d.code for d in diagnostics) == ["env-budget", "missing-key"]
    text = render_text(plan, color=False, width=200)
    assert "env calc  —" in text and "up to 2 turns" in text  # no class (reported): the rest is shown
    assert 'data-env="calc"' in render_html(plan)


def test_an_env_with_a_wrong_value_shows_no_settings_the_spec_did_not_write(tmp_path):
    plan, diagnostics, _ = _plan(tmp_path, env=CALC.replace("max_turns = 3", "max_turns = 0"))
    assert [d.code for d in diagnostics] == ["wrong-type"]
    # the default (4 turns) in place of the wrong 0 would be a setting nobody wrote: the env has none
    assert plan.envs == {} and plan.call("rollout.generate").settings is None
    text = render_text(plan, color=False, width=200)
    assert "turns" not in text and "Environments" not in text
    assert "up to 4 turns" not in render_html(plan)
