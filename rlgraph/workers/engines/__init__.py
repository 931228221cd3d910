"""Rollout engines by name. Adding one = a module in this package (a subclass of `base.Engine`) + a line in
rlgraph/contract/engines.py ENGINES, whose facts the class carries as its `capabilities` and which the compiler,
planner and runtime read too. Engine modules are imported only when `engine_class` asks for one."""

from __future__ import annotations

import importlib

from rlgraph.contract.engines import ENGINES
from rlgraph.workers.engines.base import Engine, EngineCapabilities, Generation, SamplingParams


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as `name`."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; this runtime has: {', '.join(sorted(ENGINES))}")
    module, _, attribute = ENGINES[name].engine_class.partition(":")
    return getattr(importlib.import_module(module), attribute)


__all__ = ["ENGINES", "Engine", "EngineCapabilities", "Generation", "SamplingParams", "engine_class"]
