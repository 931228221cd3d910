"""The reward model worker: a sequence classifier that scores prompt + response on its last token.

Like verl's `compute_rm_score`: the model (any `AutoModelForSequenceClassification` with
`num_labels = 1`, e.g. LlamaForSequenceClassification) reads the whole sequence the rollout holds,
the score head is applied to the hidden state of the last valid token (the last 1 of the attention
mask, inserted tokens included), and that score is placed on the rollout's `reward_index` column (the
last model token) of a (batch, R) tensor, the shape rule rewards produce (`token_level_scores`).

The reward model reads the rollout's token ids as they are, so it must use the policy's tokenizer
(verl re-tokenizes when they differ; this runtime does not yet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlgraph.models.sequences import last_token_scores
from rlgraph.contract.settings import ForwardSettings, RewardModelSettings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.optim import micro_batches
from rlgraph.workers.loading import as_dtype, default_device


class RewardModelWorker:
    """`score(rollout)` -> (batch, R) float32 with the model's score on each row's `reward_index` column."""

    def __init__(self, model_path: str, settings: RewardModelSettings, *, seed: int,
                 device: str | torch.device | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        from rlgraph.models import resolve_model_path

        del seed  # scoring draws no random numbers
        self.device = default_device(device)
        path = resolve_model_path(model_path)
        self.module = AutoModelForSequenceClassification.from_pretrained(path, dtype=as_dtype(settings.dtype)).to(self.device)
        if getattr(self.module.config, "num_labels", 1) != 1:
            raise ValueError(f"the reward model at {path} has num_labels = {self.module.config.num_labels}; "
                             "a reward model gives one score per sequence (num_labels = 1)")
        self.module.eval()
        self.module.requires_grad_(False)

    @torch.no_grad()
    def score(self, rollout: Rollout, *, settings: ForwardSettings) -> torch.Tensor:
        scores = []
        for rows in micro_batches(len(rollout), settings.micro_batch):
            part = rollout.select(rows).to(self.device)
            scores.append(last_token_scores(self.module, part.input_ids, part.attention_mask, part.position_ids).cpu())
        sequence_scores = torch.cat(scores)  # (batch,)
        token_level = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
        token_level[torch.arange(len(rollout)), rollout.reward_index.cpu()] = sequence_scores
        return token_level

    def save(self, directory: str | Path) -> None:
        self.module.save_pretrained(directory)
