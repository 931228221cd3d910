"""The rollout-engine seam: token ids in, token ids (and their log-probs) out; weights in; memory out and back.

Modelled on SGLang's offline engine (`generate(input_ids=...)`, `update_weights_from_tensor`,
`release_memory_occupation` / `resume_memory_occupation`). An engine knows nothing of datasets or of the
`Rollout`: `rlgraph.workers.rollout` turns its output into one, the same way for every engine.

This module imports neither torch nor transformers, so the registry and the capabilities stay cheap to read.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rlgraph.contract.engines import EngineFacts

if TYPE_CHECKING:
    import torch

# An engine class's `capabilities` are its line of rlgraph/contract/engines.py ENGINES, the one statement of them
EngineCapabilities = EngineFacts


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token. A temperature of 0 means greedy."""

    max_new_tokens: int  # the most tokens a response may have
    temperature: float = 1.0
    top_p: float = 1.0  # nucleus mass; 1 = off
    top_k: int = 0  # sample among the k likeliest tokens; 0 = all
    greedy: bool = False  # argmax at every step (the other settings are then unused)
    # ids that end a response besides the model's end-of-sequence ones, kept as its last token (a tool call's
    # closing tag: the environment answers, then the model goes on)
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"need max_new_tokens >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 <= self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"need temperature >= 0, 0 <= top_p <= 1 and top_k >= 0, got temperature="
                             f"{self.temperature}, top_p={self.top_p}, top_k={self.top_k}")
        if self.temperature == 0:
            object.__setattr__(self, "greedy", True)


@dataclass(frozen=True)
class Generation:
    """An engine's answer: one row per sample, the n samples of a prompt adjacent (p0 p0 p1 p1 ...).

    A row holds the response tokens up to and including the first stop token, or `max_new_tokens` tokens
    when none came; nothing after it (no padding)."""

    token_ids: list[list[int]]
    # log pi(token) of each sampled token under the weights that sampled it, at the sampling temperature,
    # before any top-k / top-p truncation (verl's and TRL's old log-probs); rows as in token_ids
    log_probs: list[list[float]] | None = None


class Engine(ABC):
    """A rollout engine. `rlgraph.contract.engines.ENGINES` names every one; adding one = a module + a line there.

    Besides the methods, an engine has `tokenizer` (decodes the samples), `pad_token_id` and `eos_token_ids`
    (the ids that end a response: the tokenizer's and the model's end-of-sequence ones).
    """

    capabilities: ClassVar[EngineCapabilities]
    tokenizer: Any
    pad_token_id: int
    eos_token_ids: list[int]

    @classmethod
    def check_installed(cls) -> None:
        """Raise ImportError, naming what to install, when the engine's own packages are missing. Pre-flight
        calls it before Ray starts; an engine that needs nothing beyond the `run` extra has nothing to check."""

    @classmethod
    @abstractmethod
    def from_pretrained(cls, model_path: str, *, dtype: str, device: str | None,
                        memory_fraction: float | None, tp: int = 1, max_sequences: int | None = None,
                        deterministic: bool = False) -> Engine:
        """An engine that owns its weights, loaded from a local HF folder (or `builtin:` model).

        `memory_fraction`: the share of the device it may take (weights + KV cache), for engines whose
        capabilities say they honour it; the others ignore it. None: the engine's own default.
        `tp`: the devices one replica spans (at most `capabilities.max_tp`).
        `max_sequences`: the most sequences generated at once (vLLM's max_num_seqs, SGLang's
        max_running_requests, the hf engine's chunk of rows), given here once and never per call. None: its
        default.
        `deterministic` (train.deterministic): an engine that honours a sample's seed only in a mode of its own
        turns that mode on (SGLang); the hf engine runs on the process's deterministic torch kernels, and vLLM
        honours per-request seeds in any mode."""

    @abstractmethod
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, seed: int | None = None,
                 with_log_probs: bool = False) -> Generation:
        """`n` samples of every prompt. The same seed, weights and settings give the same tokens; at most the
        engine's `max_sequences` (given where it was built) at a time."""

    @abstractmethod
    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take (some of) the trainer's weights, by parameter name; names the model lacks are an error."""

    @abstractmethod
    def release_memory(self) -> None:
        """Free the device memory the engine holds (weights, KV cache) so training can use it; `generate`
        is an error until `resume_memory`. Weights loaded meanwhile are kept."""

    @abstractmethod
    def resume_memory(self) -> None:
        """Take the device memory back after `release_memory`; a no-op when nothing was released."""


# --- a checkpoint's conventions, shared by every engine ---


def as_id_list(ids: int | list[int] | None) -> list[int]:
    """An `eos_token_id` as configs write it (one id, a list, or none) -> a list."""
    if ids is None:
        return []
    return [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]


def stop_token_ids(tokenizer_eos: int | list[int] | None, shipped_eos: int | list[int] | None) -> list[int]:
    """The ids that end a response: the tokenizer's EOS, then every other end-of-turn id the model ships in its
    generation config (chat models end a turn with one, e.g. Llama 3's <|eot_id|>). The first of any ends it."""
    ids = as_id_list(tokenizer_eos)
    return ids + [i for i in as_id_list(shipped_eos) if i not in ids]


def shipped_eos_ids(model_folder: str) -> list[int]:
    """`eos_token_id` of the folder's generation_config.json (an int or a list); [] without one."""
    path = os.path.join(model_folder, "generation_config.json")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as file:
        return as_id_list(json.load(file).get("eos_token_id"))


def pad_token_id(tokenizer: Any, stop_ids: list[int]) -> int:
    """The tokenizer's pad token, else the first stop token (verl's and TRL's fallback). Padding is never read
    back as a token: every mask comes from lengths, so a pad that equals EOS changes nothing."""
    if not stop_ids:
        raise ValueError("the tokenizer has no eos token and the model's generation_config lists none: "
                         "set `eos_token_id` in the model folder's generation_config.json")
    pad = tokenizer.pad_token_id
    return pad if pad is not None else stop_ids[0]


def check_weight_names(names: Iterable[str], known: set[str]) -> None:
    """A weight sync whose names the rollout model lacks came from another architecture: say so, not load half."""
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"the rollout model has no parameter named {', '.join(unknown[:5])}"
                         f"{' ...' if len(unknown) > 5 else ''}: the weights come from another architecture")


def checkpoint_weight_names(model_folder: str) -> set[str] | None:
    """The parameter names stored in the folder's safetensors files (headers only); None without them."""
    index = os.path.join(model_folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as file:
            return set(json.load(file)["weight_map"])
    single = os.path.join(model_folder, "model.safetensors")
    if os.path.isfile(single):
        from safetensors import safe_open

        with safe_open(single, framework="pt") as file:
            return set(file.keys())
    return None
