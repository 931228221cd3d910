"""Build `builtin:arith-gpt-init`: builtin:arith-gpt's architecture and tokenizer, untrained.

    python -m rlgraph.models.build_arith_init --out DIR

A freshly initialised LlamaForCausalLM (seed 0) with the character tokenizer of `char_tokenizer`: the
random-init model a training pipeline starts from when it has no pretrained one. From it, every sample of
GRPO scores 0 on builtin:arith (all advantages 0: nothing to learn from); supervised fine-tuning on
demonstrations first (specs/sft_arith.rl) gives RL a start. The shipped bytes are what it produced on the
project's CPU machine (torch 2.13.0); another torch may initialise differently.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

from rlgraph.models.build_arith_gpt import Architecture
from rlgraph.models.recipe import build_main, deterministic, save_build, tiny_llama

MODEL_NAME = "builtin:arith-gpt-init"
MODEL_VERSION = 1  # in rlgraph_build.json: bump it whenever the recipe below changes
SEED = 0


def build_arith_init(out: str | Path, log: Callable[[str], None] | None = None) -> dict:
    """Initialise and save the model into `out` (made if missing); returns what rlgraph_build.json holds."""
    import dataclasses

    import torch

    from rlgraph.models.char_tokenizer import build_char_tokenizer
    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks import arith

    log = log or logging.getLogger(__name__).info
    arch = Architecture()
    with deterministic(SEED, 1):
        tokenizer = build_char_tokenizer()
        model = tiny_llama(arch, tokenizer).eval()
        val_rows = arith.make_rows("val")
        val_accuracy = greedy_accuracy(model, tokenizer, val_rows, max_new_tokens=4)
    report = {
        "name": MODEL_NAME,
        "version": MODEL_VERSION,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "steps": 0,
        "val_accuracy": val_accuracy,
        "val_rows": len(val_rows),
        "architecture": dataclasses.asdict(arch),
        "seed": SEED,
        "torch": torch.__version__,
    }
    save_build(out, model, tokenizer, report)
    log(f"{MODEL_NAME}: untrained, greedy accuracy {val_accuracy:.3f} on the {len(val_rows)} val prompts")
    return report


def main(argv: list[str] | None = None) -> int:
    return build_main("rlgraph.models.build_arith_init", __doc__, build_arith_init, argv)


if __name__ == "__main__":
    sys.exit(main())
