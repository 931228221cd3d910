"""A trained role's `param_offload` is FSDP2's CPU offload policy: it needs the role's parameters sharded."""

from __future__ import annotations

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.topology import dp_size
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.spec.program import Program
from rlgraph.spec.schema import TRAINED_KINDS


def offload(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out = []
    for role in program.roles.values():
        if role.kind not in TRAINED_KINDS or not role.get("param_offload"):
            continue
        # The runtime shards a trained role only over a data-parallel group of 2 or more (workers/fsdp.py
        # will_shard); unsharded, nothing would take the parameters off the device.
        if role.get("strategy", "ddp") != "fsdp":
            out.append(error("offload-unsharded", f"`param_offload` on {role.kind} `{role.name}` needs sharded "
                             "parameters, but its strategy is ddp", role.span_of("param_offload"),
                             "set `strategy = fsdp` (FSDP2's CPU offload policy keeps each rank's shards of the "
                             "parameters, gradients and AdamW state in host memory), or use `optimizer_offload`, "
                             "which works under ddp", label="ddp keeps the whole model on every device"))
        elif dp_size(program, role) < 2:
            out.append(error("offload-unsharded", f"`param_offload` on {role.kind} `{role.name}` needs sharded "
                             "parameters, but with one replica it is not sharded", role.span_of("param_offload"),
                             "give it `replicas = 2` or more (fsdp shards over its data-parallel group), or use "
                             "`optimizer_offload`, which works with one replica", label="one replica"))
    return out
