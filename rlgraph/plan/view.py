"""Read-only views of a Plan that the text, dot and html renderers share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlgraph.contract.settings import EnvSettings
from rlgraph.plan.model import DRIVER, MemoryRow, Placement, Plan

# One colour per role kind (and for the driver's calls), used by every renderer.
KIND_COLORS = {
    "actor": "#3b6fb6",
    "critic": "#e07b24",
    "rollout": "#3f9b4a",
    "ref": "#8e5ea2",
    "reward_model": "#cf4a4a",
    "judge": "#b8447a",
    "reward": "#c49a12",
    "transform": "#5f6b7a",
    "data": "#8a8f98",
}


def format_bytes(n: float | None) -> str:
    """1.5 GiB, 80 GiB, 312 KiB, 12 B ('unknown' for None)."""
    if n is None:
        return "unknown"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            value = n / size
            text = f"{value:.1f}" if value < 100 else f"{value:.0f}"
            return f"{text.removesuffix('.0')} {unit}"
    return f"{int(n)} B"


DATA = "data"  # the source node of the fields that come from the data
DATA_FIELDS = ("prompts",)


def flows(plan: Plan) -> list[tuple[str, str, str]]:
    """(producer call id, consumer call id, field) for every field that flows; `data` for the data's fields."""
    producer: dict[str, str] = {}
    for call in plan.calls:
        for _, name in call.outputs:
            producer.setdefault(name, call.id)
    out = []
    for call in plan.calls:
        for _, name in call.inputs:
            if name in producer:
                out.append((producer[name], call.id, name))
            elif name in DATA_FIELDS:
                out.append((DATA, call.id, name))
    return out


def device_id(pool: str, node: int, device: int) -> str:
    """A stable id for a device: `<pool>/<node>/<device>` (also the html element's data-device)."""
    return f"{pool}/{node}/{device}"


def span_text(devices: list[int]) -> str:
    return f"d{devices[0]}" if len(devices) == 1 else f"d{devices[0]}–{devices[-1]}"


def role_kinds(plan: Plan) -> dict[str, str]:
    return {r.name: r.kind for r in plan.roles}


def call_color(plan: Plan, call) -> str:
    if call.kind == "role":
        return KIND_COLORS.get(call.role_kind or "", KIND_COLORS["transform"])
    return KIND_COLORS[call.kind] if call.kind in KIND_COLORS else KIND_COLORS["transform"]


@dataclass
class DeviceView:
    pool: str
    node: int
    device: int
    kind: str  # cpu | gpu
    memory: MemoryRow | None
    processes: dict[str, list[Placement]] = field(default_factory=dict)  # process -> role replicas on this device

    @property
    def id(self) -> str:
        return device_id(self.pool, self.node, self.device)

    @property
    def fraction(self) -> float | None:
        if self.memory is None or not self.memory.capacity_bytes:
            return None
        return self.memory.estimated_bytes / self.memory.capacity_bytes


def devices(plan: Plan) -> list[DeviceView]:
    """Every device of every pool, in order, with the processes and role replicas on it."""
    rows = {(m.pool, m.node, m.device): m for m in plan.memory}
    views = {}
    for pool in plan.pools:
        for node in range(pool.nodes):
            for device in range(pool.devices_per_node):
                views[pool.name, node, device] = DeviceView(pool.name, node, device, pool.device,
                                                            rows.get((pool.name, node, device)))
    for p in plan.placements:
        for d in p.devices:
            view = views.get((p.pool, p.node, d))
            if view is not None:
                view.processes.setdefault(p.process, []).append(p)
    return list(views.values())


def peak(plan: Plan) -> MemoryRow | None:
    """The fullest device: highest share of capacity where known, else most bytes."""
    if not plan.memory:
        return None
    return max(plan.memory, key=lambda m: (m.capacity_bytes is not None and m.estimated_bytes / m.capacity_bytes,
                                           m.estimated_bytes))


