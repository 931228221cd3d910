"""Rollout engines by name. Adding one = a module in this package (a subclass of `base.Engine`) + a line in
ENGINES; `rlgraph/compiler/runtime_support.py` states the same capabilities for the compiler (a test
checks they agree). Engine modules are imported only when `engine_class` asks for one."""

from __future__ import annotations

import importlib

from rlgraph.workers.engines.base import Engine, EngineCapabilities, Generation, SamplingParams

ENGINES: dict[str, str] = {
    "hf": "rlgraph.workers.engines.hf:HFEngine",
    "sglang": "rlgraph.workers.engines.sglang:SGLangEngine",  # GPU only; the `sglang` extra
}


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as `name`."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; this runtime has: {', '.join(sorted(ENGINES))}")
    module, _, attribute = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


__all__ = ["ENGINES", "Engine", "EngineCapabilities", "Generation", "SamplingParams", "engine_class"]
