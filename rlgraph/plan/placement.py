"""Placement: which devices and which process every role replica gets.

Rules (docs/plan.md has the long form):

- A role with a `pool` is a *root*. Each replica takes `tp` consecutive devices
  on ONE node; a pool's roots are placed in declaration order, each replica on
  the first node with `tp` free devices (node 0 first, then 1, ...), so
  replica (rank) numbers grow with (node, device) and a resumed run keeps its
  ranks. Two roots never share a device.
- A root replica is one process, `<root>/<replica>`, that spans its tp devices.
- A colocated role (`colocate`, chains followed to their root) runs on the
  root's devices, in the root's processes: lay the root's devices out in
  replica order and cut them into runs of the role's tp; replica k gets run k,
  and lives in the process of the root replica that holds the run's first
  device. E.g. a tp=2 rollout on an actor of 4 replicas: rollout replica k
  spans the devices of actor replicas 2k and 2k+1 and lives in `actor/<2k>`.
- Fit is checked per node, not in total, with the numbers to change in the hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.compiler.topology import dp_size, model_of, root_of, sequence_parallel_of, tp_of
from rlgraph.contract.engines import engine_facts
from rlgraph.contract.settings import PoolSettings
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Decl, InvalidValue, Program
from rlgraph.plan.model import Placement, PoolPlan, RolePlan
from rlgraph.plan.resolve import pool_settings, role_settings

_SEARCH_STEPS = 64  # how far past its lower bound a hint's search for nodes / devices per node goes
# the size a PoolPlan shows for a pool that misses its required `nodes` or `devices_per_node` (reported by the
# compiler): not a default, as nothing is placed on such a pool (it has no _Pool) and the plan never runs
_UNSIZED = 1


@dataclass
class _Pool:
    """Free space on one pool while its roots are placed: devices handed out so far per node."""

    decl: Decl  # for its name and where its keys are written
    settings: PoolSettings
    used: list[int]
    holders: dict[str, tuple[int, int]] = field(default_factory=dict)  # root role -> its (tp, replicas) here
    full: int = 0  # every node before this one is full

    @property
    def nodes(self) -> int:
        return self.settings.nodes

    @property
    def per_node(self) -> int:
        return self.settings.devices_per_node

    def take(self, tp: int) -> tuple[int, int] | None:
        """(node, first device) of `tp` free consecutive devices, first fit, or None."""
        while self.full < len(self.used) and self.used[self.full] == self.per_node:
            self.full += 1  # nodes before `full` have no device left: skip them
        for node in range(self.full, len(self.used)):
            used = self.used[node]
            if self.per_node - used >= tp:
                self.used[node] += tp
                return node, used
        return None


def _fits(nodes: int, per_node: int, demands: list[tuple[int, int]]) -> bool:
    """Do these (tp, replicas) groups, placed first fit in this order, fit the pool?

    Replicas of one group are alike, so first fit fills node after node: a node too full for one
    replica of the group is too full for the rest of it.
    """
    free = [per_node] * nodes
    for tp, count in demands:
        for node in range(nodes):
            if count == 0:
                break
            fit = min(count, free[node] // tp)
            free[node] -= fit * tp
            count -= fit
        if count:
            return False
    return True


def _smallest(start: int, ok) -> int | None:
    """The smallest value from `start` (a lower bound) that is ok; few steps past it, as only tp packing wastes."""
    return next((v for v in range(start, start + _SEARCH_STEPS) if ok(v)), None)


def _largest(high: int, ok) -> int:
    """The largest value in 1..high that is ok (ok is monotone: fewer always fits if more does), or 0."""
    low, best = 1, 0
    while low <= high:
        mid = (low + high) // 2
        if ok(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _role_plan(program: Program, role: Decl) -> RolePlan:
    model = model_of(program, role)
    model_decl = program.models.get(model) if model else None
    root = root_of(program, role)
    colocated = root is not role  # not when it names no colocate, or one that leads nowhere (reported)
    return RolePlan(
        name=role.name,
        kind=role.kind,
        model=model,
        model_path=model_decl.get("path") if model_decl else None,
        pool=role.get("pool"),
        replicas=dp_size(program, role),
        tp=tp_of(role),
        colocate=root.name if colocated else None,
        settings=_settings(program, role, root),
        sequence_parallel=sequence_parallel_of(role),
    )


def _settings(program: Program, role: Decl, root: Decl):
    """The role's resolved settings; None when a value was rejected (the spec has errors, nothing runs)."""
    try:
        return role_settings(program, role, root)
    except InvalidValue:
        return None


