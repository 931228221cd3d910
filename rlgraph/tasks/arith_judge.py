"""A verdict parser for a judge on builtin:arith (specs/grpo_arith_judge.rl).

The judge model is asked the sample's question itself (its template is `{{ prompt }}`: a tiny built-in model
reads nothing but sums) and its own answer is the verdict; the response is right when it says the same.
Nothing here reads the ground truth: the judge is as right as its model (builtin:arith-gpt-teacher adds
86.2% of the sums right, greedy).
"""

from __future__ import annotations

from typing import Any

from rlgraph.tasks.arith import EOS_TEXT


def same_answer(verdict: str, prompt: str, response: str, ground_truth: Any) -> float | None:
    """1.0 when the response gives the judge's answer, 0.0 when it gives another; None when the judge's
    verdict is not a number (it did not answer)."""
    del prompt, ground_truth  # the judge's own answer is the reference
    answer = verdict.split(EOS_TEXT, 1)[0].strip()
    if not answer.lstrip("-").isdigit():
        return None
    return float(response.split(EOS_TEXT, 1)[0].strip() == answer)
