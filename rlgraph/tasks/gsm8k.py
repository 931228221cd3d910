"""GSM8K's rule reward, as verl scores `openai/gsm8k` rows (verl/utils/reward_score/gsm8k.py).

The answer is the number after the last ``#### `` (strict, the default: it also checks that the model
answers in GSM8K's format), or the last number in the text (flexible). It is compared with the ground
truth as a string, after dropping thousands separators and dollar signs, so "1,000" and "$1000" match
"1000", and "3.50" does not match "3.5" (GSM8K's answers are integers).

Two differences from verl, both on answers verl scores as wrong: a trailing full stop is dropped
("#### 72." is 72, and so is the flexible "The answer is 72."), and "#### $18" is 18.
"""

from __future__ import annotations

import re
from typing import Any

_STRICT = re.compile(r"#### \$?(-?[0-9.,]+)")
_NUMBER = re.compile(r"-?[0-9.,]+")


def _normal(number: str) -> str:
    return number.replace(",", "").replace("$", "").strip().rstrip(".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The model's final answer, normalised, or None when it gave none in the form `method` asks for."""
    if method == "strict":
        found = _STRICT.findall(solution_str)
    elif method == "flexible":
        found = _NUMBER.findall(solution_str)
    else:
        raise ValueError(f"method must be 'strict' or 'flexible', not {method!r}")
    for candidate in reversed(found):  # the last one that is a number, not a lone "." or ","
        answer = _normal(candidate)
        if answer and answer not in ("-", "."):
            return answer
    return None


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  method: str = "strict", format_score: float = 0.0, score: float = 1.0) -> float:
    """`score` for the right answer, `format_score` for a wrong one, 0 for none (verl's gsm8k rule)."""
    del data_source, extra_info
    answer = extract_solution(solution_str, method)
    if answer is None:
        return 0.0
    return score if answer == _normal(str(ground_truth)) else format_score


def compute_score_flexible(data_source: str, solution_str: str, ground_truth: Any,
                           extra_info: dict | None = None) -> float:
    """`compute_score` with the last number in the text as the answer (no `####` needed)."""
    return compute_score(data_source, solution_str, ground_truth, extra_info, method="flexible")
