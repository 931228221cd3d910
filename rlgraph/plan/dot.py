"""The plan as Graphviz DOT: calls as nodes, fields as edge labels, syncs dashed, placement as clusters.

Clusters: `cluster_driver` holds the rule rewards and transforms (the data source sits first, outside);
one `cluster_<root>` per worker group, i.e. the processes `<root>/0..n-1` of a
root role (every call of a role runs on all of its processes at once), with a
nested `cluster_<root>__<role>` per role hosted there (colocated roles share
their root's processes). Calls of a role that could not be placed sit outside
any cluster.
"""

from __future__ import annotations

from rlgraph.plan.model import DRIVER, Plan
from rlgraph.plan.view import DATA, KIND_COLORS, call_arguments, call_color, flows


def quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _cluster_id(*parts: str) -> str:
    return quote("cluster_" + "__".join(parts))


def render_dot(plan: Plan) -> str:
    roles = {r.name: r for r in plan.roles}
    placed = {p.role for p in plan.placements}
    by_group: dict[str, dict[str, list]] = {}  # root -> role -> calls
    driver, loose = [], []
    for call in plan.calls:
        if call.kind != "role":
            driver.append(call)
        elif call.target in placed:
            root = roles[call.target].colocate or call.target
            by_group.setdefault(root, {}).setdefault(call.target, []).append(call)
        else:
            loose.append(call)
    processes: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for p in plan.placements:
        if roles.get(p.role) and not roles[p.role].colocate:
            processes.setdefault(p.role, []).append(p.process)
            where.setdefault(p.role, f"pool {p.pool}")

    lines = [f"digraph {quote('plan')} {{",
             f"  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=11, labelloc=t, "
             f"label={quote('rlgraph plan: ' + plan.spec)}, compound=true, nodesep=0.3, ranksep=0.6];",
             "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11, fontcolor=white, "
             "color=white, penwidth=1.2];",
             "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#5f6b7a\", fontcolor=\"#333333\"];"]

    def node(call, indent: str) -> str:
        arguments = ", ".join(f"{k}={v}" for k, v in call_arguments(plan, call).items())
        label = call.label + (f"\n({arguments})" if arguments and len(arguments) < 60 else "")
        return (f"{indent}{quote(call.id)} [label={quote(label)}, fillcolor={quote(call_color(plan, call))}, "
                f"tooltip={quote('stage ' + str(call.stage))}];")

    if any(source == DATA for source, _, _ in flows(plan)):  # the data loader's batch, first on the left
        lines.append(f"  {{ rank=source; {quote(DATA)} [label=\"data\\nprompts\", shape=cylinder, "
                     f"fillcolor={quote(KIND_COLORS['data'])}]; }}")
    lines.append(f"  subgraph {_cluster_id(DRIVER)} {{")
    lines.append(f"    label={quote('driver (transforms, rule rewards)')}; style=\"rounded,dashed\"; color=\"#8a8f98\";")
    lines += [node(c, "    ") for c in driver]
    lines.append("  }")
    for root, members in by_group.items():
        procs = processes.get(root, [])
        span = f"{procs[0]}…{procs[-1]}" if len(procs) > 1 else (procs[0] if procs else root)
        lines.append(f"  subgraph {_cluster_id(root)} {{")
        group_label = f"processes {span} ({len(procs)}) · {where.get(root, '')}"
        lines.append(f"    label={quote(group_label)}; "
                     f"style=rounded; color=\"#444444\";")
        for role, calls in members.items():
            plan_role = roles[role]
            lines.append(f"    subgraph {_cluster_id(root, role)} {{")
            role_label = f"{role} ({plan_role.kind}, {plan_role.replicas} × tp {plan_role.tp})"
            lines.append(f"      label={quote(role_label)}; "
                         f"style=\"rounded,filled\"; fillcolor=\"#f4f6f8\"; "
                         f"color={quote(KIND_COLORS.get(plan_role.kind, '#888888'))};")
            lines += [node(c, "      ") for c in calls]
            lines.append("    }")
        lines.append("  }")
    lines += [node(c, "  ") for c in loose]
    for source, target, name in flows(plan):
        lines.append(f"  {quote(source)} -> {quote(target)} [label={quote(name)}];")
    for trained, rollout in plan.syncs:
        update = [c for c in plan.calls if c.kind == "role" and c.target == trained]
        generate = [c for c in plan.calls if c.kind == "role" and c.target == rollout]
        if update and generate:
            lines.append(f"  {quote(update[-1].id)} -> {quote(generate[0].id)} [label={quote('sync weights')}, "
                         f"style=dashed, color=\"#3f9b4a\", fontcolor=\"#3f9b4a\", constraint=false];")
    lines.append("}")
    return "\n".join(lines) + "\n"

