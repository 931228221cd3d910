"""The reward model worker: a sequence classifier that scores prompt + response on its last token.

Like verl's `compute_rm_score`: the model (any `AutoModelForSequenceClassification` with
`num_labels = 1`, e.g. LlamaForSequenceClassification) reads the whole sequence the rollout holds,
the score head is applied to the hidden state of the last valid token (the last 1 of the attention
mask, inserted tokens included), and that score is placed on the rollout's `reward_index` column (the
last model token) of a (batch, R) tensor, the shape rule rewards produce (`token_level_scores`).

The reward model reads the rollout's token ids as they are, so it must use the policy's tokenizer,
unless `retokenize` is set: then, as verl does for a reward model of another family, it decodes nothing
itself but scores the rollout's prompt and response text (decoded at sampling) tokenized with its own
tokenizer, through its chat template when it has one. `rlgraph check` compares the two tokenizers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlgraph.models.sequences import last_token_scores, left_pad, position_ids_from_mask
from rlgraph.contract.settings import ForwardSettings, RewardModelSettings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.micro import forward_pass, split_rows
from rlgraph.workers.packing import PackedRows, check_packed_attention, packed_model_inputs
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
        self.retokenize = settings.retokenize
        self.remove_padding = settings.remove_padding
        if self.remove_padding:  # refuse a model whose attention would mix packed rows (workers/packing.py)
            check_packed_attention(self.module.model, "last_hidden_state", self.device)
        self.tokenizer = None
        if self.retokenize:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(path)

    @torch.no_grad()
    def score(self, rollout: Rollout, *, settings: ForwardSettings) -> torch.Tensor:
        sequence_scores = torch.zeros(len(rollout))  # (batch,)
        cut = bool(settings.micro_batch_tokens)
        for rows in split_rows(rollout, torch.arange(len(rollout)), settings.micro_batch, settings.micro_batch_tokens,
                               packed=self.remove_padding):
            part, _ = forward_pass(rollout, rows, cut=cut)  # the score is read on the last token: no map back
            if self.retokenize:
                ids, mask = self._own_tokens(part)
            else:
                self._check_ids(part.input_ids)
                ids, mask = part.input_ids, part.attention_mask
            ids, mask = ids.to(self.device), mask.to(self.device)
            if self.remove_padding:  # workers/packing.py: rows end to end, the head on each row's last token
                packed = PackedRows(mask)
                hidden = self.module.model(**packed_model_inputs(packed, ids)).last_hidden_state
                scores = self.module.score(hidden.flatten(0, 1)[packed.last_tokens()]).squeeze(-1).float()
            else:
                scores = last_token_scores(self.module, ids, mask, position_ids_from_mask(mask))
            sequence_scores[rows] = scores.cpu()
        if rollout.episodes is not None:  # a sample whose environment failed gets no reward (and no loss)
            sequence_scores[torch.tensor([e.failed for e in rollout.episodes], dtype=torch.bool)] = 0.0
        token_level = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
        token_level[torch.arange(len(rollout)), rollout.reward_index.cpu()] = sequence_scores
        return token_level

    def _own_tokens(self, part: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt + response text of each row in this model's tokens, left-padded. (rows, T) ids and mask"""
        tokenizer = self.tokenizer
        sequences = []
        for prompt, response in zip(part.prompt_text, part.response_text):
            if getattr(tokenizer, "chat_template", None):
                chat = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
                text = tokenizer.apply_chat_template(chat, tokenize=False)
                sequences.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            else:
                sequences.append(tokenizer(prompt + response)["input_ids"])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        return left_pad(sequences, pad)

    def _check_ids(self, input_ids: torch.Tensor) -> None:
        """A token id past this model's embeddings is a device-side assert on a GPU: say what it means."""
        size = self.module.get_input_embeddings().num_embeddings
        if input_ids.numel() and int(input_ids.max()) >= size:
            raise ValueError(f"the rollout holds token id {int(input_ids.max())} but the reward model's vocabulary "
                             f"has {size} entries: it was trained with another tokenizer than the policy's. Set "
                             "`retokenize = true` on the reward model role to score the text with its own tokenizer")

    def save(self, directory: str | Path) -> None:
        self.module.save_pretrained(directory)
