"""The plan for a terminal, with rich: summary, roles, devices (pools -> nodes -> devices), environments, schedule,
memory."""

from __future__ import annotations

import io
import shutil

from rlgraph.plan.model import Plan
from rlgraph.plan.view import (KIND_COLORS, call_notes, call_where, devices, environments, format_bytes, peak, pipeline,
                               role_kinds, span_text, summary)

_BAR = 10


def _bar(fraction: float | None):
    from rich.text import Text

    if fraction is None:
        return Text("·" * _BAR, style="dim")
    filled = min(round(fraction * _BAR), _BAR)
    color = "green" if fraction < 0.75 else "yellow" if fraction <= 1.0 else "red"
    return Text("█" * filled, style=color) + Text("░" * (_BAR - filled), style="dim")


def _roles_table(plan: Plan):
    from rich.table import Table

    table = Table(title="Roles", title_justify="left", title_style="bold", box=None, pad_edge=False,
                  header_style="dim")
    for column in ("role", "kind", "model", "runs on", "replicas", "tp", "dtype", "strategy"):
        table.add_column(column, justify="right" if column in ("replicas", "tp") else "left")
    for role in plan.roles:
        where = f"colocated with {role.colocate}" if role.colocate else f"pool {role.pool}"
        table.add_row(f"[bold {KIND_COLORS.get(role.kind, 'white')}]{role.name}[/]", role.kind,
                      f"{role.model or '—'}" + (f" [dim]({role.model_path})[/]" if role.model_path else ""),
                      where, str(role.replicas), str(role.tp), role.dtype_label, role.strategy_label or "—")
    return table


def _device_tree(plan: Plan):
    from rich.text import Text
    from rich.tree import Tree

    kinds = role_kinds(plan)
    tree = Tree("[bold]Devices[/]", guide_style="dim")
    views = devices(plan)
    for pool in plan.pools:
        memory = f" · {format_bytes(pool.device_memory_bytes)} each" if pool.device_memory_bytes else ""
        branch = tree.add(f"[bold]pool {pool.name}[/] [dim]{pool.nodes} node{'s' * (pool.nodes != 1)} × "
                          f"{pool.devices_per_node} {pool.device}{memory}[/]")
        for node in range(pool.nodes):
            leaf = branch.add(f"node {node}")
            for view in (v for v in views if v.pool == pool.name and v.node == node):
                row = view.memory
                line = Text(f"{pool.device} {view.device:<3}", style="bold")
                line += _bar(view.fraction)
                pct = f"{100 * view.fraction:4.0f}%" if view.fraction is not None else "    "
                used = format_bytes(row.estimated_bytes) if row else "—"
                cap = f" / {format_bytes(row.capacity_bytes)}" if row and row.capacity_bytes else ""
                line += Text(f" {pct} {used + cap:<20} ")
                if not view.processes:
                    line += Text("idle", style="dim")
                for i, (process, replicas) in enumerate(view.processes.items()):
                    if i:
                        line += Text("  +  ", style="dim")
                    line += Text(f"{process} │ ", style="dim")
                    for j, p in enumerate(replicas):
                        if j:
                            line += " "
                        tp = f"[{span_text(p.devices)}]" if len(p.devices) > 1 else ""
                        line += Text(f"{p.role}#{p.replica}{tp}", style=KIND_COLORS.get(kinds.get(p.role, ""), ""))
                leaf.add(line)
    return tree


