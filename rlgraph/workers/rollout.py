"""The rollout: prompts in, a `Rollout` out, through any engine (rlgraph/workers/engines/).

`generate_rollout` is the one place that turns an engine's token ids into a `Rollout` (padding, masks,
decoded text, uid, the per-row lists); `PolicyWorker.generate` (the hybrid engine, sampling from the actor's
module in place) and `RolloutWorker` (a rollout with weights of its own, on its own devices) both call it.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import torch

from rlgraph.contract.settings import GenerateSettings, RolloutSettings
from rlgraph.models.sequences import left_pad
from rlgraph.workers.batch import Rollout
from rlgraph.workers.engines import Engine, EngineCapabilities, Generation, SamplingParams, engine_class

Seed = int | torch.Generator | None


class RolloutWorker:
    """A rollout with its own copy of the weights, refreshed by the weight sync (`load_weights` bucket by bucket)."""

    def __init__(self, model_path: str, settings: RolloutSettings, *, seed: int,
                 device: str | None = None, deterministic: bool = False) -> None:
        if not 0 < settings.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {settings.memory_fraction}")
        self.settings = settings
        self.engine = engine_class(settings.engine).from_pretrained(
            model_path, dtype=settings.dtype, device=device, memory_fraction=settings.memory_fraction, tp=settings.tp,
            max_sequences=settings.max_sequences, deterministic=deterministic)
        self.tokenizer = self.engine.tokenizer
        self.sample_generator = torch.Generator().manual_seed(seed)

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.engine.capabilities

    def generate(self, items: list[dict], *, settings: GenerateSettings, seed: Seed = None, uid_offset: int = 0,
                 policy_version: int = 0) -> Rollout:
        """`generate_rollout` with this worker's engine; without a seed, draws one from the worker's seed."""
        return generate_rollout(self.engine, items, settings, seed=self.sample_generator if seed is None else seed,
                                uid_offset=uid_offset, policy_version=policy_version)

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.engine.load_weights(state_dict)

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Some of the weights, by name: one bucket of a weight sync (rlgraph/workers/weight_sync.py)."""
        self.engine.load_weights(weights)

    def release_memory(self) -> None:
        self.engine.release_memory()

    def resume_memory(self) -> None:
        self.engine.resume_memory()


def generate_rollout(
    engine: Engine,
    items: Sequence[dict],
    settings: GenerateSettings,
    *,
    seed: Seed = None,
    uid_offset: int = 0,
    policy_version: int = 0,
) -> Rollout:
    """Sample `settings.n` responses per item (dataset rows: `input_ids`, and optionally `prompt_text`,
    `data_source`, `ground_truth`, `extra_info`); rows of one item are adjacent, `uid` = uid_offset + item index.

    `temperature = 0`: greedy. A torch.Generator as `seed` gives one seed per call. `keep_log_probs` keeps
    log pi(token) of each sampled token as the Rollout's `sample_log_probs`. `policy_version`: the version
    of the weights that sample (the number of updates they have had). With `settings.env`, each sample is an
    episode of several turns with that environment (rlgraph/workers/episodes.py).
    """
    n, max_new_tokens = settings.n, settings.max_new_tokens
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got n={n}, max_new_tokens={max_new_tokens}")
    if not items:
        raise ValueError("generate needs at least one prompt")
    if settings.keep_log_probs and not engine.capabilities.kept_log_probs:
        raise ValueError(f"the {engine.capabilities.name!r} engine cannot keep the sampled tokens' log-probs")
    if settings.env is not None:
        from rlgraph.workers.episodes import generate_episodes  # imports the environment machinery only when used

        return generate_episodes(engine, items, settings, seed=seed, uid_offset=uid_offset,
                                 policy_version=policy_version)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=settings.temperature, top_p=settings.top_p,
                              top_k=settings.top_k, greedy=settings.temperature == 0)
    if isinstance(seed, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=seed))
    generation = engine.generate([list(item["input_ids"]) for item in items], n, sampling, seed=seed,
                                 with_log_probs=settings.keep_log_probs)
    return build_rollout(items, n, generation, engine.tokenizer, engine.pad_token_id, max_new_tokens,
                         uid_offset=uid_offset, policy_version=policy_version)


def build_rollout(items: Sequence[dict], n: int, generation: Generation, tokenizer: Any, pad_token_id: int,
                  max_new_tokens: int, *, uid_offset: int = 0, policy_version: int = 0) -> Rollout:
    """An engine's samples as a Rollout: prompts left-padded, responses right-padded to max_new_tokens."""
    rows = len(items) * n
    lengths = [len(ids) for ids in generation.token_ids]
    if len(lengths) != rows or max(lengths, default=0) > max_new_tokens:
        raise RuntimeError(f"the engine returned {len(lengths)} samples of up to {max(lengths, default=0)} tokens; "
                           f"expected {len(items)} prompts x n={n} samples of at most {max_new_tokens}")
    prompts, prompt_mask = left_pad([item["input_ids"] for item in items], pad_token_id)
    prompts = prompts.repeat_interleave(n, dim=0)  # (batch, P)
    prompt_mask = prompt_mask.repeat_interleave(n, dim=0)  # (batch, P)
    # --- responses: exactly max_new_tokens columns, pad after the stop token
    response_mask = (torch.arange(max_new_tokens) < torch.tensor(lengths).unsqueeze(1)).long()  # (batch, R)
    responses = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long)  # (batch, R)
    responses[response_mask.bool()] = torch.tensor(list(itertools.chain.from_iterable(generation.token_ids)),
                                                   dtype=torch.long)

    def per_row(key: str, default: Any = None) -> list:
        return [item.get(key, default) for item in items for _ in range(n)]

    prompt_text = [
        item.get("prompt_text") or tokenizer.decode(item["input_ids"], skip_special_tokens=True)
        for item in items
        for _ in range(n)
    ]
    rollout = Rollout.build(
        prompts,
        prompt_mask,
        responses,
        response_mask,
        pad_token_id,
        uid=[uid_offset + i for i in range(len(items)) for _ in range(n)],
        data_source=per_row("data_source", ""),
        ground_truth=per_row("ground_truth"),
        extra_info=per_row("extra_info"),
        prompt_text=prompt_text,
        response_text=tokenizer.batch_decode(generation.token_ids, skip_special_tokens=True),
        policy_version=policy_version,
    )
    if generation.log_probs is not None:
        sample_log_probs = torch.zeros((rows, max_new_tokens), dtype=torch.float32)  # (batch, R), 0 after EOS
        sample_log_probs[response_mask.bool()] = torch.tensor(
            list(itertools.chain.from_iterable(generation.log_probs)), dtype=torch.float32)
        rollout.sample_log_probs = sample_log_probs
    return rollout


def mask_after_eos(responses: torch.Tensor, eos_token_id: int | list[int]) -> torch.Tensor:
    """1 up to and including the first EOS, 0 after; all 1 for a row without EOS."""
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    is_eos = torch.isin(responses, torch.as_tensor(ids, device=responses.device))  # (batch, R)
    eos_before = is_eos.long().cumsum(dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (eos_before == 0).long()
