"""Names resolve: every model, pool and role a declaration refers to exists, and each role has a place."""

from __future__ import annotations

from rlgraph.compiler.graph import StepGraph
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Program
from rlgraph.lang.validate import did_you_mean

_NEEDS_MODEL = ("actor", "ref", "critic", "reward_model", "judge")


def resolve(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    tables = {"model": program.models, "pool": program.pools, "colocate": program.roles}
    codes = {"model": "unknown-model", "pool": "unknown-pool", "colocate": "unknown-role"}
    for role in program.roles.values():
        for key, table in tables.items():
            name = role.values.get(key)
            if name is not None and name not in table:
                what = {"colocate": "role"}.get(key, key)
                out.append(error(codes[key], f"`{name}` is not a declared {what}", role.span_of(key),
                                 did_you_mean(name, table),
                                 f"declared: {', '.join(f'`{n}`' for n in table) or 'none'}"))
        has_pool, has_colocate = role.get("pool") is not None, role.get("colocate") is not None
        if has_pool and has_colocate:
            out.append(error("wrong-type", f"role `{role.name}` sets both `pool` and `colocate`",
                             role.span_of("colocate"),
                             "a role either has devices of its own (`pool`, `replicas`) or shares another role's "
                             "(`colocate`): keep one"))
        elif not has_pool and not has_colocate:
            out.append(error("missing-key", f"role `{role.name}` has no place to run", role.span,
                             f"add `pool = {next(iter(program.pools), 'NAME')}` or `colocate = ROLE`"))
        if has_colocate and role.is_set("replicas"):
            out.append(error("wrong-type", f"role `{role.name}` is colocated, so its replicas follow "
                             f"`{role['colocate']}`", role.span_of("replicas"), "remove `replicas`"))
        if role["colocate"] == role.name:
            out.append(error("wrong-type", f"role `{role.name}` cannot colocate with itself",
                             role.span_of("colocate"), "name another role, or give it a `pool`"))
        if role.kind in _NEEDS_MODEL and role.get("model") is None:
            out.append(error("missing-key", f"{role.kind} role `{role.name}` needs a `model`", role.span,
                             f"add `model = {next(iter(program.models), 'NAME')}`"))
        if role.kind == "rollout" and role.get("model") is None and not has_colocate:
            out.append(error("missing-key", f"rollout `{role.name}` needs a `model` when it is not colocated",
                             role.span, "add `model = NAME`, or `colocate = actor` to generate with the actor's weights"))
    out += _colocate_cycles(program)
    if program.data is None:
        span = program.step.span if program.step else next(iter(program.names().values()), None)
        span = span if span is None or hasattr(span, "file") else span.span
        if span is not None:
            out.append(error("missing-block", "the spec has no `data` block", span,
                             'add `data { train = "builtin:arith/train"  batch_size = 32 }`'))
    return out


def _colocate_cycles(program: Program) -> list[Diagnostic]:
    out = []
    for role in program.roles.values():
        chain, current = [role.name], role
        while current.get("colocate") in program.roles:
            current = program.roles[current["colocate"]]
            if current.name in chain:
                if current.name == role.name and current.name != current.get("colocate"):
                    out.append(error("wrong-type", "colocation cycle: " + " -> ".join(chain + [current.name]),
                                     role.span_of("colocate"), "one of these roles needs a `pool`"))
                break
            chain.append(current.name)
    return out
