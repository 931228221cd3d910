"""`rlgraph eval`: an exported model scores what the run's last validation scored; pass@k, mean@k and best@k of
known per-sample scores; the sampling flags over a spec's settings; bad input is a message, not a traceback."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlgraph.runtime.evaluate import pass_at_k, validation_metrics, validation_sampling

from .helpers import SPECS, fast, plan_from_spec, read_metrics


def run_eval(capsys, *args) -> tuple[int, str]:
    from rlgraph.cli import main

    code = main(["eval", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# --- the metrics, on known scores ---


def _pass_at_k_by_counting(row: list[float], k: int, pass_score: float) -> float:
    """The share of the C(n, k) ways to pick k answers that hold a passing one."""
    import itertools

    picks = list(itertools.combinations(row, k))
    return sum(any(s >= pass_score for s in pick) for pick in picks) / len(picks)


def test_pass_at_k_is_the_chance_that_k_of_the_n_answers_hold_a_passing_one():
    scores = [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.5, 1.0, 0.0, 0.0]]
    for k in (1, 2, 3, 4):
        expected = sum(_pass_at_k_by_counting(row, k, 1.0) for row in scores) / len(scores)
        assert pass_at_k(scores, k, pass_score=1.0) == pytest.approx(expected, rel=1e-12)
    # pass@1 is the share of passing answers; pass@n whether any passes
    assert pass_at_k(scores, 1, 1.0) == pytest.approx((1 + 0 + 3 + 1) / 16)
    assert pass_at_k(scores, 4, 1.0) == pytest.approx(3 / 4)
    # the threshold decides what passes: 0.5 counts the 0.5 answer
    assert pass_at_k(scores, 1, 0.5) == pytest.approx((1 + 0 + 3 + 2) / 16)
    # the product form is the binomial one: 1 - C(n - c, k) / C(n, k), without huge binomials at n = 200
    row = [1.0] * 7 + [0.0] * 193
    assert pass_at_k([row], 10, 1.0) == pytest.approx(1 - math.comb(193, 10) / math.comb(200, 10), rel=1e-12)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(scores, 5, 1.0)


def test_mean_and_best_at_n_of_known_scores():
    one = torch.tensor([[1.0], [0.0], [1.0]])  # (prompts, 1)
    sampled = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.5]])  # (prompts, n = 2)
    metrics = validation_metrics(one, sampled, prefix="")
    assert metrics == pytest.approx({"score/mean": 2 / 3, "score/mean@2": 1.5 / 6, "score/best@2": 1.5 / 3})
    assert validation_metrics(one, None) == pytest.approx({"val/score/mean": 2 / 3})


def test_validation_answers_greedy_once_and_samples_n_at_the_validation_temperature():
    plan = plan_from_spec(SPECS / "grpo_arith.rl", "train.val_samples=4")
    generate = next(c for c in plan.calls if c.kind == "role" and c.method == "generate").settings
    one, sampled = validation_sampling(generate, plan.role("rollout").settings.val)
    assert (one.n, one.temperature, one.keep_log_probs) == (1, 0.0, False)
    assert (sampled.n, sampled.temperature, sampled.max_new_tokens) == (4, 1.0, generate.max_new_tokens)


def test_flags_go_over_the_spec_and_sampling_defaults_to_the_rollouts_temperature():
    from rlgraph.commands.eval import eval_settings, load_plan

    plan = load_plan(str(SPECS / "grpo_arith.rl"), ["rollout.temperature=0.7"], None)
    flags = dict(data=[], reward=None, n=None, temperature=None, top_p=None, top_k=None, max_new_tokens=None,
                 max_prompt_length=None, batch_size=None, engine=None, device=None, seed=None, ks=[],
                 pass_score=1.0)
    spec = eval_settings(plan, **flags)
    assert spec.data == ("builtin:arith/val",) and spec.reward_fn == "rlgraph.tasks.arith:exact_match"
    assert (spec.val.n, spec.val.temperature, spec.batch_size, spec.device) == (1, 0.0, 256, "cpu")
    sampled = eval_settings(plan, **{**flags, "n": 8})
    assert (sampled.val.n, sampled.val.temperature) == (8, 0.7)  # the rollout's, as validation's n > 1 samples
    given = eval_settings(plan, **{**flags, "n": 8, "temperature": 1.3, "max_new_tokens": 6, "data": ["x.jsonl"]})
    assert (given.val.temperature, given.generate.max_new_tokens, given.data) == (1.3, 6, ("x.jsonl",))


# --- bad input ---


def test_bad_input_is_an_error_that_says_what_to_fix(capsys, arith_model, tmp_path):
    code, out = run_eval(capsys, tmp_path / "nothing", "--spec", SPECS / "grpo_arith.rl")
    assert code == 1 and "does not exist" in out and "Traceback" not in out, out

    code, out = run_eval(capsys, "builtin:arith-gpt")
    assert code == 1 and "--data FILE and --reward" in out, out

    rows = tmp_path / "rows.jsonl"
    good = {"prompt": "1+2=", "reward_model": {"ground_truth": "3"}}
    rows.write_text(json.dumps(good) + "\n" + json.dumps({"reward_model": {"ground_truth": "4"}}) + "\n")
    code, out = run_eval(capsys, "builtin:arith-gpt", "--data", rows, "--reward", "rlgraph.tasks.arith:exact_match")
    assert code == 1 and "rows.jsonl:2: no \"prompt\" field" in out, out
    assert "Traceback" not in out

    rows.write_text(json.dumps(good) + "\n")
    code, out = run_eval(capsys, "builtin:arith-gpt", "--data", rows, "--reward", "rlgraph.tasks.arith:no_such_fn")
    assert code == 1 and "no_such_fn" in out and "Traceback" not in out, out

    code, out = run_eval(capsys, "builtin:arith-gpt", "--data", rows, "--reward", "rlgraph.tasks.arith:exact_match",
                         "--k", "2")
    assert code == 1 and "pass@2 needs several answers per prompt" in out, out

    code, out = run_eval(capsys, "builtin:arith-gpt", "--data", rows, "--reward", "rlgraph.tasks.arith:exact_match",
                         "--n", "0")
    assert code == 1 and "--n must be at least 1" in out, out


# --- a whole run, exported and evaluated ---


def test_eval_of_the_exported_model_scores_the_runs_last_validation(run_cli, capsys, tmp_path):
    run_dir = tmp_path / "run"
    code, out = run_cli("specs/grpo_arith.rl", "--output", run_dir, *fast(steps=2))
    assert code == 0, out
    last_val = read_metrics(run_dir)[-1]["val/score/mean"]
    from rlgraph.cli import main

    assert main(["export", str(run_dir), "--out", str(tmp_path / "model")]) == 0
    capsys.readouterr()

    code, out = run_eval(capsys, tmp_path / "model", "--spec", SPECS / "grpo_arith.rl", "-o", tmp_path / "a.json")
    assert code == 0, out
    result = json.loads((tmp_path / "a.json").read_text())
    # the same greedy tokens as the run's validation: the same score, exactly
    assert result["metrics"]["score/mean"] == last_val
    assert "score/mean" in out and "Traceback" not in out
    rows = result["rows"]
    assert len(rows) == result["prompts"] and sum(r["score"] for r in rows) / len(rows) == pytest.approx(last_val)

    # the run directory itself: its newest checkpoint, with the plan it was trained with; sampled as well
    code, out = run_eval(capsys, run_dir, "--n", "3", "--k", "1", "--k", "3", "-o", tmp_path / "b.json")
    assert code == 0, out
    sampled = json.loads((tmp_path / "b.json").read_text())
    metrics = sampled["metrics"]
    assert metrics["score/mean"] == last_val
    per_prompt = [[s["score"] for s in r["samples"]] for r in sampled["rows"]]
    assert all(len(row) == 3 for row in per_prompt)
    assert metrics["score/mean@3"] == pytest.approx(sum(map(sum, per_prompt)) / (3 * len(per_prompt)))
    assert metrics["score/pass@1"] == pytest.approx(metrics["score/mean@3"])  # a 0/1 reward
    assert metrics["score/pass@3"] == pytest.approx(metrics["score/best@3"])
