"""Build `builtin:arith-gpt-teacher`: builtin:arith-gpt's recipe, trained on until it adds well.

    python -m rlgraph.models.build_arith_teacher --out DIR

The same architecture, tokenizer, data and seed as builtin:arith-gpt (rlgraph/models/build_arith_gpt.py); only
the stopping band differs: the first greedy check at or above 0.85 on the val subset. It is the teacher of the
on-policy distillation example (specs/distill_arith.rl): a stronger model of the same vocabulary whose per-token
log-probabilities the student learns from. The shipped bytes are what it produced on the project's 2-core CPU
machine (torch 2.13.0); another CPU may stop at another check and give other bytes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from rlgraph.models.build_arith_gpt import Recipe, build_arith_gpt
from rlgraph.models.recipe import build_main

MODEL_NAME = "builtin:arith-gpt-teacher"
MODEL_VERSION = 1  # in rlgraph_build.json: bump it whenever the recipe below changes

TEACHER = dataclasses.replace(Recipe(), max_steps=6000, target_low=0.85, target_high=1.0, accept_low=0.80,
                              accept_high=1.0)


def build_arith_teacher(out: str | Path, log: Callable[[str], None] | None = None) -> dict:
    return build_arith_gpt(out, TEACHER, log=log, name=MODEL_NAME, version=MODEL_VERSION)


def main(argv: list[str] | None = None) -> int:
    return build_main("rlgraph.models.build_arith_teacher", __doc__, build_arith_teacher, argv)


if __name__ == "__main__":
    sys.exit(main())
