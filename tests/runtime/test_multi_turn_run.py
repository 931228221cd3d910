"""A run whose rollout talks with an environment over several turns: an episode that fails is counted and
trained past; when more fail than the env block allows, the run stops with one paragraph, exit code 1, and
the last checkpoint intact."""

from __future__ import annotations

import json
import uuid

from .helpers import read_metrics

SPEC = """rlgraph 1
model policy {{ path = "builtin:arith-gpt" }}
pool main {{ nodes = 1  devices_per_node = 1  device = cpu }}
env talk {{
  class = "{module}:Flaky"
  args {{ fail_after = {fail_after} }}
  max_turns = 3
  max_observation_tokens = 3
  timeout_s = 5
  workers = 1
  max_failed_fraction = 0.5
}}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  batch_size = 4 }}
train {{ steps = 3  seed = 0  validate_every = 0  checkpoint_every = 1  samples_every = 1 }}
role actor {{ model = policy  pool = main  optim {{ lr = 1e-4 }} }}
role rollout {{ colocate = actor  engine = hf  n = 2  temperature = 1.0  max_new_tokens = 8 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate(env = talk) -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 4)
}}
"""

# An environment without tools (the plain format): after the model's first turn it inserts " =" and lets the
# model answer again. Episodes 1, 5, 9, ... of its process raise (a quarter: samples 0 and 4 of a batch of 8);
# after `fail_after` episodes, every episode raises.
ENV = """
from rlgraph.workers.envs import Environment, Observation

STARTED = [0]


class Flaky(Environment):
    def __init__(self, fail_after):
        self.fail_after = fail_after

    def reset(self, row):
        STARTED[0] += 1
        self.number, self.row = STARTED[0], row

    def step(self, turn):
        if self.number > self.fail_after:
            raise RuntimeError("the sandbox is gone")
        if self.number % 4 == 1:
            raise ValueError("no such row in the sandbox")
        if turn.index == 0:
            return Observation(text=" =")
        return Observation(reward=1.0, done=True)
"""


def _write(tmp_path, fail_after: int):
    module = f"flaky_env_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(ENV)
    spec = tmp_path / "talk.rl"
    spec.write_text(SPEC.format(module=module, fail_after=fail_after))
    return spec


def test_failed_episodes_are_counted_and_a_run_past_the_threshold_stops_cleanly(run_cli, tmp_path):
    from rlgraph.runtime import checkpoint as ckpt

    spec = _write(tmp_path, fail_after=16)  # 4 prompts x n = 2: steps 1 and 2 start 16 episodes
    out = tmp_path / "run"
    code, text = run_cli(spec, "--output", out)
    assert code == 1, text
    paragraph = text[text.index("env talk"):]
    assert "failed 8 of the 8 episodes of this batch, more than max_failed_fraction = 0.5" in paragraph
    assert "RuntimeError: the sandbox is gone" in paragraph  # the environment's own traceback
    assert "raise RuntimeError" in paragraph
    assert "Traceback (most recent call last)" in paragraph and "rlgraph/workers" not in paragraph
    records = [r for r in read_metrics(out) if r["training/global_step"] > 0]
    assert [r["training/global_step"] for r in records] == [1, 2]
    for record in records:
        assert record["env/failed"] == 2 and record["env/failed_fraction"] == 0.25
        assert record["num_turns/max"] == 2 and record["response_length/env_tokens_mean"] > 0
        assert record["timing_s/env"] > 0  # the batch's wait on its environment processes
    last = ckpt.latest_checkpoint(out)
    assert last is not None and last.step == 2
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    failed = [s for s in samples if s["episode"]["failed"]]
    assert failed and all(s["score"] == 0.0 for s in failed)
    assert all("raised" in s["episode"]["failure"] for s in failed)
