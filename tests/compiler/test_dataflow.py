"""rlgraph/compiler/passes/dataflow.py: the step generates; fields are produced once, used, acyclic, well-kinded."""

from .helpers import GRPO_STEP, PPO_ROLES, PPO_STEP, compile_text, found, line_of, only, spec


def test_a_well_formed_step_has_no_dataflow_diagnostics(tmp_path):
    assert found(compile_text(tmp_path, spec(GRPO_STEP))) == []
    assert found(compile_text(tmp_path, spec(PPO_STEP, PPO_ROLES))) == []


def test_undefined_field_suggests_a_produced_one(tmp_path):
    text = spec(GRPO_STEP.replace("old_log_prob, advantages ->", "old_log_prob, advantage ->"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("undefined-field", line_of(text, "advantage -> actor"))]
    d = only(result, "undefined-field")
    assert d.message == "`advantage` is used by `actor.update`, but no call produces it"
    assert d.label == "did you mean `advantages`?"
    assert (d.span.column, d.span.end_column) == (17, 26)


def test_undefined_field_without_a_close_name(tmp_path):
    text = spec(GRPO_STEP.replace("scores -> grpo", "bonus -> grpo"))
    result = compile_text(tmp_path, text)
    assert ("undefined-field", line_of(text, "bonus ->")) in found(result)
    assert only(result, "undefined-field").label == "never produced"


def test_output_of_a_rejected_call_is_not_undefined(tmp_path):
    text = spec(GRPO_STEP.replace("-> exact ->", "-> exakt ->"))
    assert found(compile_text(tmp_path, text)) == [("unknown-call", line_of(text, "exakt"))]


def test_field_produced_twice_points_at_the_second(tmp_path):
    text = spec(GRPO_STEP + "\n  responses -> format -> scores",
                extra='reward format { fn = "rlgraph.tasks.arith:format_ok" }')
    result = compile_text(tmp_path, text)
    assert found(result) == [("duplicate-field", line_of(text, "-> format ->"))]
    d = only(result, "duplicate-field")
    assert d.message == "`scores` is produced twice, by `exact` and by `format`"
    assert d.notes[0][0] == "first produced by `exact`" and d.notes[0][1].line == line_of(text, "-> exact ->")


def test_a_call_cannot_produce_the_data_field(tmp_path):
    text = spec(GRPO_STEP + "\n  responses -> exact2 -> prompts", extra='reward exact2 { fn = "m:f" }')
    result = compile_text(tmp_path, text)
    assert ("duplicate-field", line_of(text, "-> exact2 ->")) in found(result)
    assert "comes from the data" in only(result, "duplicate-field").message


def test_unused_field_is_a_warning(tmp_path):
    text = spec(GRPO_STEP.replace("-> advantages\n", "-> advantages, returns\n"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("unused-field", line_of(text, "returns"))]
    d = only(result, "unused-field")
    assert d.severity == "warning"
    assert d.hints == ("drop `returns` from the outputs of `grpo_advantage`, or use it in a call",)


def test_unused_output_of_a_call_whose_outputs_are_all_unused(tmp_path):
    text = spec(GRPO_STEP + "\n  responses -> actor.log_prob -> spare")
    d = only(compile_text(tmp_path, text), "unused-field")
    assert d.hints == ("use `spare` in a call, or remove the call `actor.log_prob`",)


def test_a_cycle_is_reported_as_its_path(tmp_path):
    step = GRPO_STEP.replace("scores -> grpo_advantage -> advantages",
                             "advantages, old_log_prob, old_log_prob -> kl_penalty -> rewards\n"
                             "  rewards -> grpo_advantage -> advantages")
    text = spec(step, PPO_ROLES)
    result = compile_text(tmp_path, text)
    d = only(result, "cycle")
    assert d.message == "the step's dataflow has a cycle: kl_penalty -> grpo_advantage -> kl_penalty"
    assert d.span.line == line_of(text, "-> kl_penalty ->") and d.span.column == 3  # at `advantages`
    assert d.notes[0][0] == "`rewards` flows from `kl_penalty` to `grpo_advantage`"


def test_a_call_consuming_its_own_output_is_a_cycle(tmp_path):
    text = spec(GRPO_STEP.replace("scores -> grpo_advantage", "advantages -> grpo_advantage"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("cycle", line_of(text, "grpo")), ("unused-field", line_of(text, "-> exact ->"))]
    assert only(result, "cycle").message == "the step's dataflow has a cycle: grpo_advantage -> grpo_advantage"


def test_responses_where_per_token_values_belong(tmp_path):
    text = spec(GRPO_STEP.replace("scores -> grpo_advantage", "responses -> grpo_advantage"))
    result = compile_text(tmp_path, text)
    assert ("field-type", line_of(text, "responses -> grpo")) in found(result)
    d = only(result, "field-type")
    assert d.message == ("`grpo_advantage` expects per-token values as `rewards`, but `responses` holds "
                         "generated responses (from `rollout.generate`)")


def test_per_token_values_where_responses_belong(tmp_path):
    text = spec(GRPO_STEP.replace("responses -> actor.log_prob", "scores -> actor.log_prob"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("field-type", line_of(text, "scores -> actor.log_prob"))]
    assert only(result, "field-type").hints == (
        "`actor.log_prob` takes generated responses there, such as `responses`",)


def test_prompts_are_not_responses(tmp_path):
    text = spec(GRPO_STEP.replace("responses -> exact", "prompts -> exact"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("field-type", line_of(text, "prompts -> exact"))]
    assert "`prompts` holds prompts (from the data)" in only(result, "field-type").message


def test_a_spec_without_a_step(tmp_path):
    text = spec(None)
    result = compile_text(tmp_path, text)
    assert found(result) == [("missing-block", 1)]  # and no role is reported unused or not updated
    d = only(result, "missing-block")
    assert d.message == "the spec has no `step` block"
    assert (d.span.column, d.span.end_column) == (1, len("rlgraph 1") + 1)


def test_a_step_that_never_generates(tmp_path):
    text = spec(GRPO_STEP.replace("  prompts -> rollout.generate -> responses\n", ""))
    result = compile_text(tmp_path, text)
    assert found(result) == sorted([("algorithm", line_of(text, "step {")),
                                    ("undefined-field", line_of(text, "-> exact ->")),
                                    ("undefined-field", line_of(text, "-> actor.log_prob ->")),
                                    ("unused-role", line_of(text, "role rollout"))])
    assert only(result, "algorithm").hints == ("start the step with `prompts -> rollout.generate -> responses`",)
