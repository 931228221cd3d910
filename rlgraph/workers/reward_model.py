"""The reward model worker: a sequence classifier that scores prompt + response on its last token.

Like verl's `compute_rm_score`: the model (any `AutoModelForSequenceClassification` with
`num_labels = 1`, e.g. LlamaForSequenceClassification) reads the whole sequence the rollout holds,
the score head is applied to the hidden state of the last valid token (the last 1 of the attention
mask), and that score is placed on the last response token of a (batch, R) tensor, the shape rule
rewards produce (`token_level_scores`).

The reward model reads the rollout's token ids as they are, so it must use the policy's tokenizer
(verl re-tokenizes when they differ; this runtime does not yet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlgraph.workers.batch import Rollout
from rlgraph.workers.optim import micro_batches
from rlgraph.workers.policy import as_dtype, default_device


def last_token_scores(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
    """The score head on the hidden state of each row's last valid token; (batch,) float32, with grad."""
    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False).last_hidden_state  # (batch, T, hidden)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)  # index of the last 1 in each row
    pooled = hidden[torch.arange(len(hidden), device=hidden.device), last]  # (batch, hidden)
    return model.score(pooled).squeeze(-1).float()


class RewardModelWorker:
    """`score(rollout)` -> (batch, R) float32 with the model's score on the last response token."""

    def __init__(self, model_path: str, *, seed: int = 0, dtype: torch.dtype | str = torch.float32,
                 device: str | torch.device | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        from rlgraph.models import resolve_model_path

        del seed  # scoring draws no random numbers
        self.device = default_device(device)
        path = resolve_model_path(model_path)
        self.module = AutoModelForSequenceClassification.from_pretrained(path, dtype=as_dtype(dtype)).to(self.device)
        if getattr(self.module.config, "num_labels", 1) != 1:
            raise ValueError(f"the reward model at {path} has num_labels = {self.module.config.num_labels}; "
                             "a reward model gives one score per sequence (num_labels = 1)")
        self.module.eval()
        self.module.requires_grad_(False)

    @torch.no_grad()
    def score(self, rollout: Rollout, micro_batch_size: int | None = None) -> torch.Tensor:
        scores = []
        for rows in micro_batches(len(rollout), micro_batch_size):
            part = rollout.select(rows).to(self.device)
            scores.append(last_token_scores(self.module, part.input_ids, part.attention_mask, part.position_ids).cpu())
        sequence_scores = torch.cat(scores)  # (batch,)
        token_level = torch.zeros(rollout.response_mask.shape, dtype=torch.float32)  # (batch, R)
        last = (rollout.response_mask.sum(dim=1).cpu() - 1).clamp(min=0)
        token_level[torch.arange(len(rollout)), last] = sequence_scores
        return token_level

    def save(self, directory: str | Path) -> None:
        self.module.save_pretrained(directory)
