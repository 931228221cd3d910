"""The recipe's verdict parser (rlgraph/tasks/arith_judge.py): the response against the judge's own answer."""

from __future__ import annotations

import pytest

from rlgraph.tasks.arith_judge import same_answer


@pytest.mark.parametrize("verdict, response, score", [
    ("46", "46", 1.0), (" 46</s>", "46</s>", 1.0), ("46", "45", 0.0), ("46", "", 0.0), ("-3", "-3", 1.0),
    ("", "46", None), ("4+6", "46", None), ("forty", "40", None),  # the judge did not answer with a number
])
def test_the_response_scores_1_when_it_gives_the_judges_answer(verdict, response, score):
    assert same_answer(verdict, "12+34=", response, "46") == score


def test_the_ground_truth_is_not_read():
    assert same_answer("45", "12+34=", "45", "46") == 1.0  # the judge's answer, right or wrong, is the reference
