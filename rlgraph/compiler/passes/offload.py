"""A trained role's `param_offload` is FSDP2's CPU offload policy: it needs the role's parameters sharded.

The rule reads a role through its resources (topology.RoleResources), as the batch arithmetic does: the planner
checks a change of them with `offload_rules` on the resolved settings (rlgraph/plan/memory.py fit_test)."""

from __future__ import annotations

from collections.abc import Mapping

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.topology import RoleResources, declared_resources
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Program
from rlgraph.lang.schema import TRAINED_KINDS


def offload(program: Program, graph: StepGraph) -> list[Diagnostic]:
    return offload_rules(declared_resources(program))


def offload_rules(roles: Mapping[str, RoleResources]) -> list[Diagnostic]:
    out = []
    for role in roles.values():
        if role.kind not in TRAINED_KINDS or not role.param_offload:
            continue
        # The runtime shards a trained role only over a data-parallel group of 2 or more (workers/fsdp.py
        # will_shard); unsharded, nothing would take the parameters off the device.
        if role.strategy != "fsdp":
            out.append(error("offload-unsharded", f"`param_offload` on {role.kind} `{role.name}` needs sharded "
                             "parameters, but its strategy is ddp", role.decl.span_of("param_offload"),
                             "set `strategy = fsdp` (FSDP2's CPU offload policy keeps each rank's shards of the "
                             "parameters, gradients and AdamW state in host memory), or use `optimizer_offload`, "
                             "which works under ddp", label="ddp keeps the whole model on every device"))
        elif role.replicas < 2:
            out.append(error("offload-unsharded", f"`param_offload` on {role.kind} `{role.name}` needs sharded "
                             "parameters, but with one replica it is not sharded", role.decl.span_of("param_offload"),
                             "give it `replicas = 2` or more (fsdp shards over its data-parallel group), or use "
                             "`optimizer_offload`, which works with one replica", label="one replica"))
    return out
