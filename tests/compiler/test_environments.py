"""rlgraph/compiler/passes/environments.py and the `env` block: names, limits and the response budget, checked
without importing the environment."""

from __future__ import annotations

import pytest

from .helpers import GRPO_STEP, compile_text, found, line_of, only, spec

ENV_STEP = GRPO_STEP.replace("rollout.generate", "rollout.generate(env = calc)")
CALC = """\
env calc {
  class = "rlgraph.workers.envs.calculator:Calculator"
  max_turns = 3
  max_observation_tokens = 8
}"""
ROLES = """\
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4  max_new_tokens = 32 }"""


def _spec(env: str = CALC, step: str = ENV_STEP, roles: str = ROLES, extra: str = "") -> str:
    return spec(step, roles, extra="\n".join(part for part in (env, extra) if part))


def test_a_declared_env_on_a_generate_call_checks_cleanly(tmp_path):
    result = compile_text(tmp_path, _spec())
    assert found(result) == []
    env = result.program.envs["calc"]
    assert (env["max_turns"], env["max_observation_tokens"], env["timeout_s"], env["workers"],
            env["max_failed_fraction"], env["tool_format"], env["args"]) == (3, 8, 30.0, 4, 0.1, "auto", {})
    assert result.graph.generate_calls()[0].kwargs["env"] == "calc"


def test_an_undeclared_env_is_an_error_at_the_call_with_did_you_mean(tmp_path):
    text = _spec(step=ENV_STEP.replace("env = calc", "env = calk"))
    d = only(compile_text(tmp_path, text), "unknown-env")
    assert d.severity == "error" and d.message == "`calk` is not a declared env"
    line = line_of(text, "env = calk")
    assert (d.span.line, d.span.column) == (line, text.splitlines()[line - 1].index("calk") + 1)
    assert d.label == "did you mean `calc`?"
    assert d.hints == ("declared envs: `calc`",)


def test_an_env_in_a_spec_without_envs_says_how_to_declare_one(tmp_path):
    result = compile_text(tmp_path, _spec(env=""))
    d = only(result, "unknown-env")
    assert d.hints == ('declare it: `env calc { class = "package.module:Class" }`',)
    assert [code for code, _ in found(result)] == ["unknown-env"]


def test_a_quoted_env_name_is_a_wrong_type(tmp_path):
    text = _spec(step=ENV_STEP.replace("env = calc", 'env = "calc"'))
    d = only(compile_text(tmp_path, text), "wrong-type")
    assert "expected the name of a declared env (a bare word, no quotes)" in d.message
    assert d.span.line == line_of(text, 'env = "calc"')


def test_an_env_no_generate_uses_is_a_warning_at_its_name(tmp_path):
    text = _spec(step=GRPO_STEP)
    result = compile_text(tmp_path, text)
    assert found(result) == [("unused-env", line_of(text, "env calc"))]
    d = only(result, "unused-env")
    assert d.severity == "warning"
    assert d.hints == ("use it: `prompts -> ROLLOUT.generate(env = calc) -> responses`, or remove it",)


@pytest.mark.parametrize("value", ["calculator.Calculator", "rlgraph.workers.envs.calculator:", ":Calculator",
                                   "my-envs:Calc", "envs.py:not a class", "a..b:C"])
def test_a_class_that_names_no_python_class_is_an_error(tmp_path, value):
    text = _spec(env=CALC.replace("rlgraph.workers.envs.calculator:Calculator", value))
    d = only(compile_text(tmp_path, text), "wrong-type")
    assert d.message == f"`{value}` does not name a Python class" and d.span.line == line_of(text, "class =")
    assert d.hints == ('write `class = "package.module:Class"` or `class = "path/to/file.py:Class"`',)


@pytest.mark.parametrize("value", ["tools/my_envs.py:Calc", "my_envs:Outer.Calc", "no_such_package.envs:Env"])
def test_a_class_is_checked_as_text_and_may_name_a_file_next_to_the_spec(tmp_path, value):
    text = _spec(env=CALC.replace("rlgraph.workers.envs.calculator:Calculator", value))
    assert found(compile_text(tmp_path, text)) == []


def test_check_never_imports_the_environment(tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "boom_env.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Env: pass\n")
    text = _spec(env=CALC.replace("rlgraph.workers.envs.calculator:Calculator", "boom_env.py:Env"))
    assert found(compile_text(tmp_path, text)) == []
    text = _spec(env=CALC.replace("rlgraph.workers.envs.calculator:Calculator", "boom_env:Env"))
    assert found(compile_text(tmp_path, text)) == []
    assert not marker.exists()


def test_an_env_without_a_class_is_a_missing_key(tmp_path):
    text = _spec(env="env calc { max_turns = 3  max_observation_tokens = 8 }")
    d = only(compile_text(tmp_path, text), "missing-key")
    assert d.message == "`env calc` needs `class`" and d.span.line == line_of(text, "env calc")


