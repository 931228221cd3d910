"""The plan as one self-contained HTML page (jinja2 template, inline CSS and SVG, no scripts or links)."""

from __future__ import annotations

from pathlib import Path

from rlgraph.plan.layout import layout
from rlgraph.plan.model import Plan
from rlgraph.plan.view import (KIND_COLORS, call_color, call_notes, call_where, counts, devices, environments,
                               format_bytes, peak, pipeline, role_kinds, span_text, summary)

TEMPLATES = Path(__file__).parent / "templates"
_MAX_LABEL = 24


def _short(text: str, limit: float = _MAX_LABEL) -> str:
    limit = max(int(limit), 4)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _level(fraction: float | None) -> str:
    if fraction is None:
        return "unknown"
    return "ok" if fraction < 0.75 else "high" if fraction <= 1.0 else "over"


def _pools(plan: Plan) -> list[dict]:
    kinds = role_kinds(plan)
    views = devices(plan)
    out = []
    for pool in plan.pools:
        nodes = []
        for node in range(pool.nodes):
            cells = []
            for view in (v for v in views if v.pool == pool.name and v.node == node):
                row = view.memory
                fraction = view.fraction
                cells.append({
                    "id": view.id,
                    "label": f"{pool.device} {view.device}",
                    "used": format_bytes(row.estimated_bytes) if row else "—",
                    "capacity": format_bytes(row.capacity_bytes) if row and row.capacity_bytes else None,
                    "percent": None if fraction is None else round(100 * fraction),
                    "bar": 0 if fraction is None else min(100.0, 100 * fraction),
                    "level": _level(fraction),
                    "breakdown": "\n".join(f"{k}: {format_bytes(v)}" for k, v in
                                           sorted(row.breakdown.items(), key=lambda kv: -kv[1])) if row else "",
                    "processes": [{
                        "name": process,
                        "replicas": [{"role": p.role, "replica": p.replica, "kind": kinds.get(p.role, ""),
                                      "color": KIND_COLORS.get(kinds.get(p.role, ""), "#777"),
                                      "span": span_text(p.devices) if len(p.devices) > 1 else ""}
                                     for p in replicas],
                    } for process, replicas in view.processes.items()],
                })
            nodes.append({"index": node, "devices": cells})
        out.append({"name": pool.name, "nodes": nodes, "per_node": pool.devices_per_node, "count": pool.nodes,
                    "device": pool.device, "memory": format_bytes(pool.device_memory_bytes)
                    if pool.device_memory_bytes else None})
    return out


def _peak(plan: Plan) -> dict | None:
    top = peak(plan)
    if top is None or not top.estimated_bytes:
        return None
    kinds = role_kinds(plan)
    whole = max(top.capacity_bytes or 0, top.estimated_bytes)
    items = []
    for key, size in sorted(top.breakdown.items(), key=lambda kv: -kv[1]):
        role = key.split("/")[0]
        items.append({"key": key, "size": format_bytes(size), "pct": 100 * size / whole,
                      "share": 100 * size / top.estimated_bytes, "color": KIND_COLORS.get(kinds.get(role, ""), "#777")})
    return {"where": f"pool {top.pool} · node {top.node} · device {top.device}", "items": items,
            "total": format_bytes(top.estimated_bytes),
            "capacity": format_bytes(top.capacity_bytes) if top.capacity_bytes else None,
            "percent": round(100 * top.estimated_bytes / top.capacity_bytes) if top.capacity_bytes else None}


def _schedule(plan: Plan) -> list[dict]:
    loops = pipeline(plan)
    calls = {c.id: c for c in plan.calls}
    where = call_where(plan)
    notes = call_notes(plan)
    out = []
    for stage in plan.schedule:
        lanes = []
        for lane in stage.lanes or [stage.calls]:
            lanes.append({"where": where.get(lane[0], ""),
                          "calls": [{"id": c, "color": call_color(plan, calls[c]) if c in calls else "#777",
                                     "note": notes.get(c, "")} for c in lane]})
        loop = None if loops is None else ("trainer loop" if stage.stage in loops.trainer_stages else "rollout loop")
        out.append({"stage": stage.stage, "concurrent": stage.concurrent, "lanes": lanes, "loop": loop})
    return out


def _roles(plan: Plan) -> list[dict]:
    processes: dict[str, set[str]] = {}
    for p in plan.placements:
        processes.setdefault(p.role, set()).add(p.process)
    return [{"name": r.name, "kind": r.kind, "color": KIND_COLORS.get(r.kind, "#777"),
             "model": r.model or "—", "path": r.model_path or "",
             "where": f"colocated with {r.colocate}" if r.colocate else f"pool {r.pool}",
             "replicas": r.replicas, "tp": r.tp, "dtype": r.dtype_label,
             "strategy": r.strategy_label or "—", "processes": len(processes.get(r.name, ())),
             "placed": r.name in processes} for r in plan.roles]


def render_html(plan: Plan) -> str:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    errors, warnings = counts(plan)
    graph = layout(plan)
    n_devices = sum(p.nodes * p.devices_per_node for p in plan.pools)
    return env.get_template("plan.html.j2").render(
        plan=plan, pipeline=pipeline(plan), summary=summary(plan), errors=errors, warnings=warnings, graph=graph,
        short=_short, pools=_pools(plan), peak=_peak(plan), schedule=_schedule(plan), roles=_roles(plan),
        envs=environments(plan), kinds=KIND_COLORS, n_devices=n_devices,
        n_processes=len({p.process for p in plan.placements}),
        markers=sorted({e["color"] for e in graph.edges}),
    )
