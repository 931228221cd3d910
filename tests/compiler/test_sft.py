"""Supervised fine-tuning in the compiler: `demos -> actor.sft` is a step of its own (no generate beside it), on
data with responses, and a stage's model (`path = "run:SPEC.rl"`) is that spec's actor's."""

from __future__ import annotations

from .helpers import compile_text, found, line_of, only

SFT_ROLES = "role actor { model = policy  pool = main  optim { lr = 1e-3 } }"


def sft_spec(step: str = "  demos -> actor.sft", roles: str = SFT_ROLES, train: str = "builtin:arith/sft",
             model: str = "builtin:arith-gpt-init") -> str:
    return "\n".join([
        "rlgraph 1", f'model policy {{ path = "{model}" }}', "pool main { nodes = 1  devices_per_node = 1 }", roles,
        f'data {{ train = "{train}"  batch_size = 16  max_response_length = 4 }}', "step {\n" + step + "\n}"]) + "\n"


def test_an_sft_step_compiles_and_plans_with_one_demonstration_per_row(tmp_path):
    from rlgraph.plan.build import plan_spec

    result = compile_text(tmp_path, sft_spec("  demos -> actor.sft(epochs = 2, minibatch = 8)"))
    assert result.diagnostics == []
    plan, diagnostics = plan_spec(result)
    assert diagnostics == []
    call = plan.call("actor.sft")
    assert (call.settings.epochs, call.settings.minibatch, call.settings.mini_batch_size) == (2, 8, 8)
    assert plan.syncs == [] and plan.data.max_response_length == 4


def test_sft_beside_a_generate_is_an_error_that_points_at_stages(tmp_path):
    step = "\n".join(["  prompts -> rollout.generate -> responses", "  responses -> exact -> scores",
                      "  demos -> actor.sft"])
    roles = SFT_ROLES + "\nrole rollout { colocate = actor  n = 2 }\nreward exact { fn = \"rlgraph.tasks.arith:exact_match\" }"
    text = sft_spec(step, roles)
    result = compile_text(tmp_path, text)
    d = only(result, "algorithm")
    assert d.span.line == line_of(text, "demos -> actor.sft")
    assert "both generates and trains on demonstrations" in d.message and "run:" in " ".join(d.hints)


def test_demonstrations_from_a_built_in_split_without_responses_are_an_error(tmp_path):
    text = sft_spec(train="builtin:arith/train")
    result = compile_text(tmp_path, text)
    assert found(result) == [("data-path", line_of(text, "data {"))]
    d = only(result, "data-path")
    assert "holds prompts without responses" in d.message and "`builtin:arith/sft`" in d.hints[0]


def test_demos_into_a_generate_is_a_kind_error(tmp_path):
    roles = SFT_ROLES + "\nrole rollout { colocate = actor  n = 2 }"
    text = sft_spec("  demos -> rollout.generate -> responses\n  demos -> actor.sft", roles)
    d = only(compile_text(tmp_path, text), "field-type")
    assert d.span.line == line_of(text, "demos -> rollout") and "holds demonstrations" in d.message


def test_a_stage_names_a_spec_that_exists_and_trains_an_actor(tmp_path):
    (tmp_path / "first.rl").write_text(sft_spec())
    ok = compile_text(tmp_path, sft_spec(model="run:first.rl"), name="second.rl")
    assert ok.diagnostics == []
    text = sft_spec(model="run:missing.rl")
    d = only(compile_text(tmp_path, text, name="third.rl"), "model-path")
    assert "there is no spec `missing.rl`" in d.message and d.span.line == line_of(text, "model policy")


def test_a_stage_before_its_run_has_the_shape_of_the_model_its_spec_starts_from(tmp_path):
    from rlgraph.plan.build import plan_spec

    (tmp_path / "first.rl").write_text(sft_spec())
    staged, _ = plan_spec(compile_text(tmp_path, sft_spec(model="run:first.rl"), name="second.rl"))
    direct, _ = plan_spec(compile_text(tmp_path, sft_spec(), name="direct.rl"))
    assert staged.memory[0].breakdown["actor/params"] > 0
    assert [m.breakdown for m in staged.memory] == [m.breakdown for m in direct.memory]


def test_asynchronous_sft_is_an_error(tmp_path):
    text = sft_spec() + "train { steps = 2  staleness = 1 }\n"
    d = only(compile_text(tmp_path, text), "async-no-rollout")
    assert d.span.line == line_of(text, "staleness")


def test_a_stage_whose_spec_has_errors_is_an_error_here_too(tmp_path):
    (tmp_path / "first.rl").write_text(sft_spec(train="builtin:arith/train"))  # demos on rows without responses
    text = sft_spec(model="run:first.rl")
    d = only(compile_text(tmp_path, text, name="second.rl"), "model-path")
    assert "does not check clean (1 error)" in d.message and "rlgraph check" in d.hints[0]
    (tmp_path / "loop.rl").write_text(sft_spec(model="run:loop.rl"))  # a stage that names itself: no endless check
    compile_text(tmp_path, (tmp_path / "loop.rl").read_text(), name="loop.rl")
