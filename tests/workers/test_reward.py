import pytest
import torch

from rlgraph.workers.reward import RewardFunctionError, RuleReward, load_reward_fn
from .test_batch import make_multi_turn, make_rollout


def score_by_ground_truth(data_source, solution_str, ground_truth, extra_info=None):
    return float(ground_truth) + 0.5


def picky(data_source, solution_str, ground_truth, extra_info=None):
    if ground_truth == "2":
        raise KeyError("no answer key")
    return 1.0


NOT_CALLABLE = 3


def test_score_sits_on_the_last_response_token():
    rollout = make_rollout(response_lens=(2, 4, 1, 3))
    scores = RuleReward(score_by_ground_truth).score(rollout)
    assert scores.shape == rollout.responses.shape and scores.dtype == torch.float32
    expected = torch.zeros(4, 4)
    for row, last in enumerate((1, 3, 0, 2)):
        expected[row, last] = row + 0.5
    assert torch.equal(scores, expected)


def test_score_sits_on_the_reward_index_of_a_multi_turn_row():
    # after the last model turn by default (not on a tool's output, not on padding); anywhere it is told
    for rollout, columns in ((make_multi_turn(), [6, 2, 3, 7]),
                             (make_multi_turn(reward_index=torch.tensor([1, 0, 0, 4])), [1, 0, 0, 4])):
        scores = RuleReward(score_by_ground_truth).score(rollout)
        expected = torch.zeros(4, 8)
        expected[torch.arange(4), torch.tensor(columns)] = torch.arange(4) + 0.5
        assert torch.equal(scores, expected)


def test_load_by_spec_string_and_arith_task():
    fn = load_reward_fn("rlgraph.tasks.arith:exact_match")
    assert fn("rlgraph/arith", "46", "46") == 1.0
    assert RuleReward(f"{__name__}:score_by_ground_truth").fn is score_by_ground_truth


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_module_xyz:fn", "module 'no_such_module_xyz' not found"),
        ("rlgraph.tasks.arith:nope", "has no attribute 'nope'"),
        (f"{__name__}:NOT_CALLABLE", "is a int, not callable"),
        ("rlgraph.tasks.arith", "must be written as 'module:function'"),
    ],
)
def test_load_errors_name_the_spec_and_the_problem(spec, message):
    with pytest.raises(RewardFunctionError) as info:
        load_reward_fn(spec)
    assert message in str(info.value) and repr(spec) in str(info.value)


def test_error_inside_the_function_names_the_row():
    rollout = make_rollout()
    with pytest.raises(RewardFunctionError) as info:
        RuleReward(picky).score(rollout)
    text = str(info.value)
    assert "picky" in text and "KeyError" in text and "row 2" in text and "ground_truth='2'" in text
    assert isinstance(info.value.__cause__, KeyError)


def test_non_numeric_return_is_reported():
    rollout = make_rollout()
    with pytest.raises(RewardFunctionError, match=r"returned 'yes' on row 0 \(.*\), which is not a usable score"):
        RuleReward(lambda *args: "yes").score(rollout)
