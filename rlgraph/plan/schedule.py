"""The step's schedule: stages of calls, and which calls of a stage run at the same time.

A stage holds the calls whose inputs are all produced by earlier stages
(`StepGraph.stages()`). Each call runs on a set of devices: a role's call on
the devices of the role's replicas (a colocated role on its root's), a
transform or rule reward on the driver, which counts as a device set of its
own. Calls of a stage that share a device (directly or through a chain of
calls) form one *lane* and run one after another, in step order; different
lanes run at the same time. A stage is `concurrent` when it has two or more lanes.
"""

from __future__ import annotations

from rlgraph.compiler.graph import CallNode, StepGraph
from rlgraph.plan.model import DRIVER, Placement, Stage


def devices_by_role(placements: list[Placement]) -> dict[str, frozenset]:
    """Role -> the (pool, node, device) triples its replicas occupy."""
    out: dict[str, set] = {}
    for p in placements:
        out.setdefault(p.role, set()).update((p.pool, p.node, d) for d in p.devices)
    return {role: frozenset(devices) for role, devices in out.items()}


def devices_of_call(call: CallNode, by_role: dict[str, frozenset]) -> frozenset:
    if call.kind != "role":
        return frozenset({DRIVER})
    # an unplaced role (its placement failed) is kept apart rather than read as "no devices"
    return by_role.get(call.target) or frozenset({("unplaced", call.target)})


def lanes(calls: list[CallNode], by_role: dict[str, frozenset]) -> list[list[str]]:
    """Group a stage's calls into lanes: connected by shared devices, kept in step order."""
    parent = list(range(len(calls)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {}  # device -> first call index seen on it
    for i, call in enumerate(calls):
        for device in devices_of_call(call, by_role):
            if device in owner:
                parent[find(i)] = find(owner[device])
            else:
                owner[device] = i
    groups: dict[int, list[str]] = {}
    for i, call in enumerate(calls):
        groups.setdefault(find(i), []).append(call.id)
    return list(groups.values())  # a group is made when its first call is seen: step order


def schedule(graph: StepGraph, placements: list[Placement]) -> tuple[list[Stage], dict[str, int]]:
    """The stages (numbered from 1) and each call's stage; a cyclic step has none (the cycle is reported)."""
    by_role = devices_by_role(placements)
    stages, stage_of = [], {}
    for number, calls in enumerate(graph.stages(), start=1):
        groups = lanes(calls, by_role)
        stages.append(Stage(number, [c.id for c in calls], len(groups) >= 2, groups))
        stage_of.update({c.id: number for c in calls})
    return stages, stage_of
