"""Rollouts of several turns: the model and an environment take turns, token-in, token-out.

`generate_episodes` runs one episode per sample (n per prompt), all of a batch at once: each round, one
`engine.generate` call gives every running episode its next model turn (its prompt is the episode's ids so
far: the data prompt, then every turn and reply as ids, never decoded and encoded again), the runtime reads
the turn's tool calls (rlgraph/workers/envs/tools.py), and the environment processes (rlgraph/workers/envs/
pool.py) answer every episode's turn at once. A reply is appended as ids; it is attended to by later turns
and out of the loss mask. An episode ends when the environment says done, after `max_turns` model turns, or
when the response budget (`max_new_tokens`, model and environment tokens together) is used up.

A sample whose environment raises, hangs, answers with something else than an Observation or ends its
process is *failed*: its episode stops, its tokens are masked out of the loss, its reward is zero (the
driver zeros it), and it is counted. When more than `max_failed_fraction` of a batch fails, generation
raises `EnvFailuresError` with the first failure's traceback and row, which stops the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from rlgraph.contract.settings import EnvSettings, GenerateSettings
from rlgraph.models.sequences import left_pad
from rlgraph.workers.batch import EpisodeSummary, Rollout, TokenSource
from rlgraph.workers.engines import Engine, SamplingParams
from rlgraph.workers.envs.base import Observation, Turn
from rlgraph.workers.envs.loading import EnvError, load_env_class
from rlgraph.workers.envs.pool import EnvFailure, EnvPool
from rlgraph.workers.envs.tools import ToolFormat, ToolFormatError, make_tool_format

Seed = int | torch.Generator | None


class EnvFailuresError(EnvError):
    """More of a batch's episodes failed than the env block allows: the run stops (one paragraph, exit 1)."""


class EnvPools:
    """The environment pools and tool formats of one worker, by env name: started on first use and kept warm
    across steps (a pool's processes import the environment once)."""

    def __init__(self) -> None:
        self.pools: dict[str, EnvPool] = {}
        self.formats: dict[tuple[str, int], ToolFormat] = {}

    def get(self, env: EnvSettings, tokenizer: Any) -> tuple[EnvPool, ToolFormat]:
        key = (env.name, id(tokenizer))
        if key not in self.formats:
            tools = list(getattr(load_env_class(env), "tools", []) or [])
            try:
                self.formats[key] = make_tool_format(env.tool_format, tokenizer, tools)
            except ToolFormatError as err:
                raise EnvError(f"env {env.name} ({env.declared_at}): {err}") from None
        if env.name not in self.pools:
            self.pools[env.name] = EnvPool(env)
        return self.pools[env.name], self.formats[key]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()


PROCESS_POOLS = EnvPools()  # a worker process's own: its generate calls reuse the warm environment processes


@dataclass
class _Episode:
    row: dict[str, Any]
    budget: int
    ids: list[int] = field(default_factory=list)  # the response so far: model turns and replies
    sources: list[int] = field(default_factory=list)  # a TokenSource per id
    log_probs: list[float] = field(default_factory=list)  # per id: the sampled token's, 0 for a reply's
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    env_reward: float = 0.0
    failure: EnvFailure | None = None
    done: bool = False

    @property
    def left(self) -> int:
        return self.budget - len(self.ids)

    def insert(self, ids: list[int], limit: int) -> None:
        """An environment's reply, cut to `limit` tokens and to the budget; the episode ends when it fills it."""
        ids = list(ids)[: min(limit, self.left)]
        self.ids += ids
        self.sources += [TokenSource.ENV] * len(ids)
        self.log_probs += [0.0] * len(ids)
        if self.left <= 0:
            self.done = True

    def summary(self) -> EpisodeSummary:
        model = sum(1 for s in self.sources if s == TokenSource.MODEL)
        return EpisodeSummary(
            turns=self.turns, tool_calls=self.tool_calls, tool_errors=self.tool_errors, model_tokens=model,
            env_tokens=len(self.ids) - model, env_reward=self.env_reward,
            failure=None if self.failure is None else f"{self.failure.kind}: {self.failure.message}")