def call_where(plan: Plan) -> dict[str, str]:
    """Call id -> where it runs, in words: `driver`, or the processes of its role (`actor/0–7`)."""
    processes: dict[str, list[str]] = {}
    for p in plan.placements:
        if p.process not in processes.setdefault(p.role, []):
            processes[p.role].append(p.process)
    out = {}
    for call in plan.calls:
        if call.kind != "role":
            out[call.id] = DRIVER
            continue
        procs = processes.get(call.target)
        out[call.id] = _process_range(procs) if procs else "not placed"
    return out


def _process_range(procs: list[str]) -> str:
    roots = {p.rsplit("/", 1)[0] for p in procs}
    if len(procs) == 1 or len(roots) != 1:
        return ", ".join(procs) if len(procs) <= 3 else f"{procs[0]} … {procs[-1]} ({len(procs)})"
    numbers = [int(p.rsplit("/", 1)[1]) for p in procs]
    root = roots.pop()
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{root}/{numbers[0]}–{numbers[-1]}"
    return f"{root}/" + ",".join(map(str, numbers))


def pools_text(plan: Plan) -> str:
    """`16 devices in 3 pools (actor_gpus 2×4, critic_gpus 2×2, reward_gpus 2×2)` (nodes × devices per node).

    Pools are counted in their own nodes: two pools may share physical machines
    (Ray packs them), so their nodes are not added up.
    """
    n = sum(p.nodes * p.devices_per_node for p in plan.pools)
    devices = f"{n} device{'s' * (n != 1)}"
    if len(plan.pools) == 1:
        p = plan.pools[0]
        return f"{devices} (pool {p.name}: {p.nodes} node{'s' * (p.nodes != 1)} × {p.devices_per_node} {p.device})"
    if 1 < len(plan.pools) <= 4:
        return f"{devices} in {len(plan.pools)} pools (" + ", ".join(
            f"{p.name} {p.nodes}×{p.devices_per_node}" for p in plan.pools) + ")"
    return f"{devices} in {len(plan.pools)} pools"


def summary(plan: Plan) -> str:
    """`16 devices in 2 pools (...); 5 roles; 11 calls in 6 stages; peak 61.2 GiB / 80 GiB per device`."""
    parts = [pools_text(plan),
             f"{len(plan.roles)} role{'s' * (len(plan.roles) != 1)}",
             f"{len(plan.calls)} call{'s' * (len(plan.calls) != 1)} in {len(plan.schedule)} "
             f"stage{'s' * (len(plan.schedule) != 1)}"]
    if plan.train is not None and plan.train.steps is None:  # train.epochs: `run` counts the steps from the data
        parts.append(f"epochs = {plan.train.epochs} (steps counted when the data is loaded)")
    top = peak(plan)
    if top is not None:
        capacity = f" / {format_bytes(top.capacity_bytes)}" if top.capacity_bytes else ""
        parts.append(f"peak {format_bytes(top.estimated_bytes)}{capacity} per device")
    return "; ".join(parts)


def counts(plan: Plan) -> tuple[int, int]:
    errors = sum(d["severity"] == "error" for d in plan.diagnostics)
    return errors, len(plan.diagnostics) - errors


@dataclass
class Pipeline:
    """Asynchronous training (train.staleness > 0) as two loops: what each runs and where they meet."""

    staleness: int
    rollout_calls: list[str]  # the generate call: batch t+1 .. t+k, with the weights the rollout has
    trainer_stages: list[int]  # the stages after it: batch t
    meet: list[str]  # lines: the batch one way, the weights the other


def pipeline(plan: Plan) -> Pipeline | None:
    if plan.train is None or not plan.train.staleness:
        return None
    k = plan.train.staleness
    generate = [c.id for c in plan.calls if c.kind == "role" and c.method == "generate"]
    stages = [s.stage for s in plan.schedule if not set(s.calls) <= set(generate)]
    meet = [f"batch: the rollout hands each generated batch to the trainer; it generates up to {k} batch"
            f"{'es' * (k != 1)} ahead, so a sample is at most {k} update{'s' * (k != 1)} old"]
    meet += [f"weights: sync {a} → {b} as soon as each update ends; the rollout loads them between batches"
             for a, b in plan.syncs]
    return Pipeline(k, generate, stages, meet)


