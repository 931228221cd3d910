"""Rollout with Hugging Face `generate`: repeat each prompt n times, sample, build the response mask."""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import torch

from rlgraph.workers.batch import Rollout

Seed = int | torch.Generator | None


class HFRollout:
    """Generates with `module.generate` (KV cache on) and packs the samples as a `Rollout`.

    It holds a reference to `module`, not a copy: colocated with the actor it samples from the actor's
    current weights, so the weight sync is free.
    """

    def __init__(
        self, module: torch.nn.Module, tokenizer: Any, *, eos_token_id: int | list[int] | None = None
    ) -> None:
        self.module = module
        self.tokenizer = tokenizer
        self.synced = False  # set on a sharded (FSDP) module: every rank steps until all ranks are done
        self.eos_token_ids = _eos_ids(module, tokenizer) if eos_token_id is None else _as_list(eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else None)
        if self.pad_token_id is None or not self.eos_token_ids:
            raise ValueError("the tokenizer needs an eos token (and a pad token, or eos is used as pad)")

    @torch.no_grad()
    def generate(
        self,
        items: Sequence[dict],
        n: int = 1,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int,
        do_sample: bool = True,
        seed: Seed = None,
        uid_offset: int = 0,
        with_log_probs: bool = False,
    ) -> Rollout:
        """Sample `n` responses per item; rows of one item are adjacent, `uid` = uid_offset + item index.

        `with_log_probs` keeps log pi(token) of each sampled token as the Rollout's `sample_log_probs`,
        from the raw logits of generation divided by the temperature: what `PolicyWorker.log_prob` would
        recompute from the same weights (to float32 rounding: KV-cached steps vs one full pass), before
        any top-k / top-p truncation, as verl and TRL define the old log-probs.
        """
        from transformers import GenerationConfig

        if n < 1 or max_new_tokens < 1:
            raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got n={n}, max_new_tokens={max_new_tokens}")
        device = next(self.module.parameters()).device
        prompts, prompt_mask = left_pad([item["input_ids"] for item in items], self.pad_token_id)
        # --- repeat each prompt n times, interleaved: p0 p0 p0 p1 p1 p1 ...
        prompts = prompts.repeat_interleave(n, dim=0).to(device)  # (batch, P)
        prompt_mask = prompt_mask.repeat_interleave(n, dim=0).to(device)  # (batch, P)

        greedy = not do_sample or temperature == 0
        sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        config = GenerationConfig(
            do_sample=not greedy,
            max_new_tokens=max_new_tokens,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_ids,
            use_cache=True,
            return_dict_in_generate=with_log_probs,
            output_logits=with_log_probs,
            **sampling,
        )
        # HF fills every setting left unset from the model's own generation_config (a shipped
        # repetition_penalty, say); a blank one there keeps the samples exactly on-policy.
        was_training, model_defaults = self.module.training, getattr(self.module, "generation_config", None)
        self.module.eval()
        if model_defaults is not None:
            self.module.generation_config = GenerationConfig()
        try:
            with _seeded(seed, device):
                extra = {"synced_gpus": True} if self.synced else {}
                output = self.module.generate(input_ids=prompts, attention_mask=prompt_mask, generation_config=config,
                                              **extra)
        finally:
            self.module.train(was_training)
            if model_defaults is not None:
                self.module.generation_config = model_defaults

        logits = None
        if with_log_probs:
            output, logits = output.sequences, output.logits  # logits: one (batch, vocab) per generated step
        # --- responses: exactly max_new_tokens columns, pad after EOS
        responses = output[:, prompts.shape[1] :]
        responses = responses[:, :max_new_tokens]
        if responses.shape[1] < max_new_tokens:
            fill = responses.new_full((responses.shape[0], max_new_tokens - responses.shape[1]), self.pad_token_id)
            responses = torch.cat([responses, fill], dim=1)  # (batch, R)
        response_mask = mask_after_eos(responses, self.eos_token_ids)  # (batch, R)
        responses = responses.masked_fill(response_mask == 0, self.pad_token_id)

        sample_log_probs = None
        if logits is not None:
            steps = torch.stack(logits[:max_new_tokens], dim=1).float()  # (batch, generated, vocab)
            if not greedy and temperature != 1.0:
                steps = steps / temperature
            taken = responses[:, : steps.shape[1]].to(steps.device)
            picked = torch.log_softmax(steps, dim=-1).gather(-1, taken.unsqueeze(-1)).squeeze(-1)  # (batch, generated)
            sample_log_probs = torch.zeros(responses.shape, dtype=torch.float32)  # (batch, R)
            sample_log_probs[:, : picked.shape[1]] = picked.cpu()
            sample_log_probs *= response_mask.cpu()

        lengths = response_mask.sum(dim=1).tolist()
        response_text = self.tokenizer.batch_decode(
            [row[:length] for row, length in zip(responses.tolist(), lengths)], skip_special_tokens=True
        )

        def per_row(key: str, default: Any = None) -> list:
            return [item.get(key, default) for item in items for _ in range(n)]

        prompt_text = [
            item.get("prompt_text") or self.tokenizer.decode(item["input_ids"], skip_special_tokens=True)
            for item in items
            for _ in range(n)
        ]
        rollout = Rollout.build(
            prompts,
            prompt_mask,
            responses,
            response_mask,
            self.pad_token_id,
            uid=[uid_offset + i for i in range(len(items)) for _ in range(n)],
            data_source=per_row("data_source", ""),
            ground_truth=per_row("ground_truth"),
            extra_info=per_row("extra_info"),
            prompt_text=prompt_text,
            response_text=response_text,
        )
        rollout.sample_log_probs = sample_log_probs
        return rollout


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


def mask_after_eos(responses: torch.Tensor, eos_token_id: int | list[int]) -> torch.Tensor:
    """1 up to and including the first EOS, 0 after; all 1 for a row without EOS."""
    is_eos = torch.isin(responses, torch.as_tensor(_as_list(eos_token_id), device=responses.device))  # (batch, R)
    eos_before = is_eos.long().cumsum(dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (eos_before == 0).long()


def _as_list(ids: int | list[int] | None) -> list[int]:
    if ids is None:
        return []
    return [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]


def _eos_ids(module: torch.nn.Module, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS, then any other stop tokens the model ships (chat models end turns with one)."""
    ids = _as_list(tokenizer.eos_token_id)
    shipped = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
    return ids + [i for i in _as_list(shipped) if i not in ids]


@contextlib.contextmanager
def _seeded(seed: Seed, device: torch.device):
    """Sample from a private RNG stream when a seed is given, leaving the global one untouched."""
    if seed is None:
        yield
        return
    if isinstance(seed, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=seed))
    on_cpu = device.type == "cpu"
    with torch.random.fork_rng(devices=[] if on_cpu else [device], device_type="cuda" if on_cpu else device.type):
        torch.manual_seed(seed)
        yield
