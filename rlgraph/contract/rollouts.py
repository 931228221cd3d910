"""Which of a step's `generate` calls the update trains on, read the same way by the compiler and the runtime.

A step may generate more than once (ReMax's greedy baseline next to the sampled responses). Every role call
other than `generate` (log_prob, values, score, update) reads one Rollout, the step's *trained* rollout: the
generate call whose outputs (its responses, or the log-probs it keeps) flow into a role call. The other
generate calls are *side* generations: their responses feed rewards, whose scores feed transforms (a baseline).

The rule works on anything with the call fields that `CallNode` (the compiler's graph) and `CallPlan` (the
Plan) share: `kind`, `method`, `inputs`, `outputs`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FILTER_GROUPS = "filter_groups"  # the transform that drops prompts and makes the step draw more (DAPO)


def generate_calls(calls: Iterable[Any]) -> list[Any]:
    return [c for c in calls if c.kind == "role" and c.method == "generate"]


def read_by_role_calls(calls: Iterable[Any]) -> set[str]:
    """The fields that role calls other than generate take as inputs."""
    return {name for c in calls if c.kind == "role" and c.method != "generate" for _, name in c.inputs}


def trained_generates(calls: Iterable[Any]) -> list[Any]:
    """The generate calls whose outputs some role call reads (more than one is an error of the spec)."""
    calls = list(calls)
    read = read_by_role_calls(calls)
    return [g for g in generate_calls(calls) if any(name in read for _, name in g.outputs)]


def trained_generate(calls: Iterable[Any]) -> Any | None:
    """The generate call the step's role calls read; the first generate when none is read (None: no generate)."""
    calls = list(calls)
    return next(iter(trained_generates(calls) + generate_calls(calls)), None)


def filter_call(calls: Iterable[Any]) -> Any | None:
    return next((c for c in calls if c.kind == "transform" and c.target == FILTER_GROUPS), None)


DEMOS = "demos"  # the data field of demonstrations: each prompt with its response (rlgraph/compiler/builtins.py)


def sft_call(calls: Iterable[Any]) -> Any | None:
    """The step's supervised call (`demos -> actor.sft`): such a step draws demonstrations, not prompts to sample
    from, and has no generate call (the compiler's dataflow pass)."""
    return next((c for c in calls if c.kind == "role" and c.method == "sft"), None)


def reads_demonstrations(calls: Iterable[Any]) -> bool:
    """Whether some call reads the data's demonstrations: then its rows must hold responses."""
    return any(name == DEMOS for c in calls for _, name in c.inputs)