@dataclass
class EnvView:
    """A declared environment as the plan shows it: what it is, its limits, the calls that use it and where
    their episodes run."""

    name: str
    cls: str
    limits: str  # `up to 3 turns · replies cut at 64 tokens · 10 s per call · tool format auto`
    failures: str  # what a failed episode costs, and the share of them that stops the run
    calls: list[str]  # `rollout.generate(env = calc)`
    where: str  # `4 processes per rollout process (actor/0–1), on its host`; `unused` when no call uses it


def env_of(call):
    """The environment (EnvSettings) a generate call runs its episodes with, or None (one turn)."""
    return getattr(call.settings, "env", None) if call.method == "generate" else None


def environments(plan: Plan) -> list[EnvView]:
    """Every declared environment, in declaration order."""
    where = call_where(plan)
    out = []
    for env in plan.envs.values():
        calls = [c for c in plan.calls if env_of(c) is not None and env_of(c).name == env.name]
        limits = (f"up to {env.max_turns} turn{'s' * (env.max_turns != 1)} · replies cut at "
                  f"{env.max_observation_tokens} tokens · {env.timeout_s:g} s per call · "
                  f"tool format {env.tool_format}")
        failures = ("a failed episode scores 0 and is left out of the loss; the run stops above "
                    f"{100 * env.max_failed_fraction:g}% failed in a step")
        hosts = sorted({where.get(c.id, "?") for c in calls})
        runs = (f"{env.workers} process{'es' * (env.workers != 1)} per rollout process ({', '.join(hosts)}), on its "
                "host") if calls else "unused"
        # a plan with errors is still shown: an env without a class (reported) has none
        out.append(EnvView(env.name, env.cls or "—", limits, failures, [f"{c.id}(env = {env.name})" for c in calls], runs))
    return out


def call_notes(plan: Plan) -> dict[str, str]:
    """Call id -> what the schedule says of it beyond its name: a generate call's episodes with an environment."""
    out = {}
    for call in plan.calls:
        env = env_of(call)
        if env is not None:
            out[call.id] = (f"multi-turn: up to {env.max_turns} turn{'s' * (env.max_turns != 1)} with env {env.name} "
                            f"({env.workers} process{'es' * (env.workers != 1)})")
    return out


def call_arguments(plan: Plan, call) -> dict[str, Any]:
    """The keyword arguments the spec gave the call, read off its typed settings (the Plan's one representation
    of a call), in its signature's order: `gae(gamma = 1.0, lam = 0.95)`, `rollout.generate(n = 1,
    temperature = 0.0)`. Defaults are shown as values; left out are those unset (None) and those the call takes
    from its role (a keyword the signature leaves unset whose value is the role's setting of that name: a
    generate's `n`, a forward pass's `micro_batch`), as the spec did not write them on the call. `clip` shows as
    the `clip_low` and `clip_high` it resolves to; a declared transform's are its `args`; an environment is named."""
    from rlgraph.compiler.builtins import ROLE_METHODS, TRANSFORMS  # the spec language's signatures

    settings = call.settings
    if settings is None:
        return {}
    if call.kind == "transform" and call.target not in TRANSFORMS:  # a declared transform
        return {name: value for name, value in getattr(settings, "args", {}).items() if value is not None}
    signature = ROLE_METHODS.get(call.role_kind or "", {}).get(call.method or "") if call.kind == "role" else \
        TRANSFORMS.get(call.target)
    role = next((r.settings for r in plan.roles if r.name == call.target), None) if call.kind == "role" else None
    out: dict[str, Any] = {}
    for name, key in (signature.kwargs.items() if signature is not None else ()):
        value = getattr(settings, name, None)
        inherited = key.default is None and role is not None and getattr(role, name, None) == value
        if value is not None and not inherited:
            out[name] = value.name if isinstance(value, EnvSettings) else value
    return out
