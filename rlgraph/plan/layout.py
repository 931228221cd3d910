"""Lay the step's dataflow out for an inline SVG: columns are stages, boxes are calls, arrows are fields.

A small layered layout (Sugiyama style, no dependencies):
1. column = the call's stage (the data source is column 0);
2. a field that skips columns gets a waypoint in every column it crosses, shared
   by all its consumers, so arrows pass between boxes instead of through them;
3. boxes and waypoints are ordered in each column by the barycenter of their
   neighbours, a few sweeps left-to-right and back, to cut crossings;
4. each column is stacked and centred; arrows are cubic curves through the waypoints.
Each output field is drawn once, as a label on its producer's right edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.plan.model import Plan
from rlgraph.plan.view import DATA, KIND_COLORS, call_arguments, call_color, call_where, env_of, flows

BOX_W, BOX_H = 156, 50
DATA_W = 84  # the data source's box is narrower
GAP_X = 118  # between columns: output labels and curves
GAP_Y = 20
WAY_H = 12  # height a waypoint takes in its column
MARGIN_X, TOP, SYNC_GAP = 24, 46, 26
CHAR_W = 6.4  # approximate width of one 10.5px monospace character (output labels)
LABEL_W = 7.6  # approximate width of one 12.5px bold character (call labels)


@dataclass
class Box:
    id: str
    label: str
    sub: str
    color: str
    column: int
    x: float = 0
    y: float = 0
    w: float = BOX_W
    h: float = BOX_H
    tooltip: str = ""
    outputs: list[dict] = field(default_factory=list)  # {field, x, y, w}: labels on the right edge

    @property
    def cy(self) -> float:
        return self.y + self.h / 2


@dataclass
class Item:
    """A slot in a column: a box, or a waypoint of (producer, field)."""

    key: tuple
    column: int
    h: float
    neighbours: list = field(default_factory=list)
    y: float = 0
    order: float = 0


@dataclass
class Layout:
    width: float
    height: float
    boxes: list[Box]
    edges: list[dict]  # {d, field, color}
    syncs: list[dict]  # {d, label, x, y}
    columns: list[dict]  # {x, label, concurrent}


def _curve(points: list[tuple[float, float]]) -> str:
    (x, y), rest = points[0], points[1:]
    d = [f"M{x:.1f},{y:.1f}"]
    for nx, ny in rest:
        if abs(ny - y) < 0.5:
            d.append(f"L{nx:.1f},{ny:.1f}")
        else:
            mx = (x + nx) / 2
            d.append(f"C{mx:.1f},{y:.1f} {mx:.1f},{ny:.1f} {nx:.1f},{ny:.1f}")
        x, y = nx, ny
    return " ".join(d)


def layout(plan: Plan) -> Layout:
    where = call_where(plan)
    edges = flows(plan)
    boxes: dict[str, Box] = {}
    if any(source == DATA for source, _, _ in edges):
        boxes[DATA] = Box(DATA, "data", "prompts", KIND_COLORS["data"], 0, w=DATA_W,
                          tooltip="the data loader's batch")
    for call in plan.calls:
        arguments = ", ".join(f"{k}={v}" for k, v in call_arguments(plan, call).items())
        env = env_of(call)
        sub = where.get(call.id, "") + (f" · env {env.name}" if env is not None else "")
        boxes[call.id] = Box(call.id, call.label, sub, call_color(plan, call), max(call.stage, 1),
                             tooltip=f"{call.label} · stage {call.stage}" + (f" · {arguments}" if arguments else ""))
    # outputs drawn on the producer: one label per field, in port order
    out_fields: dict[str, list[str]] = {}
    for source, _, name in edges:
        if name not in out_fields.setdefault(source, []):
            out_fields[source].append(name)
    for box_id, names in out_fields.items():
        boxes[box_id].h = max(BOX_H, 18 * len(names) + 14)

    has_data = DATA in boxes
    first = min((b.column for b in boxes.values()), default=0)  # no data source: stage 1 is the first column
    for box in boxes.values():
        box.column -= first
    n_columns = max((b.column for b in boxes.values()), default=-1) + 1
    # a column is as wide as its widest label needs (the data source's is narrower)
    widths = [DATA_W if has_data and c == 0 else BOX_W for c in range(n_columns)]
    for box in boxes.values():
        box.w = widths[box.column] = max(widths[box.column], len(box.label) * LABEL_W + 24)
    lefts = [MARGIN_X]
    for width in widths[:-1]:
        lefts.append(lefts[-1] + width + GAP_X)
    for box in boxes.values():
        box.w = widths[box.column]
    items: dict[tuple, Item] = {("box", b.id): Item(("box", b.id), b.column, b.h) for b in boxes.values()}
    paths: list[tuple[str, str, str, list[tuple]]] = []  # producer, consumer, field, waypoint keys
    reach: dict[tuple[str, str], int] = {}  # (producer, field) -> the farthest consumer's column
    for source, target, name in edges:
        reach[source, name] = max(reach.get((source, name), 0), boxes[target].column)
    buses: dict[tuple[str, str], list[tuple]] = {}  # (producer, field) -> its waypoints, one per crossed column
    for (source, name), last in reach.items():
        bus, previous = [], ("box", source)
        for column in range(boxes[source].column + 1, last):
            key = ("way", source, name, column)
            items[key] = Item(key, column, WAY_H, [previous])
            items[previous].neighbours.append(key)
            bus.append(key)
            previous = key
        buses[source, name] = bus
    for source, target, name in edges:
        chain = buses[source, name][:max(boxes[target].column - boxes[source].column - 1, 0)]
        previous = chain[-1] if chain else ("box", source)
        items[("box", target)].neighbours.append(previous)
        items[previous].neighbours.append(("box", target))
        paths.append((source, target, name, chain))

    columns: list[list[Item]] = [[] for _ in range(n_columns)]
    for item in items.values():  # insertion order = step order: a good first guess
        columns[item.column].append(item)
    for column in columns:
        for i, item in enumerate(column):
            item.order = i
    for sweep in range(4):
        indices = range(1, n_columns) if sweep % 2 == 0 else range(n_columns - 2, -1, -1)
        for c in indices:
            side = c - 1 if sweep % 2 == 0 else c + 1
            for item in columns[c]:
                near = [items[k].order for k in item.neighbours if items[k].column == side]
                if near:
                    item.order = sum(near) / len(near) + item.order * 1e-3
            columns[c].sort(key=lambda it: it.order)
            for i, item in enumerate(columns[c]):
                item.order = i

    heights = [sum(it.h for it in col) + GAP_Y * max(len(col) - 1, 0) for col in columns]
    tallest = max(heights, default=0)
    for col, height in zip(columns, heights):
        y = TOP + (tallest - height) / 2
        for item in col:
            item.y = y
            y += item.h + GAP_Y
    for box in boxes.values():
        box.x = lefts[box.column]
        box.y = items[("box", box.id)].y
        names = out_fields.get(box.id, [])
        for i, name in enumerate(names):
            box.outputs.append({"field": name, "x": box.x + box.w + 6, "y": box.y + box.h * (i + 1) / (len(names) + 1),
                                "w": len(name) * CHAR_W + 12})

    in_count: dict[str, int] = {}
    for _, target, _, _ in paths:
        in_count[target] = in_count.get(target, 0) + 1
    seen_in: dict[str, int] = {}
    drawn = []
    trunks: set[tuple[str, str]] = set()
    longest: dict[tuple[str, str], list[tuple]] = {}
    for source, _, name, chain in paths:
        if len(chain) > len(longest.get((source, name), ())):
            longest[source, name] = chain

    def waypoint(key: tuple) -> tuple[tuple[float, float], tuple[float, float]]:
        x, y = lefts[key[3]], items[key].y + WAY_H / 2
        return (x - 10, y), (x + widths[key[3]] + 10, y)

    for source, target, name, chain in paths:
        src, dst = boxes[source], boxes[target]
        port = next(o for o in src.outputs if o["field"] == name)
        start = (port["x"] + port["w"], port["y"])
        k = seen_in[target] = seen_in.get(target, 0) + 1
        end = (dst.x - 2, dst.y + dst.h * k / (in_count[target] + 1))
        if chain and (source, name) not in trunks:
            # the field's trunk through its waypoints, drawn once; each consumer branches off it
            trunks.add((source, name))
            points = [start] + [p for key in longest[source, name] for p in waypoint(key)]
            drawn.append({"d": _curve(points), "field": name, "color": src.color, "from": source, "to": ""})
        branch = [waypoint(chain[-1])[1] if chain else start, end]
        drawn.append({"d": _curve(branch), "field": name, "color": src.color, "from": source, "to": target})

    bottom = TOP + tallest
    syncs = []
    for i, (trained, rollout) in enumerate(plan.syncs):
        updates = [c.id for c in plan.calls if c.kind == "role" and c.target == trained]
        generates = [c.id for c in plan.calls if c.kind == "role" and c.target == rollout]
        if not updates or not generates:
            continue
        a, b = boxes[updates[-1]], boxes[generates[0]]
        y = bottom + SYNC_GAP * (i + 1)
        # leave the update on its right (updates produce nothing), run under the graph, enter the rollout from below
        ax, ay, bx = a.x + a.w, a.cy, b.x + b.w / 2
        turn = ax + 18
        d = (f"M{ax:.1f},{ay:.1f} C{turn:.1f},{ay:.1f} {turn:.1f},{ay:.1f} {turn:.1f},{ay + 14:.1f} "
             f"L{turn:.1f},{y - 14:.1f} C{turn:.1f},{y:.1f} {turn:.1f},{y:.1f} {turn - 14:.1f},{y:.1f} "
             f"L{bx + 14:.1f},{y:.1f} C{bx:.1f},{y:.1f} {bx:.1f},{y:.1f} {bx:.1f},{y - 14:.1f} "
             f"L{bx:.1f},{b.y + b.h + 4:.1f}")
        syncs.append({"d": d, "label": f"sync weights {trained} → {rollout} after the update",
                      "x": (turn + bx) / 2, "y": y - 5})
    width = lefts[-1] + widths[-1] + MARGIN_X + (18 if syncs else 0) if n_columns else 2 * MARGIN_X
    height = bottom + SYNC_GAP * (len(syncs) + 1) + 6
    stages = {s.stage: s for s in plan.schedule}
    column_heads = []
    for c in range(n_columns):
        stage = stages.get(c + first)
        column_heads.append({"x": lefts[c], "w": widths[c], "label": f"stage {c + first}" if c + first else "data",
                             "concurrent": bool(stage and stage.concurrent)})
    return Layout(width, height, list(boxes.values()), drawn, syncs, column_heads)
