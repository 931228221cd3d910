"""What every built-in model's build script shares: a deterministic training context, the folder it
writes (weights, tokenizer, then rlgraph_build.json last), and its command line."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BUILD_REPORT = "rlgraph_build.json"  # written last: the registry takes a folder holding it as complete


@contextlib.contextmanager
def deterministic(seed: int, num_threads: int) -> Iterator[None]:
    """Seeded, on `num_threads` torch threads; the global RNG state and thread count are restored after.

    One thread also keeps a busy machine from stalling a build: with two threads on two shared cores,
    a step can take ten times longer."""
    import torch

    threads_before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(threads_before)


def tiny_llama(arch: Any, tokenizer: Any) -> Any:
    """A fresh LlamaForCausalLM of `arch` (hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, max_position_embeddings, rope_theta) over `tokenizer`: tied embeddings, one KV head
    per attention head, the tokenizer's pad/BOS/EOS ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_attention_heads,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=arch.rope_theta,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_build(out: str | Path, model: Any, tokenizer: Any, report: dict[str, Any]) -> Path:
    """The model (safetensors) and the character tokenizer into `out`, then the build report."""
    from rlgraph.models.char_tokenizer import save_char_tokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_char_tokenizer(tokenizer, out)
    (out / BUILD_REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return out


def build_main(module: str, doc: str, build: Callable[..., dict], argv: list[str] | None = None) -> int:
    """`python -m MODULE --out DIR`: run `build(DIR, log=print)`."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model into (made if missing)")
    args = parser.parse_args(argv)
    build(args.out, log=print)
    return 0
