"""The rollout's `max_sequences` at run time: given to an engine once, where it is built (never per generate
call), the hf engine generates a batch in chunks of at most that many sequences (its KV cache is one chunk's),
with the tokens and log-probs of the whole batch at once; SGLang gets it as its scheduler's
`max_running_requests`."""

from __future__ import annotations

import uuid

import pytest
import torch

from .helpers import generate_settings, rollout_settings
from rlgraph.contract.settings import EnvSettings
from rlgraph.workers.engines import SamplingParams
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.engines.sglang import server_args
from rlgraph.workers.episodes import EnvPools
from rlgraph.workers.rollout import generate_rollout

PROMPTS = [[4, 5, 13, 6, 7, 14], [8, 13, 9, 14], [10, 14], [5, 5, 5, 13, 6, 14]]  # prompts of 6, 4, 2, 6 tokens


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", memory_fraction=None)


def count_rows(engine: HFEngine, monkeypatch) -> list[int]:
    """The number of rows of each `module.generate` call from now on (the real one runs)."""
    sizes: list[int] = []
    real = engine.module.generate

    def counted(*args, **kwargs):
        sizes.append(kwargs["input_ids"].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.module, "generate", counted)
    return sizes


@pytest.fixture
def batches(engine, monkeypatch):
    return count_rows(engine, monkeypatch)


def test_chunks_give_the_greedy_tokens_and_log_probs_of_the_whole_batch(engine, batches):
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    whole = engine.generate(PROMPTS, 3, greedy, with_log_probs=True)
    assert batches == [12]
    for limit, calls in ((5, [5, 5, 2]), (1, [1] * 12), (12, [12]), (50, [12])):
        batches.clear()
        limited = HFEngine(engine.module, engine.tokenizer, max_sequences=limit)  # the same module, a limit
        chunked = limited.generate(PROMPTS, 3, greedy, with_log_probs=True)
        assert batches == calls  # at most `limit` rows per call, every row once
        assert chunked.token_ids == whole.token_ids  # same tokens, same lengths, in the same order
        # a chunk is left-padded to its own longest prompt: the padding is masked out, and only the float32
        # summation order of the attention over a shorter row differs
        for a, b in zip(chunked.log_probs, whole.log_probs):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)
    assert any(len(row) > 1 for row in whole.token_ids)  # the comparison covers several decoded steps


def test_sampled_chunks_are_reproducible_and_keep_a_prompts_samples_adjacent(engine, batches):
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    limited = HFEngine(engine.module, engine.tokenizer, max_sequences=3)
    first = limited.generate(PROMPTS, 2, sampling, seed=3)
    assert batches == [3, 3, 2]
    assert limited.generate(PROMPTS, 2, sampling, seed=3).token_ids == first.token_ids
    assert len(first.token_ids) == 8
    with pytest.raises(ValueError, match="max_sequences must be >= 1, got 0"):
        HFEngine(engine.module, engine.tokenizer, max_sequences=0)


def test_the_rollouts_setting_reaches_the_engine_where_it_is_built(tiny_model_dir, monkeypatch):
    from rlgraph.workers.rollout import RolloutWorker

    worker = RolloutWorker(tiny_model_dir, rollout_settings(max_sequences=3), seed=0, device="cpu")
    batches = count_rows(worker.engine, monkeypatch)
    items = [{"input_ids": ids} for ids in PROMPTS]
    rollout = worker.generate(items, settings=generate_settings(n=2, temperature=0.0), seed=0)
    assert batches == [3, 3, 2] and len(rollout) == 8  # a generate call's settings carry no limit of their own


def test_an_engine_built_without_a_limit_generates_the_whole_batch_at_once(engine, batches):
    items = [{"input_ids": ids} for ids in PROMPTS]
    generate_rollout(engine, items, generate_settings(n=2, temperature=0.0), seed=0)
    assert batches == [8]  # unset: the hf engine's own default, the whole batch at once