@pytest.mark.parametrize("entry, expected", [
    ("max_turns = 0", "expected an integer >= 1, got 0"),
    ("max_turns = 2.5", "expected an integer"),
    ("max_observation_tokens = 0", "expected an integer >= 1, got 0"),
    ("timeout_s = 0", "expected a number > 0.0, got 0"),
    ("timeout_s = -1", "expected a number > 0.0, got -1"),
    ("workers = 0", "expected an integer >= 1, got 0"),
    ("max_failed_fraction = 1.5", "expected a number <= 1.0, got 1.5"),
    ("max_failed_fraction = -0.1", "expected a number >= 0.0, got -0.1"),
    ("tool_format = xml", "expected one of `auto`, `tag`, `chat_template`"),
])
def test_limits_out_of_range_are_errors_at_their_value(tmp_path, entry, expected):
    text = _spec(env=CALC.replace("  max_turns = 3", f"  {entry}") if not entry.startswith("max_turns")
                 else CALC.replace("max_turns = 3", entry))
    d = only(compile_text(tmp_path, text), "wrong-type")
    key = entry.split(" =")[0]
    assert d.message == f"wrong value for `{key}`: {expected}"
    assert d.span.line == line_of(text, entry)


def test_the_limits_at_their_bounds_are_fine(tmp_path):
    env = CALC.replace("  max_turns = 3", "  max_turns = 1  timeout_s = 0.001  workers = 1  max_failed_fraction = 0"
                       "\n  tool_format = tag")
    assert found(compile_text(tmp_path, _spec(env=env))) == []
    env = CALC.replace("  max_turns = 3", "  max_failed_fraction = 1  tool_format = chat_template")
    assert found(compile_text(tmp_path, _spec(env=env))) == []


def test_args_are_free_form_keyword_arguments(tmp_path):
    env = CALC.replace("  max_turns = 3", '  max_turns = 3\n  args { digits = 4  mode = "strict"  ops = [1, 2] }')
    result = compile_text(tmp_path, _spec(env=env))
    assert found(result) == []
    assert result.program.envs["calc"]["args"] == {"digits": 4, "mode": "strict", "ops": [1, 2]}
    env = CALC.replace("  max_turns = 3", "  args { nested { x = 1 } }")
    text = _spec(env=env)
    d = only(compile_text(tmp_path, text), "wrong-type")
    assert d.message == "`args` holds values, not blocks"


def test_an_unknown_key_of_an_env_lists_the_allowed_ones(tmp_path):
    text = _spec(env=CALC.replace("max_turns = 3", "max_turn = 3"))
    d = only(compile_text(tmp_path, text), "unknown-key")
    assert d.hints[0] == "did you mean `max_turns`?" and d.span.line == line_of(text, "max_turn = 3")
    assert "`tool_format`" in d.hints[1]


def test_an_env_shares_the_namespace_of_declarations(tmp_path):
    text = _spec(env=CALC.replace("env calc", "env exact"), step=ENV_STEP.replace("env = calc", "env = exact"))
    d = only(compile_text(tmp_path, text), "duplicate-name")
    assert d.message == "`exact` is declared as a reward and as an env"


def test_a_reply_that_can_fill_the_response_budget_is_a_warning_at_the_limit(tmp_path):
    roles = ROLES.replace("max_new_tokens = 32", "max_new_tokens = 8")
    text = _spec(roles=roles)
    result = compile_text(tmp_path, text)
    assert found(result) == [("env-budget", line_of(text, "max_observation_tokens = 8"))]
    d = only(result, "env-budget")
    assert d.severity == "warning" and d.label == ">= max_new_tokens = 8"
    assert "one reply could take all of it" in d.message
    assert d.hints == ("set `max_observation_tokens` of `calc` below 8, e.g. 2, or raise max_new_tokens of `rollout`",)
    assert d.notes[0][1].line == line_of(text, "max_new_tokens = 8")
    # below the budget: fine
    assert found(compile_text(tmp_path, _spec(roles=roles.replace("max_new_tokens = 8", "max_new_tokens = 9")))) == []


def test_the_default_reply_limit_points_at_the_env_when_the_budget_is_small(tmp_path):
    text = _spec(env=CALC.replace("  max_observation_tokens = 8\n", ""))  # default 256 >= 32
    d = only(compile_text(tmp_path, text), "env-budget")
    assert d.span.line == line_of(text, "env calc") and "max_observation_tokens = 256" in d.message


def test_an_env_on_a_rollout_that_runs_ahead_is_allowed(tmp_path):
    roles = """\
role actor { model = policy  pool = main }
role rollout { model = policy  pool = gen  n = 4 }"""
    text = spec("  sync actor -> rollout\n" + ENV_STEP, roles, devices=1,
                extra=CALC + "\npool gen { nodes = 1  devices_per_node = 1 }\ntrain { staleness = 2 }")
    assert found(compile_text(tmp_path, text)) == []


def test_an_env_on_a_call_that_is_not_generate_is_an_unknown_argument(tmp_path):
    step = ENV_STEP.replace("responses -> actor.log_prob", "responses -> actor.log_prob(env = calc)")
    d = only(compile_text(tmp_path, _spec(step=step)), "unknown-key")
    assert d.message == "`actor.log_prob` takes no argument `env`"
