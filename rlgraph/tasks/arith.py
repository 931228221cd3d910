"""The built-in task `builtin:arith`: two-digit addition with a verifiable reward.

A prompt is the text ``f"{a}+{b}="`` for a, b in 0..99; the correct completion is ``str(a + b)``
followed by the tokenizer's EOS. The 10,000 pairs are split once, by a seeded permutation, into a
validation split of 500 pairs and a training split of the other 9,500, so the two never overlap and
every machine makes the same split.

Two more splits are demonstrations for supervised fine-tuning (`demos -> actor.sft`), rows with the right
answer as their `response` (verl's SFT schema) beside the same ground truth: `sft`, the first 500 pairs of the
training split (a few hundred demonstrations, as a user has before RL), and `sft_val`, the validation pairs.

Rows follow verl's dataset schema (see /work/shared/REFERENCE.md); the builtin uses a plain-string
prompt, since the built-in model has no chat template.
"""

from __future__ import annotations

import random
from typing import Any

DATA_SOURCE = "rlgraph/arith"
SPLITS = ("train", "val", "sft", "sft_val")
DEMONSTRATION_SPLITS = {"sft": "train", "sft_val": "val"}  # split -> the split whose pairs it answers
NUM_VAL = 500
NUM_SFT = 500  # demonstrations in `sft`: enough for a start, far fewer than the 9,500 RL prompts
SPLIT_SEED = 20240611  # changing this changes every split: bump DATA_VERSION with it
DATA_VERSION = 1  # part of the cache file name; bump whenever the rows this module makes change

EOS_TEXT = "</s>"  # the built-in tokenizer's EOS, as text; the reward cuts a solution there


def prompt_text(a: int, b: int) -> str:
    return f"{a}+{b}="


def answer_text(a: int, b: int) -> str:
    return str(a + b)


def split_pairs(split: str) -> list[tuple[int, int]]:
    """The (a, b) pairs of one split, in a fixed shuffled order."""
    pairs = seeded_split([(a, b) for a in range(100) for b in range(100)], DEMONSTRATION_SPLITS.get(split, split),
                         SPLIT_SEED, NUM_VAL, "builtin:arith")
    return pairs[:NUM_SFT] if split == "sft" else pairs


def make_rows(split: str) -> list[dict[str, Any]]:
    """The rows of one split in verl's schema, ``extra_info.index`` numbering them from 0; a demonstration
    split's with their answer as `response`."""
    rows = pair_rows(split_pairs(split), split, DATA_SOURCE, prompt_text, answer_text)
    if split in DEMONSTRATION_SPLITS:
        rows = [row | {"response": row["reward_model"]["ground_truth"]} for row in rows]
    return rows


def seeded_split(pairs: list[tuple[int, int]], split: str, seed: int, num_val: int,
                 task: str) -> list[tuple[int, int]]:
    """`split` of `pairs` shuffled by `seed`: the first `num_val` are val, the rest train."""
    if split not in ("train", "val"):
        raise ValueError(f"unknown split {split!r} of {task}; expected train or val")
    pairs = list(pairs)
    # random.Random(int).shuffle is stable across CPython versions and platforms.
    random.Random(seed).shuffle(pairs)
    return pairs[:num_val] if split == "val" else pairs[num_val:]


def pair_rows(pairs: list[tuple[int, int]], split: str, data_source: str, prompt: Any, answer: Any) -> list[dict[str, Any]]:
    """Rows in verl's schema for (a, b) pairs, `prompt(a, b)` and `answer(a, b)` the texts."""
    return [
        {
            "data_source": data_source,
            "prompt": prompt(a, b),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer(a, b)},
            "extra_info": {"split": split, "index": i, "a": a, "b": b},
        }
        for i, (a, b) in enumerate(pairs)
    ]


def exact_match(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the completion, stripped, is exactly the answer; else 0.0 (verl's compute_score shape).

    `solution_str` is the response decoded without special tokens. In case a caller decoded with them,
    the text is cut at the first EOS, so tokens after EOS never count.
    """
    del data_source, extra_info  # one task, one rule
    text = solution_str.split(EOS_TEXT, 1)[0].strip()
    return 1.0 if text == str(ground_truth).strip() else 0.0


def format_ok(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the completion, stripped and cut at EOS, is a plain non-negative integer; else 0.0.

    A shaping reward to pair with `exact_match`: it pays for answering in the right form at all.
    """
    del data_source, ground_truth, extra_info
    text = solution_str.split(EOS_TEXT, 1)[0].strip()
    return 1.0 if text.isascii() and text.isdigit() else 0.0
