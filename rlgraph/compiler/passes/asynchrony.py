"""Asynchronous training (`train.staleness > 0`) needs a rollout that can run while the actor trains.

The pipelined driver (rlgraph/runtime/loop.py) generates batch t+1 while the actor updates on batch t. That
overlaps only where the two run in different processes on different devices: a rollout colocated with a trained
role generates in that role's process (or time-shares its devices), so nothing would overlap and the samples would
only be older. And a rollout that no sync edge feeds would generate with its first weights for ever, so no bound
on their age could hold.
"""

from __future__ import annotations

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.topology import root_of
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Program
from rlgraph.lang.schema import TRAINED_KINDS


def asynchrony(program: Program, graph: StepGraph) -> list[Diagnostic]:
    train = program.train
    if train is None or not train.get("staleness", 0):
        return []
    staleness = train["staleness"]
    out: list[Diagnostic] = []
    if not graph.generate_calls():  # SFT (`demos -> actor.sft`): no samples, so none can be stale
        return [error("async-no-rollout", f"train.staleness = {staleness} lets a rollout generate ahead of the "
                      "update, but the step generates nothing: it trains on the data's demonstrations",
                      train.span_of("staleness"), "set `staleness = 0` (or leave it out)", label="nothing to overlap")]
    for call in graph.generate_calls():
        rollout = program.roles.get(call.target)
        if rollout is None:
            continue
        root = root_of(program, rollout)
        sharing = [r.name for r in program.roles.values()
                   if r.kind in TRAINED_KINDS and root_of(program, r) is root]
        if sharing:
            out.append(error(
                "async-colocated",
                f"train.staleness = {staleness} asks the rollout to generate while the actor trains, but `{rollout.name}` "
                f"shares its devices and processes with `{sharing[0]}`: generation and the update run there one after "
                "the other, so nothing overlaps and the samples would only be older",
                train.span_of("staleness"),
                f"give `{rollout.name}` a pool of its own (`pool = ...` instead of `colocate`), or set `staleness = 0`; "
                "overlapping on shared devices would need time-sharing the devices, which this runtime does not do",
                label="cannot overlap", notes=[(f"`{rollout.name}` is placed here", rollout.span_of(
                    "colocate" if rollout.is_set("colocate") else "pool"))]))
        elif not any(edge.target == rollout.name for edge in graph.syncs):
            out.append(error(
                "async-no-sync", f"train.staleness = {staleness} bounds how old the rollout's weights may be, but no "
                f"sync edge gives `{rollout.name}` new weights", train.span_of("staleness"),
                f"add `sync actor -> {rollout.name}` to the step", label="no sync"))
    return out
