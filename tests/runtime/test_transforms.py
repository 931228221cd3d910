import torch

from rlgraph.algos import apply_kl_penalty, gae, grpo_advantage
from rlgraph.contract.settings import GaeSettings, GrpoSettings, KlPenaltySettings
from rlgraph.plan.model import CallPlan
from rlgraph.runtime.transforms import DriverCalls
from .plans import grpo_plan
from .test_metrics import _rollout


def test_grpo_groups_by_the_rollouts_uid():
    plan = grpo_plan()
    calls = DriverCalls(plan, {})
    rollout = _rollout()
    rollout.uid = [7, 7]
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out, _ = calls.run(plan.call("grpo_advantage"), {"rewards": scores}, rollout)
    expected, _ = grpo_advantage(scores, rollout.response_mask, [7, 7])
    assert torch.allclose(out["advantages"], expected.float())


def test_adaptive_kl_coefficient_moves_and_is_checkpointed():
    plan = grpo_plan()
    plan.calls.append(CallPlan("kl_penalty", "kl_penalty", "transform", "kl_penalty", None, None,
                               [["scores", "s"], ["log_prob", "l"], ["ref_log_prob", "r"]], [["rewards", "rw"]], 3,
                               KlPenaltySettings(kind="k1", coef=0.1, target=0.01, horizon=100)))
    calls = DriverCalls(plan, {})
    rollout = _rollout()
    scores, log_prob, ref = torch.zeros(2, 3), torch.zeros(2, 3), torch.full((2, 3), -1.0)
    out, metrics = calls.run(plan.call("kl_penalty"), {"scores": scores, "log_prob": log_prob, "ref_log_prob": ref}, rollout)
    expected, _ = apply_kl_penalty(scores, log_prob, ref, rollout.response_mask, 0.1, "k1")
    assert torch.equal(out["rewards"], expected)
    assert calls.state_dict()["kl_penalty"] > 0.1  # KL 1 >> target 0.01: the coefficient grows
    fresh = DriverCalls(plan, {})
    fresh.load_state_dict(calls.state_dict())
    assert fresh.state_dict() == calls.state_dict()


def _compact(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss-mask entries moved to the front, with their mask: the rows as if nothing had been inserted."""
    out, kept_mask = torch.zeros_like(x), torch.zeros_like(mask)
    for row in range(len(x)):
        kept = x[row][mask[row].bool()]
        out[row, : len(kept)], kept_mask[row, : len(kept)] = kept, 1
    return out, kept_mask


def test_gae_and_grpo_skip_the_tokens_an_environment_inserted():
    """On a multi-turn rollout the estimators get the loss mask: rewards and values sitting on inserted
    tokens change nothing, and the model's tokens get what the same rows without them would get."""
    from types import SimpleNamespace

    from rlgraph.workers.batch import TokenSource

    from tests.workers.test_batch import make_multi_turn

    rollout = make_multi_turn()  # uid 0 0 1 1
    inserted = rollout.token_source == TokenSource.ENV
    mask = rollout.loss_mask
    generator = torch.Generator().manual_seed(0)
    rewards = torch.zeros(rollout.responses.shape)
    rewards[torch.arange(4), rollout.reward_index] = torch.tensor([1.0, 0.0, 0.3, 0.8])
    values = torch.randn(rewards.shape, generator=generator) * mask
    rewards, values = rewards.masked_fill(inserted, 5.0), values.masked_fill(inserted, -9.0)
    calls = DriverCalls(SimpleNamespace(calls=[]), {})
    gae_call = CallPlan("gae", "gae", "transform", "gae", None, None, [["rewards", "rw"], ["values", "v"]],
                        [["advantages", "a"], ["returns", "r"]], 3,
                        settings=GaeSettings(gamma=0.9, lam=0.95))
    grpo_call = CallPlan("grpo_advantage", "grpo_advantage", "transform", "grpo_advantage", None, None,
                         [["rewards", "rw"]], [["advantages", "a"]], 3,
                         settings=GrpoSettings(epsilon=1e-6, norm_by_std=True))

    out, _ = calls.run(gae_call, {"rewards": rewards, "values": values}, rollout)
    (compact_rewards, compact_mask), (compact_values, _) = _compact(rewards, mask), _compact(values, mask)
    expected, expected_returns = gae(compact_rewards, compact_values, compact_mask, 0.9, 0.95)
    keep = compact_mask.bool()
    torch.testing.assert_close(out["advantages"][mask.bool()], expected[keep].float())
    torch.testing.assert_close(out["returns"][mask.bool()], expected_returns[keep].float())

    out, _ = calls.run(grpo_call, {"rewards": rewards}, rollout)
    expected, _ = grpo_advantage(compact_rewards, compact_mask, rollout.uid)
    torch.testing.assert_close(out["advantages"][mask.bool()], expected[keep].float())
    assert (out["advantages"][inserted] == 0).all()


def test_a_judges_verdicts_without_a_score_leave_their_rows_out_of_the_estimate():
    """specs/grpo_arith_judge.rl's plan: the judge's scores hold NaN where a verdict held none; GRPO estimates on
    the other rows alone (their groups' mean and std without the NaN rows) and gives those rows advantage 0."""
    from rlgraph.workers.batch import Rollout

    from .helpers import SPECS, plan_from_spec

    plan = plan_from_spec(SPECS / "grpo_arith_judge.rl")
    calls = DriverCalls(plan, {})
    rows, R = 8, 3
    mask = torch.ones(rows, R, dtype=torch.long)
    lists = {k: ["x"] * rows for k in ("data_source", "prompt_text", "response_text", "ground_truth")}
    rollout = Rollout.build(torch.ones(rows, 2, dtype=torch.long), torch.ones(rows, 2, dtype=torch.long),
                            torch.ones(rows, R, dtype=torch.long), mask, 0, uid=[0] * 4 + [1] * 4,
                            extra_info=[{}] * rows, **lists)
    scores = torch.zeros(rows, R)
    scores[:, -1] = torch.tensor([1.0, float("nan"), 0.0, 1.0, 0.0, 0.0, float("nan"), 1.0])
    [call] = [c for c in plan.calls if c.target == "grpo_advantage"]
    assert dict(call.inputs)["rewards"] in calls.judged  # the judge's field
    out, metrics = calls.run(call, {"rewards": scores}, rollout)
    assert metrics["judge/judge/invalid"] == 2
    kept = [0, 2, 3, 4, 5, 7]
    expected, _ = grpo_advantage(scores[kept], mask[kept], [rollout.uid[i] for i in kept])
    assert torch.allclose(out["advantages"][kept], expected.float())
    assert torch.equal(out["advantages"][[1, 6]], torch.zeros(2, R))
    assert not torch.isnan(out["advantages"]).any()
