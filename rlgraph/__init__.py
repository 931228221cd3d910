"""rlgraph: declarative RL post-training for language models. The Python API (docs/api.md, rlgraph/api.py):

    spec = rlgraph.compile("specs/grpo_arith.rl", overrides={"train.steps": 5})   # or text=..., name=...
    spec.ok, spec.diagnostics, spec.plan()
    result = rlgraph.run(spec, "runs/x", on_step=lambda record: ...)       # return rlgraph.STOP to stop
    model, tokenizer = rlgraph.load("runs/x")

Loaded on first use, so that `import rlgraph` (and the `rlgraph` command) imports no more than it needs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STOP", "Diagnostic", "Spec", "SpecError", "compile", "load", "run"]


def __getattr__(name: str) -> Any:
    if name == "Diagnostic":
        from rlgraph.diagnostics import Diagnostic

        return Diagnostic
    if name in __all__:
        from rlgraph import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlgraph' has no attribute {name!r}")
