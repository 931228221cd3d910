"""On-policy distillation with the teacher's whole distribution in the compiler and the planner:
`responses -> teacher.top_k -> teacher_top_k`, `teacher_top_k -> actor.distill`: the field kind is checked at the
line that names it, the arguments are checked, the settings resolve (the student's temperature is the teacher
call's), and the plan counts the distill's backward as it counts an update's."""

from __future__ import annotations

from .helpers import compile_text, line_of, only

ROLES = """\
model teacher_model { path = "builtin:arith-gpt-teacher" }
role actor { model = policy  pool = main  optim { lr = 1e-4 } }
role rollout { colocate = actor  n = 4  max_new_tokens = 4 }
role teacher { kind = ref  model = teacher_model  colocate = actor }"""

GKD_STEP = """\
  prompts -> rollout.generate -> responses
  responses -> teacher.top_k(k = 8, temperature = 0.9) -> teacher_top_k
  teacher_top_k -> actor.distill(beta = 0.5, epochs = 2, minibatch = 16)"""


def gkd_spec(step: str = GKD_STEP, roles: str = ROLES) -> str:
    return "\n".join([
        "rlgraph 1", 'model policy { path = "builtin:arith-gpt" }', "pool main { nodes = 1  devices_per_node = 1 }",
        roles, 'data { train = "builtin:arith/train"  batch_size = 32 }', "step {\n" + step + "\n}"]) + "\n"


def test_a_gkd_step_compiles_and_its_settings_resolve(tmp_path):
    from rlgraph.contract.settings import ActorDistillSettings, TopKSettings
    from rlgraph.plan.build import plan_spec

    result = compile_text(tmp_path, gkd_spec())
    assert result.diagnostics == []
    plan, diagnostics = plan_spec(result)
    assert diagnostics == []
    assert plan.call("teacher.top_k").settings == TopKSettings(k=8, temperature=0.9, micro_batch=None,
                                                               micro_batch_tokens=None)
    # mini-batches count prompts, as an update's: 16 prompts x n = 4 samples; the student at the teacher's temperature
    assert plan.call("actor.distill").settings == ActorDistillSettings(
        epochs=2, minibatch=16, mini_batch_size=64, micro_batch=None, micro_batch_tokens=None, loss_agg="token-mean",
        beta=0.5, temperature=0.9)
    assert [s.calls for s in plan.schedule] == [["rollout.generate"], ["teacher.top_k"], ["actor.distill"]]


def test_per_token_values_into_distill_are_a_kind_error_at_their_line(tmp_path):
    step = "\n".join(["  prompts -> rollout.generate -> responses", "  responses -> teacher.log_prob -> teacher_lp",
                      "  teacher_lp -> actor.distill"])
    text = gkd_spec(step)
    d = only(compile_text(tmp_path, text), "field-type")
    assert d.span.line == line_of(text, "teacher_lp -> actor.distill")
    assert d.span.column == text.splitlines()[d.span.line - 1].index("teacher_lp") + 1
    assert "top-k" in d.message and "per-token values" in d.message


def test_a_teacher_s_top_k_is_no_advantage(tmp_path):
    step = "\n".join(["  prompts -> rollout.generate -> responses", "  responses -> actor.log_prob -> old_log_prob",
                      "  responses -> teacher.top_k -> teacher_top_k",
                      "  old_log_prob, teacher_top_k -> actor.update"])
    text = gkd_spec(step)
    d = only(compile_text(tmp_path, text), "field-type")
    assert d.span.line == line_of(text, "old_log_prob, teacher_top_k -> actor.update")
    assert "holds a teacher's top-k" in d.message


def test_distill_arguments_are_checked_where_they_are_written(tmp_path):
    text = gkd_spec(GKD_STEP.replace("beta = 0.5", "beta = 1.5").replace("k = 8", "k = 0"))
    result = compile_text(tmp_path, text)
    codes = sorted((d.code, d.span.line) for d in result.diagnostics)
    assert codes == [("wrong-type", line_of(text, "teacher.top_k")), ("wrong-type", line_of(text, "actor.distill"))]
    text = gkd_spec(GKD_STEP.replace("beta = 0.5", "betta = 0.5"))
    d = only(compile_text(tmp_path, text), "unknown-key")
    assert d.span.line == line_of(text, "actor.distill") and "beta" in " ".join(d.hints)


def test_the_distill_is_a_trained_call_once_a_step(tmp_path):
    text = gkd_spec(GKD_STEP + "\n  teacher_top_k -> actor.distill")
    assert only(compile_text(tmp_path, text), "duplicate-update").span.line == len(text.splitlines()) - 1
    # and an actor that distills is updated: no `not-updated`
    assert "not-updated" not in {d.code for d in compile_text(tmp_path, gkd_spec()).diagnostics}


def test_the_plan_counts_a_distill_s_backward_over_its_mini_batch(tmp_path):
    """The distill's backward holds a mini-batch's activations (minibatch x n samples) and the gradients: a larger
    mini-batch raises the device's peak (the teacher's forward kept small by its own micro-batch)."""
    from rlgraph.plan.build import plan_spec

    def plan(minibatch: int):
        step = GKD_STEP.replace("top_k(k = 8, temperature = 0.9)", "top_k(micro_batch = 4)").replace(
            "minibatch = 16", f"minibatch = {minibatch}")
        built, diagnostics = plan_spec(compile_text(tmp_path, gkd_spec(step), name=f"m{minibatch}.rl"))
        assert diagnostics == []
        return built.memory[0]

    small, large = plan(4), plan(32)
    assert {"actor/grads", "actor/optimizer"} <= set(small.breakdown)
    assert large.breakdown["actor/activations"] > 4 * small.breakdown["actor/activations"]
    assert large.estimated_bytes > small.estimated_bytes
