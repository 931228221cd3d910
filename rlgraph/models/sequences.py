"""Token sequences as tensors, shared by the workers and the built-in models' build scripts: left
padding (as generation needs), rotary positions that skip it, and a sequence classifier's score read
at the last real token.

They live in the models layer, below the workers, because the build scripts use them too and models
never import workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids, mask), both (batch, longest), padded on the left."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq) :] = 1
    return ids, mask


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Rotary positions that ignore left padding: the first real token is position 0."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def last_token_scores(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
    """The score head on the hidden state of each row's last valid token; (batch,) float32, with grad."""
    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False).last_hidden_state  # (batch, T, hidden)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)  # index of the last 1 in each row
    pooled = hidden[torch.arange(len(hidden), device=hidden.device), last]  # (batch, hidden)
    return model.score(pooled).squeeze(-1).float()
