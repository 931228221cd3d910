import inspect

import pytest

import rlgraph.algos as algos
from rlgraph.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, get_advantage_estimator, get_policy_loss


def test_registries_name_the_public_functions():
    assert set(ADVANTAGE_ESTIMATORS) == {
        "gae",
        "grpo_advantage",
        "rloo_advantage",
        "reinforce_pp_advantage",
        "reinforce_pp_baseline_advantage",
        "remax_advantage",
        "distill_advantage",
    }
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        assert get_advantage_estimator(name) is fn is getattr(algos, name)
    assert POLICY_LOSSES == {"vanilla": algos.policy_loss, "gspo": algos.gspo_policy_loss,
                             "cispo": algos.cispo_policy_loss}
    assert get_policy_loss("gspo") is algos.gspo_policy_loss


def test_every_policy_loss_a_spec_may_name_is_registered():
    # `check` validates `policy_loss = ...` against its own list (it cannot import torch); one missing here
    # would pass `check` and fail only once the workers run.
    from rlgraph.compiler.builtins import ROLE_METHODS

    assert set(ROLE_METHODS["actor"]["update"].kwargs["policy_loss"].type.options) == set(POLICY_LOSSES)


def test_spec_keywords_are_parameters():
    # The runtime binds spec arguments such as `gae(gamma = 1.0, lam = 0.95)` by keyword.
    assert {"gamma", "lam"} <= set(inspect.signature(get_advantage_estimator("gae")).parameters)
    assert "norm_by_std" in inspect.signature(get_advantage_estimator("grpo_advantage")).parameters


@pytest.mark.parametrize(
    "typo, suggestion",
    [
        ("grpo_advantge", "grpo_advantage"),
        ("GAE", "gae"),
        ("rloo", "rloo_advantage"),
        ("reinforce_pp", "reinforce_pp_advantage"),
        ("ppo", None),
    ],
)
def test_unknown_estimator_suggests_close_names(typo, suggestion):
    with pytest.raises(KeyError) as excinfo:
        get_advantage_estimator(typo)
    message = str(excinfo.value)
    assert f"unknown advantage estimator {typo!r}" in message
    assert "known: distill_advantage, gae," in message
    if suggestion:
        assert f"did you mean {suggestion!r}" in message
    else:
        assert "did you mean" not in message


def test_unknown_policy_loss_suggests_close_names():
    with pytest.raises(KeyError, match="did you mean 'gspo'"):
        get_policy_loss("gpso")


def test_every_public_name_is_exported():
    for name in algos.__all__:
        assert hasattr(algos, name), name