def _out_of_devices(role: Decl, plan: RolePlan, pool: _Pool, earlier: list[tuple[int, int]],
                    replica: int) -> Diagnostic:
    """The role's replica `replica` found no node with tp free devices: say where and what to change."""
    tp, replicas, name = plan.tp, role["replicas"], pool.decl.name
    total = pool.nodes * pool.per_node
    mine = earlier + [(tp, replicas)]
    need_total = sum(t * r for t, r in mine)
    alone = _fits(pool.nodes, pool.per_node, [(tp, replicas)])
    held = ", ".join(f"`{r}` holds {t * n}" for r, (t, n) in pool.holders.items())
    last = pool.nodes - 1
    free = [pool.per_node - u for u in pool.used]
    where = (f"pool `{name}` runs out of devices on node {last}"
             + (" (its only node)" if pool.nodes == 1 else f" (its last of {pool.nodes})"))
    need = f"`{role.name}` needs {replicas} replica{'s' * (replicas != 1)} × tp {tp} = {replicas * tp} devices"
    size = f"{total} ({pool.nodes} node{'s' * (pool.nodes != 1)} × {pool.per_node})"
    others = f", of which {held}" if held else ""
    message = (f"{where}: {need}, but " + (f"{held} of its {size}" if alone else f"it has {size}{others}")
               + f"; replica {replica} finds no node with {tp} free device{'s' * (tp != 1)}")
    nodes = _smallest(max(pool.nodes + 1, -(-need_total // pool.per_node)),
                      lambda n: _fits(n, pool.per_node, mine))
    per_node = _smallest(max(pool.per_node + 1, -(-need_total // pool.nodes), tp),
                         lambda d: _fits(pool.nodes, d, mine))
    fewer = _largest(replicas - 1, lambda r: _fits(pool.nodes, pool.per_node, earlier + [(tp, r)]))
    changes = []
    if nodes:
        changes.append(f"raise `nodes` of pool `{name}` from {pool.nodes} to {nodes}")
    if per_node:
        changes.append(f"raise `devices_per_node` from {pool.per_node} to {per_node}")
    if fewer:
        changes.append(f"lower `replicas` of `{role.name}` from {replicas} to {fewer}")
    elif earlier:
        changes.append(f"put `{role.name}` on another pool, or `colocate` it with a role on `{name}`")
    notes = [(f"pool `{name}` has {pool.nodes} node{'s' * (pool.nodes != 1)} × {pool.per_node} devices; before "
              f"`{role.name}`, " + ", ".join(f"node {n} had {f} free" for n, f in enumerate(free)), pool.decl.span)]
    return error("placement" if not alone else "oversubscribed", message, role.span_of("replicas"),
                 ("to fit: " + "; or ".join(changes)) if changes else "",
                 "roles on one pool never share devices; `colocate` shares a role's devices on purpose" if alone else "",
                 label=f"{replicas * tp} devices", notes=notes)


def _place_root(role: Decl, plans: dict[str, RolePlan], pool: _Pool,
                diagnostics: list[Diagnostic]) -> list[Placement]:
    plan = plans[role.name]
    # the replicas it says (the schema fills in 1): the same as plan.replicas, but for a role that also sets
    # `colocate` (an error, reported), whose plan follows the colocation while its pool must fit what it wrote
    tp, replicas = plan.tp, role["replicas"]
    if tp > pool.per_node:
        diagnostics.append(error(
            "placement",
            f"a replica of `{role.name}` needs tp = {tp} devices on one node, but "
            + (f"node 0 of pool `{pool.decl.name}` has {pool.per_node}" if pool.nodes == 1 else
               f"each node of pool `{pool.decl.name}` (0 to {pool.nodes - 1}) has {pool.per_node}"),
            role.span_of("tp"),
            f"lower `tp` of `{role.name}` to {pool.per_node} or less, or raise `devices_per_node` of pool "
            f"`{pool.decl.name}` to {tp}",
            "a tensor-parallel group never spans nodes",
            label=f"tp = {tp} > {pool.per_node}",
            notes=[(f"pool `{pool.decl.name}` has {pool.per_node} devices per node",
                    pool.decl.span_of("devices_per_node"))]))
        return []
    saved = list(pool.used)
    earlier = _demands(pool)
    placements = []
    for replica in range(replicas):
        spot = pool.take(tp)
        if spot is None:
            pool.used, pool.full = saved, 0  # the role is left out whole: later roles see the pool as it was
            diagnostics.append(_out_of_devices(role, plan, pool, earlier, replica))
            return []
        node, first = spot
        placements.append(Placement(role.name, replica, pool.decl.name, node, first,
                                    list(range(first, first + tp)), f"{role.name}/{replica}"))
    pool.holders[role.name] = (tp, replicas)
    return placements


def _demands(pool: _Pool) -> list[tuple[int, int]]:
    """(tp, replicas) of every root already placed on the pool, in placement order."""
    return list(pool.holders.values())


def _place_colocated(role: Decl, plan: RolePlan, root: Decl, root_placements: list[Placement],
                     diagnostics: list[Diagnostic]) -> list[Placement]:
    devices = [(p, d) for p in root_placements for d in p.devices]  # root replica order, then device order
    tp = plan.tp
    if len(devices) % tp:
        diagnostics.append(error(
            "placement",
            f"`{role.name}` has tp = {tp}, which does not divide the {len(devices)} device"
            f"{'s' * (len(devices) != 1)} of `{root.name}` it is colocated with",
            role.span_of("tp"),
            f"make the replicas of `{root.name}` times its tp a multiple of {tp}, or set `tp` of `{role.name}` "
            f"to a divisor of {len(devices)}", label=f"tp = {tp}",
            notes=[(f"`{root.name}` has {len(root_placements)} replica{'s' * (len(root_placements) != 1)}",
                    root.span_of("replicas"))]))
        return []
    placements = []
    for replica in range(len(devices) // tp):
        run = devices[replica * tp:(replica + 1) * tp]
        nodes = sorted({p.node for p, _ in run})
        if len(nodes) > 1:
            diagnostics.append(error(
                "placement",
                f"replica {replica} of `{role.name}` (tp = {tp}) would span nodes {nodes[0]} and {nodes[-1]} of pool "
                f"`{run[0][0].pool}`: its colocation root `{root.name}` changes node inside the run",
                role.span_of("tp"),
                f"give `{root.name}` a multiple of {tp} replicas on each node (e.g. raise `devices_per_node`), "
                f"or lower `tp` of `{role.name}`", label=f"tp = {tp}"))
            return []
        host = run[0][0]
        placements.append(Placement(role.name, replica, host.pool, host.node, run[0][1],
                                    [d for _, d in run], host.process))
    return placements


def _engine_check(program: Program, role: Decl, plan: RolePlan, pools: dict[str, _Pool]) -> list[Diagnostic]:
    engine = role.get("engine")
    facts = engine_facts(engine) if role.kind in ("rollout", "judge") else None
    pool = pools.get(root_of(program, role).get("pool"))
    if facts is None or pool is None:
        return []
    device = pool.settings.device
    if device in facts.devices:
        return []
    runs_on = " or ".join(f"{d.upper()}s" for d in facts.devices)
    via = "" if plan.pool else f" (through `colocate`, it runs on the devices of `{root_of(program, role).name}`)"
    return [error("placement", f"`{role.name}` uses engine `{engine}`, which needs {runs_on}, but pool "
                  f"`{pool.decl.name}` has device = {device}{via}", role.span_of("engine"),
                  f"use `engine = hf` on {device.upper()}, or place the rollout on a pool with "
                  f"`device = {facts.devices[0]}`", label=f"{' or '.join(d.upper() for d in facts.devices)} only",
                  notes=[(f"pool `{pool.decl.name}` is a {device} pool", pool.decl.span_of("device"))])]


def place(program: Program) -> tuple[list[PoolPlan], list[RolePlan], list[Placement], list[Diagnostic]]:
    """Pools, roles and one Placement per role replica, plus the placement diagnostics."""
    diagnostics: list[Diagnostic] = []
    settings = [pool_settings(p) for p in program.pools.values()]  # resolved once: InvalidValue where one is wrong
    pool_plans = [PoolPlan(p.name, p.nodes or _UNSIZED, p.devices_per_node or _UNSIZED, p.device, p.memory)
                  for p in settings]
    pools = {p.name: _Pool(program.pools[p.name], p, [0] * p.nodes) for p in settings
             if p.nodes and p.devices_per_node}
    roles = [r for r in program.roles.values() if r.kind is not None]
    plans = {r.name: _role_plan(program, r) for r in roles}
    by_role: dict[str, list[Placement]] = {}
    for role in roles:  # roots first: colocated roles need their root's devices
        pool = pools.get(plans[role.name].pool)
        if pool is not None:
            by_role[role.name] = _place_root(role, plans, pool, diagnostics)
    for role in roles:
        plan = plans[role.name]
        if plan.pool is not None or plan.colocate is None:  # a root, or a chain that leads to no root
            continue
        root = program.roles[plan.colocate]
        if root.get("colocate") is not None or not by_role.get(root.name):
            continue  # a root that names a colocate itself (a cycle, an unknown role) or an unplaced root: reported
        by_role[role.name] = _place_colocated(role, plan, root, by_role[root.name], diagnostics)
    for role in roles:
        diagnostics += _engine_check(program, role, plans[role.name], pools)
    placements = [p for role in roles for p in by_role.get(role.name, [])]
    return pool_plans, list(plans.values()), placements, diagnostics
