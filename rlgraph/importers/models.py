"""The shapes of the models verl's example launches name, for the memory estimate of a spec whose weights
are not on this machine (a Hugging Face hub id such as `Qwen/Qwen2-7B-Instruct`).

Numbers from each model's published config.json (num_hidden_layers, hidden_size, num_attention_heads,
num_key_value_heads, vocab_size, intermediate_size) and its parameter count. Looked up by the last part of the path, without
the -Instruct/-Chat suffix, lower case: `/models/Qwen2.5-3B-Instruct` is `qwen2.5-3b`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    params: str  # as the spec writes a count: "7.6B"
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    intermediate: int  # the MLP's inner size: with tied embeddings it does not follow from params
    note: str = ""
    head_dim: int | None = None  # config.json's head_dim where it is not hidden / heads (Qwen3)
    experts: int | None = None  # a mixture of experts: routed experts per layer,
    experts_per_token: int | None = None  # how many a token is routed to,
    expert_intermediate: int | None = None  # and each expert's MLP inner size (moe_intermediate_size)


_QWEN2_7B = Shape("7.6B", 28, 3584, 28, 4, 152064, 18944)
_QWEN2_05B = Shape("494M", 24, 896, 14, 2, 151936, 4864)
_QWEN2_15B = Shape("1.5B", 28, 1536, 12, 2, 151936, 8960)
_LLAMA3_8B = Shape("8.0B", 32, 4096, 32, 8, 128256, 14336)
_DEEPSEEK_7B = Shape("6.9B", 30, 4096, 32, 32, 102400, 11008)

SHAPES: dict[str, Shape] = {
    "qwen2-0.5b": _QWEN2_05B,
    "qwen2.5-0.5b": _QWEN2_05B,
    "qwen2-1.5b": _QWEN2_15B,
    "qwen2.5-1.5b": _QWEN2_15B,
    "qwen2.5-3b": Shape("3.1B", 36, 2048, 16, 2, 151936, 11008),
    "qwen2-7b": _QWEN2_7B,
    "qwen2.5-7b": _QWEN2_7B,
    "qwen2.5-math-7b": _QWEN2_7B,
    "qwen2.5-14b": Shape("14.7B", 48, 5120, 40, 8, 152064, 13824),
    "qwen2.5-32b": Shape("32.8B", 64, 5120, 40, 8, 152064, 27648),
    "qwen2-72b": Shape("72.7B", 80, 8192, 64, 8, 152064, 29568),
    "qwen2.5-72b": Shape("72.7B", 80, 8192, 64, 8, 152064, 29568),
    "qwen3-4b": Shape("4.0B", 36, 2560, 32, 8, 151936, 9728, head_dim=128),
    "qwen3-8b": Shape("8.2B", 36, 4096, 32, 8, 151936, 12288, head_dim=128),
    "qwen3-30b-a3b": Shape("30.5B", 48, 2048, 32, 4, 151936, 6144, head_dim=128, experts=128, experts_per_token=8,
                           expert_intermediate=768),
    "qwen2.5-vl-7b": Shape("8.3B", 28, 3584, 28, 4, 152064, 18944,
                           "the language model's shape; the vision tower's 0.7B parameters are in params only"),
    "meta-llama-3-8b": _LLAMA3_8B,
    "llama-3-8b": _LLAMA3_8B,
    "llama-3.1-8b": _LLAMA3_8B,
    "meta-llama-3.1-8b": _LLAMA3_8B,
    "fsfairx-llama3-rm-v0.1": _LLAMA3_8B,
    "deepseek-llm-7b": _DEEPSEEK_7B,
    "deepseek-math-7b": _DEEPSEEK_7B,
}


def shape_of(path: str) -> Shape | None:
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    return SHAPES.get(re.sub(r"-(instruct|chat|base|it|rl)$", "", name))


def local_config(path: str) -> str | None:
    """The config.json of a model folder on this machine (`~` expanded), which the memory estimate reads itself."""
    config = os.path.join(os.path.expanduser(path), "config.json")
    return config if path.startswith(("/", "~", ".")) and os.path.isfile(config) else None
