"""MATH's rule reward: the last ``\\boxed{...}`` of the response, checked against the ground truth with
math-verify (https://github.com/huggingface/Math-Verify), as verl recommends for `lighteval/MATH` rows.

math-verify compares the two as mathematics, not as text: ``\\frac{1}{2}``, ``\\dfrac12`` and ``0.5`` are
one answer, so are ``1,000`` and ``1000``, and ``x^2+1`` and ``1+x^2``. A response without a ``\\boxed{}``
(or ``\\fbox{}``) scores 0, as in verl's math.py: the format is part of the task.
"""

from __future__ import annotations

import threading
from typing import Any

try:
    from math_verify import parse, verify
except ImportError as err:  # a clear line at pre-flight instead of a bare ModuleNotFoundError
    raise ImportError("rlgraph.tasks.math needs the math-verify package: pip install 'rlgraph[run]' "
                      "(or pip install math-verify)") from err

_PARSE_TIMEOUT_S = 5  # math-verify's own default, per parse and per verify


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} or \\fbox{...} in `text` (braces matched), or None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:].removeprefix("\\boxed").removeprefix("\\fbox")
    if rest.startswith(" "):  # "\boxed 5": the answer runs to the next "$" or the end
        return rest[1:].split("$", 1)[0].strip() or None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i].strip()
    return None  # never closed: the response was cut off


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the last boxed answer equals the ground truth mathematically, else 0.0."""
    del data_source, extra_info
    answer = last_boxed(solution_str)
    if answer is None:
        return 0.0
    # math-verify's timeouts use signal.alarm, which only the main thread may set; elsewhere the reward's
    # own timeout_s (a process of its own) is the guard
    timeout = _PARSE_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    truth = str(ground_truth)
    truth = last_boxed(truth) or truth  # a whole reference solution: its boxed answer
    gold = parse(f"\\boxed{{{truth}}}", parsing_timeout=timeout)
    predicted = parse(f"\\boxed{{{answer}}}", parsing_timeout=timeout)
    if not gold or not predicted:
        return 0.0
    return 1.0 if verify(gold, predicted, timeout_seconds=timeout) else 0.0
