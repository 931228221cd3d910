"""Steps that teach nothing: a warning when every advantage of the step was 0 for WARN_AFTER_STEPS steps in a row
(`batch/zero_advantage_step`, rlgraph/runtime/metrics.py): with GRPO or RLOO, every group's samples got the same score.

A group estimator (GRPO, RLOO) gives such a group advantage 0, so the policy loss has no gradient and a run
trained from a model that never scores goes on for its whole length with exit 0 and nothing learned. A few such
steps at the start are common (a hard batch); several in a row mean something is wrong, and the causes are few.
"""

from __future__ import annotations

from typing import Any, Callable

FLAG = "batch/zero_advantage_step"
WARN_AFTER_STEPS = 3


class SignalGuard:
    def __init__(self) -> None:
        self.in_a_row: list[int] = []  # the steps in a row where every advantage was 0

    def observe(self, step: int, record: dict[str, Any], warn: Callable[[str], None]) -> None:
        """Warn once a run of equal-score steps reaches WARN_AFTER_STEPS (once per such run of steps)."""
        if record.get(FLAG) != 1.0:
            self.in_a_row = []
            return
        self.in_a_row.append(step)
        if len(self.in_a_row) == WARN_AFTER_STEPS:
            warn(f"[yellow]warning[/]: {message(self.in_a_row, record)}")


def message(steps: list[int], record: dict[str, Any]) -> str:
    score = record.get("critic/score/mean")
    clipped = record.get("response_length/clip_ratio")
    scored = f" (critic/score/mean = {score:.3g})" if score is not None else ""
    cut = f"; response_length/clip_ratio = {clipped:.2f}" if clipped is not None else ""
    return (f"steps {steps[0]}-{steps[-1]}: every advantage was 0 (batch/zero_advantage_groups = 1.0: with GRPO or "
            f"RLOO, in every group all samples got the same score{scored}), so the policy learns nothing from the "
            "reward. "
            "Likely causes: the model cannot yet produce a scoring answer (start from a warm-started or SFT "
            "checkpoint, or easier prompts); the reward returns the same value for everything (look at "
            "samples.jsonl: always 0, or always 1); the tokenizer does not decode what it encodes (pre-flight "
            f"warns of it); the rollout's max_new_tokens is too short to hold an answer{cut}.")
