"""Recipes that change the shape of a step (issue 17): ReMax's second generate call, DAPO's dynamic sampling.

specs/remax_arith.rl generates twice per step (n = 4 samples, one greedy answer per prompt);
specs/dapo_arith.rl drops the prompts whose samples all scored alike and draws more until the batch is full.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .helpers import killed_after, SPECS, Started, fast, plan_from_spec, read_metrics

REMAX = SPECS / "remax_arith.rl"
DAPO = SPECS / "dapo_arith.rl"


def _steps(run: Path) -> list[dict]:
    return [r for r in read_metrics(run) if r["training/global_step"] > 0]


class Recorded:
    """The real DriverCalls of a plan, keeping what each reward and transform call got and gave, by call id
    (a list: a call runs once per generation round)."""

    def __init__(self, plan, rewards) -> None:
        from rlgraph.runtime.transforms import DriverCalls

        self.calls = DriverCalls(plan, rewards)
        self.seen: dict[str, list[tuple[dict, dict, object]]] = {}
        run = self.calls.run

        def recorded(call, inputs, rollout, when="a step"):
            outputs, metrics = run(call, inputs, rollout, when)
            self.seen.setdefault(call.id, []).append((inputs, outputs, rollout))
            return outputs, metrics

        self.calls.run = recorded


def _driver(started: Started, recorded: Recorded):
    from rlgraph.runtime.driver import ray_step_runner

    return ray_step_runner(started.plan, started.lowered, started.specs, recorded.calls)


# ---- ReMax: two generate calls --------------------------------------------------------------------


def test_remax_runs_both_generate_calls_every_step(run_cli, tmp_path):
    out = tmp_path / "run"
    code, text = run_cli(REMAX, "--output", out, *fast(steps=2, batch_size=16))
    assert code == 0, text
    steps = _steps(out)
    assert [r["training/global_step"] for r in steps] == [1, 2]
    for record in steps:
        assert 0.0 <= record["critic/greedy_scores/mean"] <= 1.0  # the greedy answers were scored
        assert record["actor/grad_norm"] > 0
    assert "val/score/mean" in steps[-1]  # validation samples like the trained call


def test_remax_advantage_is_each_samples_score_minus_its_prompts_greedy_score(ray_session, arith_model):
    """On the Ray driver's path (not the one-process step): the greedy call gives one answer per prompt, and each
    trained sample's advantage is its reward-to-go minus the greedy answer's score of its own prompt."""
    plan = plan_from_spec(REMAX, "data.batch_size=16")
    greedy_call = plan.call("rollout.generate#2")
    assert (greedy_call.settings.n, greedy_call.settings.temperature) == (1, 0.0)
    assert plan.call("rollout.generate").settings.n == 4
    with Started(plan) as started:
        recorded = Recorded(plan, started.prepared.rewards)
        driver = _driver(started, recorded)
        prompts = [started.prepared.train[i] for i in range(16)]
        driver.run(1, prompts)
    [(greedy_inputs, greedy_outputs, _)] = recorded.seen["exact#2"]
    greedy = greedy_inputs["responses"]
    assert len(greedy) == 16 and greedy.uid == list(range(16))  # one greedy answer per prompt, in prompt order
    [(inputs, outputs, rollout)] = recorded.seen["remax_advantage"]
    [(_, trained_outputs, _)] = recorded.seen["exact"]
    assert len(rollout) == 64 and rollout.uid == [i for i in range(16) for _ in range(4)]
    # reference, in float64: verl's compute_remax_outcome_advantage on the returned scores
    scores, mask = trained_outputs["scores"].double(), rollout.loss_mask.double()
    baseline = greedy_outputs["scores"].double().sum(-1)[torch.tensor(rollout.uid)]  # (64,)
    returns = (scores * mask).flip(-1).cumsum(-1).flip(-1)
    expected = returns - baseline[:, None] * mask
    torch.testing.assert_close(outputs["advantages"].double(), expected)
    assert (baseline > 0).any() or (scores.sum(-1) > 0).any()  # the test saw a non-zero score somewhere


def test_both_generate_calls_are_launched_ahead_in_an_asynchronous_run(run_cli, tmp_path):
    spec = tmp_path / "remax_async.rl"
    text = REMAX.read_text().replace('include "common/', f'include "{SPECS}/common/')
    text = text.replace("role rollout { colocate = actor ", "pool gen { nodes = 1  devices_per_node = 1  device = cpu }\n"
                        "role rollout { model = policy  pool = gen ")
    text = text.replace("responses, old_log_prob\n", "responses\n  responses -> actor.log_prob -> old_log_prob\n")
    spec.write_text(text + "\ntrain { staleness = 1 }\n")
    out = tmp_path / "run"
    code, text = run_cli(spec, "--output", out, *fast(steps=3, batch_size=16))
    assert code == 0, text
    steps = _steps(out)
    assert [r["async/staleness_max"] for r in steps] == [0, 1, 1]  # generated one update behind, greedy too
    assert all("critic/greedy_scores/mean" in r for r in steps)


# ---- DAPO: dynamic sampling ----------------------------------------------------------------------


def test_the_filter_drops_exactly_the_groups_that_scored_alike_and_refills_the_batch(ray_session, arith_model):
    plan = plan_from_spec(DAPO, "data.batch_size=16")
    with Started(plan) as started:
        recorded = Recorded(plan, started.prepared.rewards)
        driver = _driver(started, recorded)
        train = started.prepared.train
        batches = iter([[train[i] for i in range(start, start + 16)] for start in range(0, 16 * 10, 16)])
        flight = driver.launch(1, next(batches))
        flight.draw = lambda: next(batches)
        result = driver.finish(flight)
    rounds = recorded.seen["exact"]  # the reward ran once per generation round, on that round's rollout
    mixed = []  # (prompt, its rows' scores) of the groups whose samples did not all score alike, in order
    alike = 0
    for inputs, outputs, _ in rounds:
        rollout, scores = inputs["responses"], outputs["scores"].sum(-1)
        for uid in dict.fromkeys(rollout.uid):
            rows = [i for i, u in enumerate(rollout.uid) if u == uid]
            if len(set(scores[rows].tolist())) > 1:
                mixed.append((rollout.prompt_text[rows[0]], scores[rows].tolist()))
            else:
                alike += 1
    assert len(rounds) >= 2 and alike > 0, "the first 16 prompts should need a refill"
    [(inputs, _, kept)] = recorded.seen["overlong_penalty"]  # the first call after the filter: the kept batch
    assert len(kept) == 16 * 8 and kept.uid == [g for g in range(16) for _ in range(8)]
    kept_groups = [(kept.prompt_text[g * 8], inputs["scores"][g * 8 : g * 8 + 8].sum(-1).tolist()) for g in range(16)]
    assert kept_groups == mixed[:16]  # the mixed groups, in the order drawn; the rest of the last round dropped
    metrics = result.metrics
    assert metrics["train/num_gen_batches"] == len(rounds)
    assert metrics["train/num_gen_prompts"] == 16 * len(rounds)
    assert metrics["train/num_filtered_groups"] == alike
    assert metrics["critic/score/mean"] == inputs["scores"].sum(-1).mean().item()  # metrics of the kept batch


def test_the_rounds_are_bounded(run_cli, tmp_path):
    spec = tmp_path / "dapo_one_round.rl"
    text = DAPO.read_text().replace("max_rounds = 10", "max_rounds = 1")
    spec.write_text(text.replace('include "common/', f'include "{SPECS}/common/'))
    code, text = run_cli(spec, "--output", tmp_path / "run", *fast(steps=2, batch_size=16))
    assert code == 1
    assert "dynamic sampling (filter_groups) kept" in text and "at most 1 rounds (max_rounds)" in text, text
    assert "Traceback" not in text


def test_a_resumed_dynamic_sampling_run_trains_on_the_prompts_of_an_unbroken_one(run_cli, tmp_path):
    """A refill draws prompts beyond the step's batch: the checkpoint's data loader counts them, so a resume
    neither repeats nor skips a prompt (each step trains on the prompts the unbroken run trained on)."""
    args = ["-s", "train.samples_every=1"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    code, text = run_cli(DAPO, "--output", whole, *fast(steps=4, batch_size=16, checkpoint_every=2), *args)
    assert code == 0, text
    killed_after(whole, parts, step=2)
    code, text = run_cli(DAPO, "--output", parts, *fast(steps=4, batch_size=16, checkpoint_every=2), *args)
    assert code == 0 and "resuming from" in text, text

    def prompts(run: Path) -> dict[int, list[str]]:
        by_step: dict[int, list[str]] = {}
        for line in (run / "samples.jsonl").read_text().splitlines():
            row = json.loads(line)
            by_step.setdefault(row["step"], []).append(row["prompt"])
        return by_step

    assert sorted(prompts(whole)) == [1, 2, 3, 4]
    assert prompts(parts) == prompts(whole)
    steps = _steps(whole)
    assert sum(r["train/num_filtered_groups"] for r in steps) > 0  # the filter dropped groups
    assert max(r["train/num_gen_batches"] for r in steps) >= 2  # and the steps refilled
    assert all(r["train/num_gen_prompts"] == 16 * r["train/num_gen_batches"] for r in steps)
