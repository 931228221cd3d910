"""Whole runs with engine = vllm (vLLM's CPU build): the colocated spec, killed mid-run, recovers by itself; the
own-pool spec trains asynchronously with the engine-vs-trainer mismatch in its metrics. Each run starts the engine
in its rollout's process (~10 s), so the runs are few and short."""

from __future__ import annotations

import json

import pytest

from .test_recovery import _kill_a_worker_after, _steps
from .test_run import check_run, cpu_specs

pytest.importorskip("vllm", reason="engine = vllm needs vLLM (`make install` brings its CPU build)")

SMALL = ("-s", "train.validate_every=0", "-s", "data.batch_size=16")


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_a_killed_engine_process_is_recovered_and_the_colocated_run_finishes(run_cli, tmp_path):
    # the engine runs in the process of the actor it is colocated with: killing it kills the engine
    out = tmp_path / "run"
    killed: list[int] = []
    killer = _kill_a_worker_after(out, 2, killed)
    code, text = run_cli("specs/grpo_arith_vllm.rl", "--output", out, "-s", "train.steps=3",
                         "-s", "train.checkpoint_every=2", *SMALL)
    killer.join(timeout=5)
    assert killed, "the run ended before the engine's process could be killed"
    assert code == 0, text
    assert "recovering (1 of train.max_failures = 3)" in text and "a worker process died" in text
    assert _steps(out / "metrics.jsonl") == [0, 1, 2, 3]
    check_run(out, "grpo_arith_vllm.rl", text, steps=3)
    records = _records(out)
    assert sum(r.get("training/recoveries", 0) for r in records) == 1
    # validation generated through the engine, greedy, at the first and the last step
    assert "val/score/mean" in records[0] and "val/score/mean" in records[-1]


def test_an_own_pool_engine_trains_asynchronously_with_the_mismatch_in_the_metrics(run_cli, tmp_path):
    out = tmp_path / "run"
    code, text = run_cli("specs/grpo_arith_vllm_async.rl", "--output", out, "-s", "train.steps=2", *SMALL)
    assert code == 0, text
    check_run(out, "grpo_arith_vllm_async.rl", text, steps=2)
    first, second = _records(out)[1:]
    # step 1 samples with the weights the actor starts from: the engine's log-probs are the actor's own
    assert first["async/staleness_max"] == 0 and first["training/rollout_probs_diff_max"] < 1e-4
    # step 2 was generated while step 1 trained: one update behind, and the mismatch shows it
    assert second["async/staleness_max"] == 1
    assert second["training/rollout_probs_diff_max"] > first["training/rollout_probs_diff_max"]
    assert {"mismatch/rollout_is_mean", "mismatch/mismatch_kl"} <= set(second)


def test_these_runs_are_every_shipped_vllm_spec():
    """test_run.py leaves the vllm specs to this file: each must be one of the runs above."""
    assert cpu_specs(engine="vllm") == ["grpo_arith_vllm.rl", "grpo_arith_vllm_async.rl"]
