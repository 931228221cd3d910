"""Episodes with an environment through the real HF engine (rlgraph/workers/episodes.py): the ids trained on
are exactly the ids the model generated, the environment's ids sit between them out of the loss, and an
environment that raises, hangs, answers garbage or ends its process fails its own sample only."""

from __future__ import annotations

import uuid

import pytest
import torch

from rlgraph.contract.settings import EnvSettings, GenerateSettings
from rlgraph.workers.batch import TokenSource
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.episodes import EnvFailuresError, EnvPools, generate_episodes

ENV = """
import os, time
from rlgraph.workers.envs import Environment, Observation


class Talk(Environment):
    '''Answers the model's first turn with '=0' and ends the episode after its second; a row's extra_info
    `fault` makes its step misbehave.'''

    def reset(self, row):
        self.fault = (row["extra_info"] or {}).get("fault")

    def step(self, turn):
        if self.fault == "raise":
            raise KeyError("no such answer")
        if self.fault == "hang":
            time.sleep(60)
        if self.fault == "garbage":
            return {"text": 42}
        if self.fault == "exit":
            os._exit(7)
        if turn.index == 0:
            return Observation(text="=0", reward=0.5)
        return Observation(reward=1.0, done=True)
"""


@pytest.fixture
def env_settings(tmp_path):
    module = f"talk_env_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(ENV)

    def make(workers: int = 1, max_failed_fraction: float = 1.0) -> EnvSettings:
        return EnvSettings(name="talk", cls=f"{module}:Talk", base_dir=str(tmp_path), declared_at="talk.rl:3",
                           args={}, max_turns=3, max_observation_tokens=4, timeout_s=1.0, workers=workers,
                           max_failed_fraction=max_failed_fraction, tool_format="auto")

    return make


class LossyTokenizer:
    """The model's tokenizer, except that decoding writes every '=' as '+': decode then encode is not the
    identity, so a runtime that re-tokenised the history would train on other ids than the model generated."""

    def __init__(self, tokenizer):
        self.inner = tokenizer

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, ids, **kwargs):
        return self.inner.decode(ids, **kwargs).replace("=", "+")


class RecordingEngine(HFEngine):
    """The HF engine, keeping every batch of ids it generated."""

    def generate(self, *args, **kwargs):
        generation = super().generate(*args, **kwargs)
        self.generated.append(generation.token_ids)
        return generation


def _engine(model_dir: str) -> RecordingEngine:
    from rlgraph.workers.loading import load_causal_lm

    module, tokenizer = load_causal_lm(model_dir, torch.float32, torch.device("cpu"))
    # a random model rarely ends a turn: lean its head towards end-of-sequence, so episodes have several turns
    eos = tokenizer.eos_token_id
    module.lm_head.register_forward_hook(lambda _, __, logits: logits.index_add(
        -1, torch.tensor([eos]), torch.full((*logits.shape[:-1], 1), 3.0)))
    engine = RecordingEngine(module.eval(), LossyTokenizer(tokenizer))
    engine.generated = []
    return engine


def _items(engine, prompts: list[str], faults: list[str | None] | None = None) -> list[dict]:
    faults = faults or [None] * len(prompts)
    return [{"input_ids": engine.tokenizer.inner.encode(p, add_special_tokens=False), "prompt_text": p,
             "data_source": "test", "ground_truth": "0", "extra_info": {"fault": f}} for p, f in zip(prompts, faults)]


def _settings(env: EnvSettings, n: int = 2) -> GenerateSettings:
    return GenerateSettings(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12, keep_log_probs=True,
                            env=env)


def test_the_ids_trained_on_are_the_ids_generated_and_the_replies_sit_out_of_the_loss(tiny_model_dir,
                                                                                      env_settings):
    engine = _engine(tiny_model_dir)
    pools = EnvPools()
    try:
        rollout = generate_episodes(engine, _items(engine, ["1+2=", "3+4="]), _settings(env_settings(), n=4),
                                    pools, seed=0)
    finally:
        pools.close()
    first, second = engine.generated[0], engine.generated[1] if len(engine.generated) > 1 else []
    reply = engine.tokenizer.encode("=0", add_special_tokens=False)
    second_turns = iter(second)
    for row in range(len(rollout)):
        segments = rollout.segments(row)
        model_ids = rollout.responses[row][rollout.token_source[row] == TokenSource.MODEL].tolist()
        env_ids = rollout.responses[row][rollout.token_source[row] == TokenSource.ENV].tolist()
        expected = list(first[row])
        if len(segments) > 1:  # the turn left room for the environment's reply and a second turn
            assert [s.source for s in segments][:2] == [TokenSource.MODEL, TokenSource.ENV]
            assert env_ids == reply[: len(env_ids)]
            if len(segments) == 3:
                expected += list(next(second_turns))[: segments[2].stop - segments[2].start]
        assert model_ids == expected  # token-in, token-out: never decoded and encoded again
        assert rollout.loss_mask[row].bool().tolist() == (rollout.token_source[row] == TokenSource.MODEL).tolist()
        assert (rollout.sample_log_probs[row][rollout.token_source[row] == TokenSource.ENV] == 0).all()
        if len(segments) > 1:  # the lossy decode changes the reply's '=': a re-tokenising runtime would differ
            ids = rollout.responses[row][: segments[-1].stop].tolist()
            assert engine.tokenizer.encode(engine.tokenizer.decode(ids), add_special_tokens=False) != ids
    assert any(len(rollout.segments(row)) == 3 for row in range(len(rollout)))
    assert rollout.episodes is not None and all(not e.failed for e in rollout.episodes)
    assert all(e.env_tokens == int((rollout.token_source[i] == TokenSource.ENV).sum())
               for i, e in enumerate(rollout.episodes))


def test_a_misbehaving_environment_fails_its_own_sample_only(tiny_model_dir, env_settings):
    engine = _engine(tiny_model_dir)
    faults = [None, "raise", "hang", "garbage", "exit"]
    pools = EnvPools()
    try:
        rollout = generate_episodes(engine, _items(engine, ["1 ="] * 5, faults),
                                    _settings(env_settings(workers=5), n=1), pools, seed=1)
    finally:
        pools.close()
    kinds = [e.failure.split(":")[0] if e.failed else None for e in rollout.episodes]
    assert kinds == [None, "raised", "timeout", "garbage", "died"]
    assert "KeyError" in rollout.episodes[1].failure and "code 7" in rollout.episodes[4].failure
    assert rollout.env_seconds >= 1.0  # the batch waited for the hung environment until its timeout_s
    for row in range(1, 5):  # a failed sample trains nothing
        assert rollout.loss_mask[row].sum() == 0
    assert rollout.loss_mask[0].sum() > 0


def test_more_failures_than_allowed_stop_generation_with_the_environments_traceback(tiny_model_dir,
                                                                                     env_settings):
    engine = _engine(tiny_model_dir)
    pools = EnvPools()
    try:
        with pytest.raises(EnvFailuresError) as caught:
            generate_episodes(engine, _items(engine, ["1 =", "2 ="], ["raise", None]),
                              _settings(env_settings(max_failed_fraction=0.25)), pools, seed=0)
    finally:
        pools.close()
    message = str(caught.value)
    assert "env talk" in message and "failed 2 of the 4 episodes" in message and "max_failed_fraction = 0.25" in message
    assert "prompt '1 ='" in message and "KeyError: 'no such answer'" in message
    assert 'raise KeyError("no such answer")' in message