def test_the_hybrid_engine_of_the_actor_generates_in_chunks(tiny_model_dir, monkeypatch):
    from rlgraph.workers.policy import PolicyWorker

    from .helpers import actor_settings

    actor = PolicyWorker(tiny_model_dir, actor_settings(), seed=0, device="cpu")
    batches = count_rows(actor.engine, monkeypatch)
    items = [{"input_ids": ids} for ids in PROMPTS]
    actor.generate(items, settings=generate_settings(n=4))
    assert batches == [16]  # no in-place rollout gave the engine a limit
    batches.clear()
    actor.host_rollout(rollout_settings(max_sequences=6))  # what building the rollout's alias does
    rollout = actor.generate(items, settings=generate_settings(n=4))
    assert batches == [6, 6, 4] and len(rollout) == 16
    actor.host_rollout(rollout_settings(max_sequences=6))  # a second rollout with the same limit: fine
    with pytest.raises(ValueError, match="two in-place rollouts on one policy set max_sequences = 6 and 3"):
        actor.host_rollout(rollout_settings(max_sequences=3))


ENV = """
from rlgraph.workers.envs import Environment, Observation


class Echo(Environment):
    '''Replies '=0' to the model's first turn and ends the episode after its second.'''

    def step(self, turn):
        if turn.index == 0:
            return Observation(text="=0", reward=0.0)
        return Observation(reward=1.0, done=True)
"""


def test_every_turn_of_multi_turn_episodes_keeps_the_limit(tiny_model_dir, tmp_path, monkeypatch):
    from rlgraph.workers.episodes import generate_episodes

    engine = HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", memory_fraction=None)
    # a random model rarely ends a turn: lean its head towards end-of-sequence, so episodes have two turns
    eos = engine.tokenizer.eos_token_id
    engine.module.lm_head.register_forward_hook(lambda _, __, logits: logits.index_add(
        -1, torch.tensor([eos]), torch.full((*logits.shape[:-1], 1), 3.0)))
    batches = count_rows(engine, monkeypatch)
    module = f"echo_env_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(ENV)
    env = EnvSettings(name="echo", cls=f"{module}:Echo", base_dir=str(tmp_path), declared_at="echo.rl:1", args={},
                      max_turns=2, max_observation_tokens=4, timeout_s=5.0, workers=1, max_failed_fraction=0.0,
                      tool_format="auto")
    items = [{"input_ids": ids, "prompt_text": "", "extra_info": {}} for ids in PROMPTS]
    pools = EnvPools()
    try:
        runs = {}
        for limit in (None, 3):
            batches.clear()
            settings = generate_settings(n=2, max_new_tokens=10, temperature=0.0, env=env)
            engine.max_sequences = limit  # the hook on the module stays; a limit as if built with it
            runs[limit] = (generate_episodes(engine, items, settings, pools, seed=0), list(batches))
    finally:
        pools.close()
    (whole, whole_calls), (chunked, chunked_calls) = runs[None], runs[3]
    assert whole_calls == [8, 8]  # without a limit, each turn generates for every running episode at once
    assert chunked_calls == [3, 3, 2, 3, 3, 2]
    assert all(e.turns == 2 for e in whole.episodes)
    assert torch.equal(chunked.responses, whole.responses) and torch.equal(chunked.loss_mask, whole.loss_mask)


def test_sglang_gets_the_limit_as_its_schedulers_max_running_requests():
    args = server_args("/models/qwen", dtype="bfloat16", device="cuda:1", memory_fraction=0.5, tp=2,
                       max_sequences=256)
    assert args["max_running_requests"] == 256 and args["mem_fraction_static"] == 0.5
    unset = server_args("/models/qwen", dtype="bfloat16", device="cuda:1", memory_fraction=0.5, tp=2,
                        max_sequences=None)
    assert "max_running_requests" not in unset  # SGLang's own default, from its KV pool