def generate_episodes(
    engine: Engine,
    items: Sequence[dict],
    settings: GenerateSettings,
    pools: EnvPools | None = None,
    *,
    seed: Seed = None,
    uid_offset: int = 0,
    policy_version: int = 0,
) -> Rollout:
    """`settings.n` episodes per item with the environment `settings.env`; rows of one item adjacent, as
    `generate_rollout` makes them. The Rollout's `episodes` says what each did and `env_seconds` how long the
    batch waited on the environment; `token_source` marks the environment's tokens, which the loss mask
    leaves out."""
    env = settings.env
    if env is None:
        raise ValueError("generate_episodes needs settings.env")
    pool, tool_format = (pools or PROCESS_POOLS).get(env, engine.tokenizer)
    tokenizer, n = engine.tokenizer, settings.n
    rows = [item for item in items for _ in range(n)]
    episodes = [_Episode(row=_episode_row(item, tokenizer), budget=settings.max_new_tokens) for item in rows]
    stop_ids = set(engine.eos_token_ids)
    turn_seeds = _seed_stream(seed)
    env_seconds = 0.0
    try:
        clock = time.perf_counter()
        answers = pool.reset([(k, episode.row) for k, episode in enumerate(episodes)])
        env_seconds += time.perf_counter() - clock
        for k, episode in enumerate(episodes):
            _take(episode, answers.get(k), tool_format, env)
        for turn in range(env.max_turns):
            running = [k for k, e in enumerate(episodes) if not e.done]
            if not running:
                break
            sampling = SamplingParams(
                max_new_tokens=max(episodes[k].left for k in running), temperature=settings.temperature,
                top_p=settings.top_p, top_k=settings.top_k, greedy=settings.temperature == 0,
                stop_token_ids=tool_format.stop_token_ids)
            prompts = [list(rows[k]["input_ids"]) + episodes[k].ids for k in running]
            generation = engine.generate(prompts, 1, sampling, seed=next(turn_seeds),
                                         with_log_probs=settings.keep_log_probs)
            turns = []
            for i, k in enumerate(running):
                episode = episodes[k]
                ids = list(generation.token_ids[i])[: episode.left]  # one batch, one max: each its own budget
                episode.ids += ids
                episode.sources += [TokenSource.MODEL] * len(ids)
                kept = generation.log_probs[i][: len(ids)] if generation.log_probs is not None else [0.0] * len(ids)
                episode.log_probs += list(kept)
                episode.turns += 1
                ended_by_eos = bool(ids) and ids[-1] in stop_ids
                text = tokenizer.decode(ids[:-1] if ended_by_eos else ids, skip_special_tokens=False)
                calls, errors = tool_format.parse(text)
                episode.tool_calls += len(calls) + len(errors)
                episode.tool_errors += len(errors)
                turns.append((k, Turn(turn, text, ids, calls, errors, ended_by_eos)))
                if episode.left <= 0 or turn == env.max_turns - 1:
                    episode.done = True  # the environment still sees the turn: it may judge it
            clock = time.perf_counter()
            answers = pool.step(turns)
            env_seconds += time.perf_counter() - clock
            for k, _ in turns:
                _take(episodes[k], answers.get(k), tool_format, env)
    finally:
        pool.end_all()
    _check_failures(episodes, env)
    rollout = _as_rollout(items, n, episodes, tokenizer, engine.pad_token_id, stop_ids, settings,
                          uid_offset=uid_offset, policy_version=policy_version)
    rollout.env_seconds = env_seconds
    return rollout


def _take(episode: _Episode, answer: Observation | EnvFailure | None, tool_format: ToolFormat,
          env: EnvSettings) -> None:
    """An environment's answer to the episode's last call: a reply to insert, a reward, the end, or a failure."""
    if episode.failure is not None:
        return
    if isinstance(answer, EnvFailure):
        episode.failure, episode.done = answer, True
        return
    if answer is None:  # a reset may answer nothing
        return
    episode.env_reward = float(answer.reward)
    episode.tool_errors += int(answer.tool_errors)
    if answer.done:
        episode.done = True
    if episode.done:
        return  # the episode is over: a last reply would never be read by the model
    ids = answer.token_ids if answer.token_ids is not None else (
        tool_format.reply_ids(answer.text) if answer.text is not None else [])
    episode.insert(ids, env.max_observation_tokens)


