"""Every train.samples_every steps a run writes a few of the step's rows to samples.jsonl and shows one:
what a person reads to see what the model generated and what the reward made of it."""

from __future__ import annotations

import json

import pytest

from .helpers import SPECS, fast


# one process for every role (the step runs inside it), and roles in processes of their own (the driver's path)
@pytest.mark.parametrize("spec", ["grpo_arith.rl", "ppo_split_arith.rl"])
def test_samples_are_written_every_k_steps_and_one_is_shown(run_cli, tmp_path, spec):
    code, out = run_cli(SPECS / spec, "--output", tmp_path, *fast(steps=2, **{"train.samples_every": 2}))
    assert code == 0, out
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [2] * 4  # step 2 only, four rows of its batch
    assert all(set(s) == {"step", "uid", "data_source", "prompt", "response", "ground_truth", "score", "advantage"}
               for s in samples)
    assert len({s["uid"] for s in samples}) == 4  # rows of different prompts
    for s in samples:
        assert s["prompt"].endswith("=") and s["score"] in (0.0, 1.0) and isinstance(s["advantage"], float)
        assert s["data_source"] and s["ground_truth"]
    assert f"step 2 sample: {samples[0]['prompt']!r}" in " ".join(out.split())
