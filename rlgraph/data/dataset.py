"""Prompts as token ids: the torch Dataset the rollout draws from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset

Prompt = str | list[dict[str, str]]


def encode_prompt(tokenizer: Any, prompt: Prompt, tools: Sequence[dict[str, Any]] = ()) -> tuple[list[int], str]:
    """(input_ids, the text they encode) for one prompt.

    With a chat template (`tokenizer.chat_template` set) the prompt is rendered as a conversation
    (a plain string becomes one user message) ending in the assistant's turn, with `tools` (OpenAI function
    schemas: an environment's, docs/environments.md) rendered where the template puts them. Without one, the
    text is the string itself (a message list: its contents joined by newlines) and the ids are exactly
    `tokenizer(text)["input_ids"]`, so whatever the tokenizer adds by itself (a BOS, say) is kept.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        # tools=None, not [], when there are none: some templates write an empty tools section for a list
        options = {"add_generation_prompt": True, "tools": list(tools) or None}
        text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
        ids = tokenizer.apply_chat_template(messages, tokenize=True, **options)
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding by default
            ids = ids["input_ids"]
        return list(ids), text
    text = prompt_as_text(prompt)
    return list(tokenizer(text)["input_ids"]), text


def prompt_as_text(prompt: Prompt) -> str:
    """The prompt as plain text, for a tokenizer without a chat template."""
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


class RLDataset(Dataset):
    """Prompts of checked rows (see `load_rows`), tokenized once, overlong ones left out.

    An item is a dict: `input_ids` (list[int], unpadded), `prompt_text` (the text encoded),
    `data_source`, `ground_truth`, `extra_info`, and `index`, the row's 0-based position in `rows`,
    which stays the row's name when rows before it were filtered out.

    `num_filtered` counts the prompts longer than `max_prompt_length` tokens (the caller logs it);
    `max_prompt_length=None` keeps every prompt.

    Demonstrations (SFT rows, `demonstrations=True`): an item also holds `response_ids`, the response's tokens
    followed by the tokenizer's EOS (as verl's SFT data set appends it: the model learns to stop), its
    `response_text`, and `pad_token_id`, what `demonstration_rollout` pads a batch with. Rows whose response is
    longer than `max_response_length` tokens are left out and counted in `num_filtered` too.
    """

    def __init__(self, rows: Sequence[dict[str, Any]], tokenizer: Any, max_prompt_length: int | None = None,
                 tools: Sequence[dict[str, Any]] = (), demonstrations: bool = False,
                 max_response_length: int | None = None) -> None:
        """`tools`: the tool schemas the chat template renders into every prompt (see `encode_prompt`)."""
        self.items: list[dict[str, Any]] = []
        self.num_filtered = 0
        encoded = _encode_all(tokenizer, [row["prompt"] for row in rows], tools)
        responses = _encode_responses(tokenizer, [row["response"] for row in rows]) if demonstrations else None
        for index, (row, (ids, text)) in enumerate(zip(rows, encoded)):
            response_ids = responses[index] if responses is not None else None
            if (max_prompt_length is not None and len(ids) > max_prompt_length) or (
                    response_ids is not None and max_response_length is not None
                    and len(response_ids) > max_response_length):
                self.num_filtered += 1
                continue
            item = {
                "input_ids": ids,
                "prompt_text": text,
                "data_source": row.get("data_source") or "unknown",
                "ground_truth": (row.get("reward_model") or {}).get("ground_truth"),
                "extra_info": row.get("extra_info") or {},
                "index": index,
            }
            if response_ids is not None:
                item |= {"response_ids": response_ids, "response_text": row["response"],
                         "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                         else tokenizer.eos_token_id}
            self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def _encode_responses(tokenizer: Any, responses: list[str]) -> list[list[int]]:
    """Each response's tokens (no BOS or other added tokens: it continues the prompt) and then EOS."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token, which ends each demonstration's response: set "
                         "`eos_token` in the model folder's tokenizer_config.json")
    ids = tokenizer(responses, add_special_tokens=False)["input_ids"] if responses else []
    return [list(r) + [tokenizer.eos_token_id] for r in ids]


def _encode_all(tokenizer: Any, prompts: list[Prompt], tools: Sequence[dict[str, Any]]) -> list[tuple[list[int], str]]:
    if getattr(tokenizer, "chat_template", None) or not prompts:
        return [encode_prompt(tokenizer, p, tools) for p in prompts]
    # One batched call is the same as one call per text, and much faster for a fast tokenizer.
    texts = [prompt_as_text(p) for p in prompts]
    return [(list(ids), text) for ids, text in zip(tokenizer(texts)["input_ids"], texts)]
