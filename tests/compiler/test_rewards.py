"""Declared rewards: a function (`fn`) or a service (`url`), one of them, with only its own kind's keys and an
http(s) address; a spec whose reward is a service plans, the reward on the driver with no device of its own."""

import json

import pytest

from rlgraph.diagnostics.render import render_concise
from rlgraph.plan.build import plan_spec
from rlgraph.plan.model import Plan

from .helpers import compile_text, found, line_of, only, spec

FUNCTION = 'reward exact { fn = "rlgraph.tasks.arith:exact_match" }'
URL = "http://127.0.0.1:8000/score"


def with_reward(block: str) -> str:
    """helpers.spec (a GRPO step that calls `exact`) with `exact` declared as `block`."""
    text = spec(devices=1)
    assert FUNCTION in text
    return text.replace(FUNCTION, block)


def test_a_service_reward_checks_and_plans_on_the_driver_with_its_settings(tmp_path):
    text = with_reward(f'reward exact {{ url = "{URL}"  concurrency = 4  retries = 5  backoff_s = 0.1  '
                       "rows_per_request = 16  timeout_s = 2  max_invalid_fraction = 0.25 }")
    compilation = compile_text(tmp_path, text)
    assert found(compilation) == []
    plan, diagnostics = plan_spec(compilation)
    assert plan.ok and diagnostics == []
    assert plan.rewards == {"exact": None}
    guards = plan.reward_settings["exact"]
    assert (guards.url, guards.concurrency, guards.retries, guards.backoff_s, guards.rows_per_request,
            guards.timeout_s, guards.max_invalid_fraction) == (URL, 4, 5, 0.1, 16, 2.0, 0.25)
    assert {p.role for p in plan.placements} == {"actor", "rollout"}  # the reward takes no device
    assert plan.call("exact").kind == "reward"
    again = Plan.from_dict(json.loads(plan.to_json()))  # a run can start from plan.json
    assert again.rewards == plan.rewards and again.reward_settings == plan.reward_settings


def test_a_function_reward_gets_no_url_in_its_settings(tmp_path):
    plan, _ = plan_spec(compile_text(tmp_path, spec()))
    assert plan.rewards == {"exact": "rlgraph.tasks.arith:exact_match"} and plan.reward_settings["exact"].url is None


def test_fn_and_url_together_are_one_error_at_the_url_with_a_fix(tmp_path):
    text = with_reward(f'reward exact {{ fn = "rlgraph.tasks.arith:exact_match"  url = "{URL}" }}')
    result = compile_text(tmp_path, text)
    d = only(result, "conflicting-keys")
    line = line_of(text, "reward exact")
    column = text.splitlines()[line - 1].index(f'"{URL}"') + 1  # the url's value
    assert (d.span.line, d.span.column) == (line, column)
    assert d.message == "reward `exact` sets both `fn` and `url`" and "keep one" in d.hints[0]
    assert render_concise([d]).startswith(f"{tmp_path / 'spec.rl'}:{line}:{column}: error[conflicting-keys]")


def test_a_service_over_an_included_function_reward_says_where_fn_came_from(tmp_path):
    base = spec(devices=1)
    (tmp_path / "base.rl").write_text(base)
    text = f'rlgraph 1\ninclude "base.rl"\nreward exact {{ url = "{URL}" }}\n'
    d = only(compile_text(tmp_path, text, "top.rl"), "conflicting-keys")
    assert d.span.file.endswith("top.rl") and "a name of its own" in d.hints[0]
    assert f"base.rl:{line_of(base, 'reward exact')} (the blocks of an include merge)" in d.hints[0]


def test_a_reward_with_neither_is_a_missing_key_naming_both_ways(tmp_path):
    text = with_reward("reward exact { max_invalid_fraction = 0.1 }")
    d = only(compile_text(tmp_path, text), "missing-key")
    assert d.span.line == line_of(text, "reward exact")
    assert d.message == "reward `exact` names no function and no service"
    assert "fn = " in d.hints[0] and f'url = "{URL}"' in d.hints[0]


@pytest.mark.parametrize("url, problem", [
    ("ftp://127.0.0.1/score", "the scheme is ftp, not http or https"),
    ("127.0.0.1:8000/score", "the scheme is missing, not http or https"),
    ("http:///score", "it names no host"),
    ("http://127.0.0.1:99999/score", "Port out of range"),
])
def test_a_url_that_is_no_http_address_is_an_error_and_the_reward_is_left_out_of_the_plan(tmp_path, url, problem):
    text = with_reward(f'reward exact {{ url = "{url}" }}')
    compilation = compile_text(tmp_path, text)
    d = only(compilation, "wrong-type")
    assert d.message.startswith(f"`{url}` is not a service address: ") and problem in d.message
    assert d.span.line == line_of(text, "reward exact") and "http://" in d.hints[0]
    plan, _ = plan_spec(compilation)
    assert not plan.ok and "exact" not in plan.reward_settings


def test_a_key_of_the_other_kind_of_reward_is_an_error_at_the_key(tmp_path):
    text = with_reward(f'reward exact {{ url = "{URL}"\n  workers = 8\n  batched = true }}')
    result = compile_text(tmp_path, text)
    assert found(result) == [("reward-kind", line_of(text, "workers")), ("reward-kind", line_of(text, "batched"))]
    d = next(d for d in result.diagnostics if "`workers`" in d.message)
    assert d.message == "`workers` is a function's (`fn`) key; reward `exact` is a service"
    assert d.hints[0].startswith("remove `workers`") and "`concurrency`" in d.hints[0]
    text = with_reward('reward exact { fn = "rlgraph.tasks.arith:exact_match"\n  concurrency = 4 }')
    d = only(compile_text(tmp_path, text), "reward-kind")
    assert d.span.line == line_of(text, "concurrency") and "reward `exact` is a function" in d.message


@pytest.mark.parametrize("setting", ["concurrency = 0", "concurrency = 257", "retries = -1", "retries = 101",
                                     "backoff_s = -0.5", "backoff_s = 61", "rows_per_request = 0", "timeout_s = 0",
                                     "max_invalid_fraction = 1.5", "concurrency = 2.5"])
def test_a_service_setting_out_of_range_is_a_wrong_type_at_its_value(tmp_path, setting):
    text = with_reward(f'reward exact {{ url = "{URL}"\n  {setting} }}')
    d = only(compile_text(tmp_path, text), "wrong-type")
    assert d.span.line == line_of(text, setting) and setting.split()[0] in d.message
