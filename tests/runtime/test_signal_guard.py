"""rlgraph/runtime/signal_guard.py: steps whose every advantage was 0 are warned of once they come in a row."""

from __future__ import annotations

from rlgraph.runtime.signal_guard import WARN_AFTER_STEPS, SignalGuard


def steps(guard: SignalGuard, flags: list[float]) -> list[str]:
    said: list[str] = []
    for step, flag in enumerate(flags, start=1):
        guard.observe(step, {"batch/zero_advantage_step": flag, "critic/score/mean": 0.0,
                             "response_length/clip_ratio": 1.0}, said.append)
    return said


def test_a_warning_once_the_third_equal_step_in_a_row_comes_with_the_likely_causes():
    assert WARN_AFTER_STEPS == 3
    [warning] = steps(SignalGuard(), [1.0] * 6)  # once for the whole stretch, not every step after
    assert "steps 1-3: every advantage was 0" in warning
    assert "in every group all samples got the same score (critic/score/mean = 0)" in warning
    for cause in ("SFT", "always 0, or always 1", "tokenizer does not decode", "max_new_tokens"):
        assert cause in warning
    assert "response_length/clip_ratio = 1.00" in warning  # what tells max_new_tokens is the cause


def test_a_step_with_a_signal_starts_the_count_again():
    assert steps(SignalGuard(), [1.0, 1.0, 0.0, 1.0, 1.0]) == []
    [warning] = steps(SignalGuard(), [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    assert "steps 4-6" in warning
    assert steps(SignalGuard(), [None, None, None]) == []  # n = 1: no groups, no metric, no warning
