import torch

from rlgraph.algos import apply_kl_penalty, grpo_advantage
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
                               [["scores", "s"], ["log_prob", "l"], ["ref_log_prob", "r"]], [["rewards", "rw"]],
                               {"kind": "k1", "coef": 0.1, "target": 0.01, "horizon": 100}, 3))
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