def _schedule_table(plan: Plan):
    from rich.table import Table
    from rich.text import Text

    where = call_where(plan)
    notes = call_notes(plan)
    loops = pipeline(plan)
    title = "Schedule (one step)" if loops is None else \
        f"Schedule (one step; asynchronous: two loops, train.staleness = {loops.staleness})"
    table = Table(title=title, title_justify="left", title_style="bold", box=None,
                  pad_edge=False, header_style="dim")
    table.add_column("stage", justify="right")
    table.add_column("calls (‖ runs at the same time, → one after another on shared devices)")
    table.add_column("")
    calls = {c.id: c for c in plan.calls}
    kinds = role_kinds(plan)
    for stage in plan.schedule:
        text = Text()
        for i, lane in enumerate(stage.lanes or [stage.calls]):
            if i:
                text += Text("  ‖  ", style="bold")
            for j, call_id in enumerate(lane):
                if j:
                    text += Text(" → ", style="dim")
                call = calls.get(call_id)
                kind = kinds.get(call.target) if call and call.kind == "role" else (call.kind if call else "")
                text += Text(call_id, style=KIND_COLORS.get(kind or "", ""))
                if call_id in notes:
                    text += Text(f"  {notes[call_id]}", style="italic")
            text += Text(f" [{where.get(lane[0], '?')}]", style="dim")
        mark = Text("concurrent", style="bold green") if stage.concurrent else Text("")
        if loops is not None:
            mark = Text("trainer loop" if stage.stage in loops.trainer_stages else "rollout loop", style="bold cyan")
        table.add_row(str(stage.stage), text, mark)
    if loops is not None:
        for line in loops.meet:
            table.add_row("", Text(f"meet: {line}", style="dim italic"), "")
        return table
    for a, b in plan.syncs:
        table.add_row("", Text(f"sync {a} → {b} (weights, after the step's updates)", style="dim italic"), "")
    return table


def _envs_tree(plan: Plan):
    from rich.markup import escape
    from rich.tree import Tree

    tree = Tree("[bold]Environments[/] [dim](multi-turn episodes)[/]", guide_style="dim")
    for env in environments(plan):
        branch = tree.add(f"[bold]env {env.name}[/]  {escape(env.cls)}")
        branch.add(f"[dim]limits[/]    {env.limits}")
        branch.add(f"[dim]failures[/]  {env.failures}")
        branch.add(f"[dim]used by[/]   {escape(', '.join(env.calls)) or '—'}")
        branch.add(f"[dim]episodes[/]  {env.where}")
    return tree


def _memory_table(plan: Plan):
    from rich.table import Table

    top = peak(plan)
    if top is None:
        return None
    table = Table(title=f"Memory of the fullest device: pool {top.pool}, node {top.node}, device {top.device}",
                  title_justify="left", title_style="bold", box=None, pad_edge=False, header_style="dim",
                  min_width=64)
    table.add_column("role/item")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    for key, size in sorted(top.breakdown.items(), key=lambda kv: -kv[1]):
        share = f"{100 * size / top.estimated_bytes:.0f}%" if top.estimated_bytes else ""
        table.add_row(key, format_bytes(size), share)
    cap = f" of {format_bytes(top.capacity_bytes)}" if top.capacity_bytes else " (capacity unknown: set `memory`)"
    table.add_row("[bold]total[/]", f"[bold]{format_bytes(top.estimated_bytes)}[/]", cap.strip())
    for key, size in sorted(top.host.items(), key=lambda kv: -kv[1]):  # offloaded: not in the total
        table.add_row(f"{key} (host)", format_bytes(size), "offloaded")
    if top.host:  # the host memory is the node's: every device's replicas offload into it
        node = sum(sum(r.host.values()) for r in plan.memory if (r.pool, r.node) == (top.pool, top.node))
        table.add_row(f"[bold]host memory of node {top.node}[/]", f"[bold]{format_bytes(node)}[/]", "all its devices")
    return table


def render_text(plan: Plan, *, color: bool = True, width: int | None = None) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    width = width or max(shutil.get_terminal_size((120, 40)).columns, 80)
    console = Console(file=buffer, width=width, force_terminal=color, color_system="truecolor" if color else None,
                      highlight=False, soft_wrap=False)
    errors = sum(d["severity"] == "error" for d in plan.diagnostics)
    status = f"[bold red]{errors} error{'s' * (errors != 1)}[/]" if errors else "[bold green]ok[/]"
    console.print(f"[bold]rlgraph plan[/] {plan.spec}  {status}")
    console.print(summary(plan), soft_wrap=True)
    console.print()
    if plan.roles:
        console.print(_roles_table(plan))
        console.print()
    if plan.pools:
        console.print(_device_tree(plan))
        console.print()
    if plan.envs:
        console.print(_envs_tree(plan))
        console.print()
    if plan.schedule:
        console.print(_schedule_table(plan))
        console.print()
    memory = _memory_table(plan)
    if memory is not None:
        console.print(memory)
    return buffer.getvalue()
