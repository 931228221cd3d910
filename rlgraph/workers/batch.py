"""The batch that flows between workers: generated samples, one row per sample.

Rows of one prompt sit next to each other (verl's interleaved repeat), and `uid` names the prompt a row
came from, so group-wise advantages (GRPO, RLOO) can find the groups. A `Rollout` is a plain dataclass of
tensors and lists: it pickles as-is, so it can go through the Ray object store.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch

TENSOR_FIELDS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
LIST_FIELDS = ("uid", "data_source", "ground_truth", "extra_info", "prompt_text", "response_text")


@dataclass
class Rollout:
    """Generated samples. P = prompt columns, R = response columns (= max_new_tokens)."""

    prompts: torch.Tensor  # (batch, P) left-padded with the pad id
    responses: torch.Tensor  # (batch, R) right-padded with the pad id
    input_ids: torch.Tensor  # (batch, P + R) = cat(prompts, responses)
    attention_mask: torch.Tensor  # (batch, P + R) = cat(prompt mask, response_mask)
    position_ids: torch.Tensor  # (batch, P + R) = cumsum(attention_mask) - 1, clamped at 0
    response_mask: torch.Tensor  # (batch, R) 1 up to and including EOS, 0 after
    uid: list[int]  # group id of each row: the prompt's index in the generate call (+ uid_offset)
    data_source: list[str]
    ground_truth: list[Any]
    extra_info: list[Any]
    prompt_text: list[str]
    response_text: list[str]  # decoded without special tokens, cut at EOS
    pad_token_id: int = 0  # fills the padded columns; kept so `concat` can re-pad
    # (batch, R) float32 log-probs of the sampled tokens under the weights that sampled them (T applied),
    # 0 after EOS; kept by `generate(with_log_probs=True)` so the step need not recompute them
    sample_log_probs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        batch = self.prompts.shape[0]
        for name in TENSOR_FIELDS + LIST_FIELDS:
            if len(getattr(self, name)) != batch:
                raise ValueError(f"Rollout.{name} has {len(getattr(self, name))} rows, prompts has {batch}")

    @property
    def prompt_length(self) -> int:
        return self.prompts.shape[1]

    @property
    def response_length(self) -> int:
        return self.responses.shape[1]

    def __len__(self) -> int:
        return self.prompts.shape[0]

    def select(self, indices: Sequence[int] | torch.Tensor) -> Rollout:
        """The rows at `indices`, in that order."""
        index = torch.as_tensor(indices, dtype=torch.long)
        rows = index.tolist()
        fields = {name: getattr(self, name)[index.to(getattr(self, name).device)] for name in TENSOR_FIELDS}
        fields.update({name: [getattr(self, name)[i] for i in rows] for name in LIST_FIELDS})
        log_probs = None if self.sample_log_probs is None else self.sample_log_probs[index]
        return Rollout(**fields, pad_token_id=self.pad_token_id, sample_log_probs=log_probs)

    def split(self, k: int) -> list[Rollout]:
        """`k` equal contiguous chunks (one per data-parallel rank)."""
        if k <= 0 or len(self) % k:
            raise ValueError(f"cannot split a rollout of {len(self)} rows into {k} equal chunks")
        size = len(self) // k
        return [self.select(range(i * size, (i + 1) * size)) for i in range(k)]

    @classmethod
    def concat(cls, parts: Sequence[Rollout]) -> Rollout:
        """Rows of `parts` one after the other; prompts and responses are re-padded to the widest part."""
        if not parts:
            raise ValueError("Rollout.concat needs at least one rollout")
        if len(parts) == 1:
            return parts[0]
        pad_id = parts[0].pad_token_id
        prompt_len = max(p.prompt_length for p in parts)
        response_len = max(p.response_length for p in parts)
        prompts, responses, response_masks = [], [], []
        for part in parts:
            prompts.append(_pad_columns(part.prompts, prompt_len, pad_id, left=True))
            responses.append(_pad_columns(part.responses, response_len, pad_id, left=False))
            response_masks.append(_pad_columns(part.response_mask, response_len, 0, left=False))
        prompt_mask = torch.cat(
            [_pad_columns(p.attention_mask[:, : p.prompt_length], prompt_len, 0, left=True) for p in parts]
        )
        lists = {name: [x for p in parts for x in getattr(p, name)] for name in LIST_FIELDS}
        joined = cls.build(
            torch.cat(prompts), prompt_mask, torch.cat(responses), torch.cat(response_masks), pad_id, **lists
        )
        if all(p.sample_log_probs is not None for p in parts):
            joined.sample_log_probs = torch.cat([_pad_columns(p.sample_log_probs, response_len, 0, left=False)
                                                 for p in parts])
        return joined

    @classmethod
    def build(
        cls,
        prompts: torch.Tensor,
        prompt_mask: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        pad_token_id: int,
        **lists: list,
    ) -> Rollout:
        """Derive input_ids, attention_mask and position_ids from the prompt and response halves."""
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
        return cls(
            prompts=prompts,
            responses=responses,
            input_ids=torch.cat([prompts, responses], dim=1),
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            response_mask=response_mask.long(),
            pad_token_id=pad_token_id,
            **lists,
        )

    def __reduce__(self) -> tuple:
        # Pickled (for Ray), a rollout is its two halves: the joined input_ids, attention_mask and
        # position_ids are rebuilt on arrival and the masks travel as bools. A batch of a few hundred short
        # rows then stays under Ray's 100 KiB limit for inline objects, so it goes to the next worker inside
        # the task instead of through the shared-memory object store (about 2.4 ms less per call here).
        prompt_mask = self.attention_mask[:, : self.prompt_length].bool()
        lists = {name: getattr(self, name) for name in LIST_FIELDS}
        return (_unpickle, (self.prompts, prompt_mask, self.responses, self.response_mask.bool(), self.pad_token_id,
                            lists, self.sample_log_probs))

    def to(self, device: torch.device | str) -> Rollout:
        moved = {name: getattr(self, name).to(device) for name in TENSOR_FIELDS}
        return dataclasses.replace(self, **moved)  # sample_log_probs stay on the CPU: only the driver reads them

    def to_dict(self) -> dict[str, Any]:
        """Tensors and plain python only (safe for `torch.load(weights_only=True)`)."""
        data = {name: getattr(self, name) for name in TENSOR_FIELDS + LIST_FIELDS}
        return data | {"pad_token_id": self.pad_token_id, "sample_log_probs": self.sample_log_probs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollout:
        names = TENSOR_FIELDS + LIST_FIELDS + ("pad_token_id",)
        return cls(**{name: data[name] for name in names}, sample_log_probs=data.get("sample_log_probs"))


def _unpickle(prompts, prompt_mask, responses, response_mask, pad_token_id, lists, sample_log_probs) -> Rollout:
    rollout = Rollout.build(prompts, prompt_mask, responses, response_mask, pad_token_id, **lists)
    rollout.sample_log_probs = sample_log_probs
    return rollout


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Rotary positions that ignore left padding: the first real token is position 0."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _pad_columns(x: torch.Tensor, width: int, value: int, *, left: bool) -> torch.Tensor:
    missing = width - x.shape[1]
    if missing == 0:
        return x
    pad = x.new_full((x.shape[0], missing), value)
    return torch.cat([pad, x] if left else [x, pad], dim=1)
