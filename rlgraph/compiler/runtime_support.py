"""What rlgraph's own runtime implements, as plain data the compiler can read.

The language describes more than this runtime runs (`engine = sglang`, `tp = 2`), because a spec may be
planned here for a cluster whose runtime has those. The `runtime_support` pass compares a spec with this
table, so that `check` warns and `run` refuses before anything starts.

The compiler never imports the runtime or the workers (they pull in torch), so this restates them:
`ENGINES` mirrors each engine class's `capabilities` in rlgraph.workers.engines, `ROLE_KINDS` the role
kinds the runtime builds a worker for (rlgraph.contract.methods.WORKERS); tests/compiler/test_runtime_support.py
proves they agree, field by field.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSupport:
    """The fields of rlgraph.workers.engines.base.EngineCapabilities, one for one."""

    name: str  # the value of a rollout's `engine`
    max_tp: int  # tensor-parallel devices one replica can span
    kept_log_probs: bool  # can return each sampled token's log-prob (`generate -> responses, log_prob`)
    memory_fraction: bool  # honours the rollout's `memory_fraction`
    release_memory: bool  # can free and re-take its device memory between generations


ENGINES: dict[str, EngineSupport] = {
    "hf": EngineSupport("hf", max_tp=1, kept_log_probs=True, memory_fraction=False, release_memory=True),
    "sglang": EngineSupport("sglang", max_tp=8, kept_log_probs=True, memory_fraction=True, release_memory=True),
}

# The engines that generate with a trainer's module in place (rlgraph.runtime.roles.IN_PLACE_ENGINES)
IN_PLACE_ENGINES = ("hf",)

ROLE_KINDS = ("actor", "ref", "critic", "rollout", "reward_model")