def _check_failures(episodes: list[_Episode], env: EnvSettings) -> None:
    failed = [(k, e) for k, e in enumerate(episodes) if e.failure is not None]
    if len(failed) <= env.max_failed_fraction * len(episodes):
        return
    k, first = failed[0]
    row = first.row
    where = f"data row {row.get('extra_info', {}).get('index', '?') if isinstance(row.get('extra_info'), dict) else '?'}"
    prompt = row.get("prompt_text") or ""
    trace = f"\n\nThe environment's traceback:\n{first.failure.traceback.rstrip()}" if first.failure.traceback else ""
    raise EnvFailuresError(
        f"env {env.name} ({env.cls}, declared at {env.declared_at}) failed {len(failed)} of the {len(episodes)} "
        f"episodes of this batch, more than max_failed_fraction = {env.max_failed_fraction:g} allows. The first: "
        f"sample {k} ({where}, prompt {prompt[:80]!r}): {first.failure.message.split(f'episode {k}: ', 1)[-1]}. Fix the "
        f"environment, raise timeout_s if it is only slow, or raise max_failed_fraction to train past such "
        f"samples (they get no reward and no loss).{trace}")


def _as_rollout(items: Sequence[dict], n: int, episodes: list[_Episode], tokenizer: Any, pad_token_id: int,
                stop_ids: set[int], settings: GenerateSettings, *, uid_offset: int, policy_version: int) -> Rollout:
    rows, width = len(episodes), settings.max_new_tokens
    prompts, prompt_mask = left_pad([item["input_ids"] for item in items], pad_token_id)
    prompts, prompt_mask = prompts.repeat_interleave(n, dim=0), prompt_mask.repeat_interleave(n, dim=0)
    responses = torch.full((rows, width), pad_token_id, dtype=torch.long)  # (batch, R)
    token_source = torch.zeros((rows, width), dtype=torch.int8)  # (batch, R) PAD
    log_probs = torch.zeros((rows, width), dtype=torch.float32)  # (batch, R)
    for k, episode in enumerate(episodes):
        length = len(episode.ids)
        responses[k, :length] = torch.tensor(episode.ids, dtype=torch.long)
        token_source[k, :length] = torch.tensor(episode.sources, dtype=torch.int8)
        log_probs[k, :length] = torch.tensor(episode.log_probs, dtype=torch.float32)
    loss_mask = token_source == TokenSource.MODEL  # (batch, R)
    failed = torch.tensor([e.failure is not None for e in episodes])
    loss_mask[failed] = False  # a failed sample trains nothing
    extra_info = []
    for episode in episodes:
        info = episode.row.get("extra_info")
        extra_info.append({**(info if isinstance(info, dict) else {}), "env_reward": episode.env_reward})
    rollout = Rollout.build(
        prompts, prompt_mask, responses, loss_mask, pad_token_id, token_source=token_source,
        policy_version=policy_version,
        uid=[uid_offset + i for i in range(len(items)) for _ in range(n)],
        data_source=[e.row.get("data_source", "") for e in episodes],
        ground_truth=[e.row.get("ground_truth") for e in episodes],
        extra_info=extra_info,
        prompt_text=[e.row["prompt_text"] for e in episodes],
        # the tool-call tags stay in (a reward reads the answer after the last reply); padding and EOS do not
        response_text=[tokenizer.decode([i for i in e.ids if i not in stop_ids and i != pad_token_id],
                                        skip_special_tokens=False) for e in episodes],
    )
    if settings.keep_log_probs:
        rollout.sample_log_probs = log_probs
    rollout.episodes = [e.summary() for e in episodes]
    return rollout


def _episode_row(item: dict, tokenizer: Any) -> dict[str, Any]:
    """What an environment's reset gets of a data row: the prompt, as text and ids, and the row's fields."""
    text = item.get("prompt_text") or tokenizer.decode(item["input_ids"], skip_special_tokens=True)
    return {"input_ids": list(item["input_ids"]), "prompt_text": text,
            "data_source": item.get("data_source", ""), "ground_truth": item.get("ground_truth"),
            "extra_info": item.get("extra_info")}


def _seed_stream(seed: Seed):
    """One seed per turn: drawn from the worker's generator, or from a generator seeded with `seed`."""
    if seed is None:
        while True:
            yield None
    generator = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    while True:
        yield int(torch.randint(0, 2**62, (1,), generator=generator))
