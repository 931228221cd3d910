"""On-policy distillation with the teacher's whole distribution, run as a user runs it: specs/distill_arith_gkd.rl
(the student samples, `teacher.top_k` scores every position, `actor.distill` trains on the divergence)."""

from __future__ import annotations

from statistics import mean

from .helpers import REPO, fast, read_metrics


def test_a_distillation_run_brings_the_student_toward_the_teacher(run_cli, tmp_path):
    """Two runs of the shipped spec from the same seed, one with the learning rate at 0: the student that learns
    diverges less from the teacher, on its own samples, than the frozen one does on its."""
    text = (REPO / "specs" / "distill_arith_gkd.rl").read_text()
    spec = tmp_path / "distill.rl"  # four epochs of four mini-batches a step: a few steps move the student
    spec.write_text(text.replace("actor.distill(beta = 0.0)", "actor.distill(beta = 0.0, epochs = 4, minibatch = 16)"))

    def divergences(name: str, lr: float) -> list[float]:
        code, out = run_cli(spec, "--output", tmp_path / name,
                            *fast(steps=6, batch_size=64, **{"actor.optim.lr": lr, "actor.optim.warmup_steps": 0}))
        assert code == 0, out
        return [r["actor/distill_loss"] for r in read_metrics(tmp_path / name) if "actor/distill_loss" in r]

    frozen, learning = divergences("frozen", 0.0), divergences("learning", 1e-3)
    assert len(frozen) == len(learning) == 6
    assert mean(learning) < 0.8 * mean(frozen) and mean(learning[-2:]) < 0.8 * mean(frozen[-2:]), (frozen, learning)
