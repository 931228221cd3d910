"""actor.update(tis = ...): where the rollout's log-probs come from, checked before anything runs.

The error and warning texts are golden files (golden/tis_log_probs.rl, golden/tis_no_effect.rl); here, the
cases between them and what planning makes of the arguments."""

import pytest

from rlgraph.plan import build_plan

from .helpers import ACTOR_ONLY, GRPO_STEP, compile_text, found, line_of, only, spec

KEPT = GRPO_STEP.replace("-> responses\n", "-> responses, rollout_log_prob\n", 1)


def update(step: str, arguments: str) -> str:
    return step.replace("-> actor.update", f"-> actor.update({arguments})")


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_reads_the_kept_log_probs_so_they_are_used(tmp_path, level):
    result = compile_text(tmp_path, spec(update(KEPT, f"tis = {level}")))
    assert found(result) == []
    settings = build_plan(result).call("actor.update").settings
    assert (settings.tis, settings.tis_cap) == (level, 2.0)
    assert build_plan(result).call("rollout.generate").settings.keep_log_probs


def test_kept_log_probs_without_tis_are_unused(tmp_path):
    text = spec(KEPT)
    result = compile_text(tmp_path, text)
    assert found(result) == [("unused-field", line_of(text, "rollout_log_prob"))]
    assert build_plan(result).call("actor.update").settings.tis == "off"


def test_tis_without_kept_log_probs_points_at_the_argument(tmp_path):
    text = spec(update(GRPO_STEP, "tis = token, tis_cap = 3.0"))
    d = only(compile_text(tmp_path, text), "algorithm")
    line = text.splitlines()[d.span.line - 1]
    assert line[d.span.column - 1 : d.span.end_column - 1] == "token"
    assert d.hints == ("keep them as a second output: `prompts -> rollout.generate -> responses, rollout_log_prob`, "
                       "or set tis = off",)


def test_tis_cap_below_one_is_refused(tmp_path):
    result = compile_text(tmp_path, spec(update(KEPT, "tis = token, tis_cap = 0.5")))
    assert [d.code for d in result.diagnostics] == ["wrong-type"]


def test_tis_on_recomputed_log_probs_with_a_rollout_of_its_own(tmp_path):
    roles = ACTOR_ONLY.replace("role rollout { colocate = actor  n = 4 }",
                               "role rollout { model = policy  pool = gen  n = 4 }")
    step = "  sync actor -> rollout\n" + update(KEPT, "tis = token")
    result = compile_text(tmp_path, spec(step, roles, extra="pool gen { nodes = 1  devices_per_node = 1 }"))
    assert [d for d in result.diagnostics if d.severity == "error"] == []
    assert "no-effect" not in {d.code for d in result.diagnostics}
