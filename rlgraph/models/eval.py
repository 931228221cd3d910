"""Greedy evaluation: what the policy answers without sampling, scored by the task's reward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

RewardFn = Callable[..., float]


def greedy_completions(
    model: Any, tokenizer: Any, prompts: Sequence[list[int]], max_new_tokens: int = 4, batch_size: int = 512
) -> list[str]:
    """The greedy completion of each prompt (token ids), decoded without special tokens, cut at EOS.

    Prompts are left-padded per batch; the position ids are counted from the attention mask, so a
    rotary model sees the same positions as for the prompt alone.
    """
    import torch

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos_id = tokenizer.eos_token_id
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    texts: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            width = max(len(p) for p in chunk)
            input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in chunk], device=device)
            attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=device)
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (batch, prompt_len)
            with torch.no_grad():
                output = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad_id,
                    eos_token_id=eos_id,
                )
            for row in output[:, width:].tolist():  # (batch, <= max_new_tokens)
                if eos_id is not None and eos_id in row:
                    row = row[: row.index(eos_id)]
                texts.append(tokenizer.decode(row, skip_special_tokens=True))
    finally:
        model.train(was_training)
    return texts


def greedy_accuracy(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    max_new_tokens: int = 4,
    batch_size: int = 512,
    reward_fn: RewardFn | None = None,
) -> float:
    """Mean reward of the greedy completions of `rows` (1.0 = every answer right).

    `rows` are rows in verl's schema (as `load_rows` returns them) or RLDataset items; `reward_fn`
    has verl's compute_score shape and defaults to the arith task's exact match.
    """
    from rlgraph.data.dataset import encode_prompt

    if not rows:
        raise ValueError("greedy_accuracy needs at least one row")
    if reward_fn is None:
        from rlgraph.tasks.arith import exact_match as reward_fn
    prompts = [row["input_ids"] if "input_ids" in row else encode_prompt(tokenizer, row["prompt"])[0] for row in rows]
    completions = greedy_completions(model, tokenizer, prompts, max_new_tokens, batch_size)
    total = 0.0
    for row, completion in zip(rows, completions):
        ground_truth = row["ground_truth"] if "ground_truth" in row else row["reward_model"]["ground_truth"]
        total += reward_fn(row.get("data_source", ""), completion, ground_truth, row.get("extra_info"))
    return total / len(rows)
