"""rlgraph/compiler/passes/asynchrony.py: train.staleness > 0 needs a rollout that can run while the actor trains."""

from .helpers import GRPO_STEP, compile_text, found, line_of, only, spec

SYNC_STEP = "  sync actor -> rollout\n" + GRPO_STEP
OWN_POOL = """\
role actor { model = policy  pool = main }
role rollout { model = policy  pool = gen  n = 4 }"""
COLOCATED = """\
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }"""
GEN_POOL = "pool gen { nodes = 1  devices_per_node = 1 }"


def _spec(roles: str, step: str = SYNC_STEP, staleness: int = 1) -> str:
    return spec(step, roles, devices=1, extra=f"{GEN_POOL}\ntrain {{ staleness = {staleness} }}")


def test_a_rollout_on_devices_of_its_own_may_run_ahead(tmp_path):
    assert found(compile_text(tmp_path, _spec(OWN_POOL))) == []


def test_a_colocated_rollout_cannot_overlap_with_training(tmp_path):
    text = _spec(COLOCATED)
    result = compile_text(tmp_path, text)
    d = only(result, "async-colocated")
    assert d.severity == "error" and d.span.line == line_of(text, "staleness = 1")
    assert "shares its devices and processes with `actor`" in d.message
    assert any("give `rollout` a pool of its own" in hint for hint in d.hints)
    assert d.notes[0][1].line == line_of(text, "colocate = actor")


def test_staleness_zero_is_the_synchronous_loop_anywhere(tmp_path):
    assert found(compile_text(tmp_path, _spec(COLOCATED, staleness=0))) == []


def test_a_rollout_that_never_gets_weights_has_no_staleness_bound(tmp_path):
    text = _spec(OWN_POOL, step=SYNC_STEP.replace("  sync actor -> rollout\n", ""))
    result = compile_text(tmp_path, text)
    assert ("async-no-sync", line_of(text, "staleness = 1")) in found(result)
    assert only(result, "async-no-sync").hints == ("add `sync actor -> rollout` to the step",)
