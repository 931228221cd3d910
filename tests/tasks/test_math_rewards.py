"""The built-in GSM8K and MATH rewards on known answers, and the dispatch by data_source."""

import pytest

pytest.importorskip("math_verify", reason="the MATH reward needs math-verify (the run extra)")

from rlgraph.tasks import default_compute_score, gsm8k, math as math_reward  # noqa: E402

GSM = "openai/gsm8k"
MATH = "lighteval/MATH"


@pytest.mark.parametrize("solution, truth, score", [
    ("She pays 3 * 24 = 72 dollars.\n#### 72", "72", 1.0),
    ("#### 71", "72", 0.0),
    ("#### 1,000", "1000", 1.0),  # thousands separators
    ("#### 1000", "1,000", 1.0),
    ("#### $18", "18", 1.0),
    ("#### -5", "-5", 1.0),
    ("#### 72.", "72", 1.0),  # the sentence's full stop
    ("#### 3.50", "3.5", 0.0),  # compared as text, as verl does
    ("#### 3 then #### 4", "4", 1.0),  # the last one
    ("The answer is 72", "72", 0.0),  # strict: no ####, no answer
    ("", "72", 0.0),
])
def test_gsm8k_strict(solution, truth, score):
    assert gsm8k.compute_score(GSM, solution, truth) == score


@pytest.mark.parametrize("solution, truth, score", [
    ("3 * 24 = 72, so the answer is 72.", "72", 1.0),
    ("I get 1,000 apples", "1000", 1.0),
    ("72 then 73", "72", 0.0),  # the last number
    ("no number here.", "72", 0.0),
])
def test_gsm8k_flexible(solution, truth, score):
    assert gsm8k.compute_score_flexible(GSM, solution, truth) == score


def test_gsm8k_format_score_for_a_wrong_but_well_formed_answer():
    assert gsm8k.compute_score(GSM, "#### 5", "6", format_score=0.1) == 0.1
    assert gsm8k.compute_score(GSM, "five", "6", format_score=0.1) == 0.0


@pytest.mark.parametrize("solution, truth, score", [
    ("so $x = \\boxed{\\frac{1}{2}}$", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),  # \frac vs decimal
    ("\\boxed{\\dfrac12}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{1+x^2}", "x^2+1", 1.0),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt2}{2}", 1.0),
    ("\\boxed{3}", "\\frac{1}{2}", 0.0),
    ("first \\boxed{2}, then \\boxed{3}", "3", 1.0),  # the last box
    ("first \\boxed{3}, then \\boxed{2}", "3", 0.0),
    ("\\fbox{7}", "7", 1.0),
    ("the answer is 7", "7", 0.0),  # no box, no answer
    ("\\boxed{\\frac{1}{2", "\\frac{1}{2}", 0.0),  # cut off before the box closed
    ("\\boxed{7}", "The sum is $\\boxed{7}$.", 1.0),  # a whole reference solution as ground truth
])
def test_math(solution, truth, score):
    assert math_reward.compute_score(MATH, solution, truth) == score


def test_math_in_a_thread_has_no_signal_timeout():
    import threading

    got = []
    thread = threading.Thread(target=lambda: got.append(math_reward.compute_score(MATH, "\\boxed{0.5}", "1/2")))
    thread.start()
    thread.join()
    assert got == [1.0]


def test_default_compute_score_dispatches_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 1,000", "1000") == 1.0
    assert default_compute_score("lighteval/MATH", "\\boxed{0.5}", "\\frac12", {"index": 3}) == 1.0
    assert default_compute_score("DigitalLearningGmbH/MATH-lighteval", "\\boxed{2}", "3") == 0.0
    assert default_compute_score("rlgraph/arith", "46", "46") == 1.0
    with pytest.raises(NotImplementedError, match="openai/gsm8k"):
        default_compute_score("my/task", "1", "1")
