"""A reward that returns no number, hangs or exits, and a role that stops learning, each end in one clear
paragraph (or are counted, where the spec allows a share of unscored rows); a run never trains on silently."""

from __future__ import annotations

import math
import time
import uuid

import pytest
import torch

from rlgraph.algos import gae, grpo_advantage
from rlgraph.contract.settings import GaeSettings
from rlgraph.plan.model import CallPlan
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.transforms import DriverCalls, scored
from rlgraph.runtime.update_guard import UpdateGuard
from rlgraph.workers.batch import Rollout
from rlgraph.workers.optim import Optimization
from rlgraph.workers.reward import RuleReward

from .helpers import fast
from .plans import grpo_plan
from .test_errors import assert_clean

ROWS, N = 8, 4  # two prompts, four answers each


def rollout() -> Rollout:
    """Row i answers prompt `i+1=` (uid i // N); its ground truth is str(i)."""
    responses = torch.arange(ROWS * 3).view(ROWS, 3) + 5
    return Rollout.build(torch.ones(ROWS, 2, dtype=torch.long), torch.ones(ROWS, 2, dtype=torch.long), responses,
                         torch.ones(ROWS, 3, dtype=torch.long), 0, uid=[i // N for i in range(ROWS)],
                         data_source=["arith"] * ROWS, ground_truth=[str(i) for i in range(ROWS)],
                         extra_info=[{"index": i} for i in range(ROWS)], prompt_text=[f"{i}+1=" for i in range(ROWS)],
                         response_text=[f"answer {i}" for i in range(ROWS)])


@pytest.fixture
def reward_fn(tmp_path, monkeypatch):
    """`reward_fn(body)`: a user's reward module in tmp_path whose `score(...)` runs `body`; returns
    "module:score". Each module gets a name of its own (a module is imported once per process)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(body: str) -> str:
        name = f"user_reward_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(
            "import math, os, time\n\n"
            "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
            f"    row = int(ground_truth)\n    {body}\n"
        )
        return f"{name}:score"

    return make


def guarded(fn: str, max_invalid_fraction: float = 0.0, timeout_s: float = 30.0, workers: int = 1) -> RuleReward:
    """As the runtime builds it: in processes of its own."""
    return RuleReward(fn, max_invalid_fraction=max_invalid_fraction, timeout_s=timeout_s, workers=workers)


def test_a_nan_score_is_an_error_naming_the_reward_the_row_and_the_value(reward_fn):
    reward = guarded(reward_fn("return float('nan') if row == 5 else 1.0"))
    with pytest.raises(RunError) as info:
        scored("exact", reward, rollout(), "step 3")
    text = str(info.value)
    assert text.startswith("reward `exact` failed in step 3: ") and "returned nan on row 5" in text
    assert "prompt='5+1='" in text and "ground_truth='5'" in text and "uid=1" in text
    assert "1 of 8 rows" in text and "max_invalid_fraction" in text


def test_a_string_is_not_a_score_but_a_bool_is(reward_fn):
    with pytest.raises(RunError, match=r"returned '1\.0' on row 0 .*not a usable score"):
        scored("exact", guarded(reward_fn("return '1.0'")), rollout(), "step 1")
    # `return answer == truth` is a 0/1 score, as Python counts it
    scores = scored("exact", guarded(reward_fn("return row % 2 == 1")), rollout(), "step 1")
    assert scores.token_level_scores.sum(-1).tolist() == [0.0, 1.0] * 4 and bool(scores.valid.all())


def test_an_allowed_share_of_unscored_rows_is_counted_and_left_out_of_the_estimate(reward_fn):
    """Rows 1 and 6 get no score; max_invalid_fraction = 0.25 allows 2 of 8. The group estimator must
    not see their stand-in 0: the other rows' advantages are GRPO's on those rows alone."""
    fn = reward_fn("return float('inf') if row in (1, 6) else float(row % 3 == 0)")
    plan = grpo_plan()
    calls = DriverCalls(plan, {"exact": guarded(fn, max_invalid_fraction=0.25)})
    batch = rollout()
    out, metrics = calls.run(plan.call("exact"), {}, batch, "step 1")
    assert metrics == {"reward/exact/invalid": 2}
    advantages = calls.run(plan.call("grpo_advantage"), {"rewards": out["scores"]}, batch)[0]["advantages"]
    keep = [0, 2, 3, 4, 5, 7]
    expected, _ = grpo_advantage(out["scores"][keep], batch.loss_mask[keep], [batch.uid[i] for i in keep])
    assert torch.allclose(advantages[keep], expected.float()) and advantages[[1, 6]].abs().sum() == 0
    # with every row, the 0 of row 1 would have moved its group's mean: the estimate differs
    assert not torch.allclose(grpo_advantage(out["scores"], batch.loss_mask, batch.uid)[0][keep].float(), advantages[keep])
    # GAE (a critic): an unscored row's return is its own value, so the critic learns nothing false from it
    values = torch.randn(ROWS, 3, generator=torch.Generator().manual_seed(0))
    gae_call = CallPlan("gae", "gae", "transform", "gae", None, None, [["rewards", "rw"], ["values", "v"]],
                        [["advantages", "a"], ["returns", "r"]], 3, GaeSettings(gamma=1.0, lam=0.95))
    est = calls.run(gae_call, {"rewards": out["scores"], "values": values}, batch)[0]
    expected_adv, expected_ret = gae(out["scores"][keep], values[keep], batch.loss_mask[keep], 1.0, 0.95)
    assert torch.allclose(est["advantages"][keep], expected_adv) and torch.allclose(est["returns"][keep], expected_ret)
    assert torch.equal(est["returns"][[1, 6]], values[[1, 6]]) and est["advantages"][[1, 6]].abs().sum() == 0
    # a third unscored row is more than the share allows
    over = DriverCalls(plan, {"exact": guarded(reward_fn("return None if row in (1, 2, 6) else 1.0"), 0.25)})
    with pytest.raises(RunError, match=r"3 of 8 rows had none \(rows 1, 2, 6\)\. max_invalid_fraction = 0\.25 allows 2"):
        over.run(plan.call("exact"), {}, batch, "step 2")


@pytest.mark.parametrize("workers", [1, 3])  # 3: row 3 is the second row of the first process
def test_a_blocking_reward_times_out_naming_the_row(reward_fn, workers):
    reward = guarded(reward_fn("time.sleep(3600) if row == 3 else None\n    return 1.0"), timeout_s=0.5,
                     workers=workers)
    started = time.perf_counter()
    with pytest.raises(RunError) as info:
        scored("exact", reward, rollout(), "step 2")
    assert time.perf_counter() - started < 5.0  # 0.5 s, the process's start and a tick of slack
    text = str(info.value)
    assert text.startswith("reward `exact` failed in step 2: ")
    assert "took longer than timeout_s = 0.5 s on row 3" in text and "prompt='3+1='" in text
    assert all(process.proc is None for process in reward._process.processes)  # stopped, not left running


@pytest.mark.parametrize("workers", [1, 3])
def test_a_reward_that_exits_its_process_is_reported_with_the_row(reward_fn, workers):
    reward = guarded(reward_fn("os._exit(1) if row == 2 else None\n    return 1.0"), workers=workers)
    with pytest.raises(RunError) as info:
        scored("exact", reward, rollout(), "step 1")
    text = str(info.value)
    assert text.startswith("reward `exact` failed in step 1: the process of reward function user_reward_")
    assert "exited with code 1 while scoring row 2" in text and "ground_truth='2'" in text
    # the next call starts a fresh process
    ok = guarded(reward_fn("return 0.5"))
    assert scored("exact", ok, rollout(), "step 2").token_level_scores.sum().item() == pytest.approx(4.0)


def test_a_non_finite_gradient_skips_the_update_with_a_metric_and_a_warning():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 1)
    optim = Optimization(layer.parameters(), lr=0.1, betas=(0.9, 0.999), weight_decay=0.0, grad_clip=1.0,
                         warmup_steps=0)
    before = layer.weight.detach().clone()

    def loss_fn(rows):  # rows 4..7 are the second mini-batch: its loss is NaN
        loss = layer(torch.ones(len(rows), 4)).pow(2).mean()
        return (loss * math.nan if int(rows[0]) >= 4 else loss), {}

    metrics = optim.run_epochs(8, loss_fn, epochs=1, mini_batch_size=4, micro_batch_size=None, generator=None)
    assert metrics["skipped_update_frac"] == 0.5 and math.isnan(metrics["grad_norm"])
    assert torch.isfinite(layer.weight).all() and not torch.equal(layer.weight, before)  # the first one applied
    lines: list[str] = []
    UpdateGuard().observe(1, {"actor/skipped_update_frac": 0.5, "actor/grad_norm": math.nan}, lines.append)
    assert len(lines) == 1 and "step 1: `actor` skipped 50% of its optimizer updates" in lines[0]


def test_a_run_that_skips_every_update_fails():
    guard, lines = UpdateGuard(), []
    skipped = {"actor/skipped_update_frac": 1.0, "actor/grad_norm": math.nan, "critic/skipped_update_frac": 0.0}
    guard.observe(1, skipped, lines.append)
    guard.observe(2, {**skipped, "actor/skipped_update_frac": 0.0}, lines.append)  # learned: starts over
    guard.observe(3, skipped, lines.append)
    guard.observe(4, skipped, lines.append)
    with pytest.raises(RunError, match=r"`actor` skipped every optimizer update of steps 3-5: .* not learning"):
        guard.observe(5, skipped, lines.append)
    assert len(lines) == 4 and "every optimizer update" in lines[0]  # steps 1, 3, 4, 5
    # a run shorter than that fails at its end when it never updated
    short = UpdateGuard()
    for step in (1, 2):
        short.observe(step, skipped, lambda line: None)
    with pytest.raises(RunError, match=r"skipped every optimizer update of all 2 step\(s\) of this run"):
        short.finish()
    healthy = UpdateGuard()
    healthy.observe(1, {"actor/skipped_update_frac": 0.0}, lambda line: None)
    healthy.finish()


def test_a_run_whose_reward_exits_ends_with_one_paragraph(run_cli, tmp_path, monkeypatch):
    """The whole command: exit 1 and a message naming the reward, the step and the row, no traceback."""
    (tmp_path / "exiting_reward.py").write_text(
        "import os\n\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['split'] == 'train':  # validation passes; the first step's first row ends the process\n"
        "        os._exit(1)\n"
        "    return 1.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run_cli("specs/grpo_arith.rl", "--output", tmp_path / "run", *fast(steps=1),
                        "-s", 'exact.fn="exiting_reward:score"')
    assert code == 1, out
    assert "reward `exact` failed in step 1: the process of reward function exiting_reward:score exited with code 1 " \
           "while scoring row 0" in out
    assert "prompt=" in out and "'split': 'train'" in out
    assert_clean(out)
