"""What an out-of-memory error says: the biggest real cause first, then only changes that were checked to fit.

Each candidate change is applied to a copy of the spec's declarations, resolved into settings and the whole
estimate (placement, engines, memory) is run again, with the compiler's rules that read what it sets (memory.fit_test,
without compiling again); a change is printed only when the pool then fits and those rules find no new error, the
smallest change first (one setting before two, cheap settings before costly ones).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from rlgraph.contract.engines import engine_facts
from rlgraph.lang.program import Program
from rlgraph.plan.model import MemoryRow, RolePlan
from rlgraph.plan.placement import place
from rlgraph.plan.shape import StepShape
from rlgraph.plan.view import format_bytes

TRAINED = ("actor", "critic")
MAX_FIXES = 3


def first_cause(program: Program, row: MemoryRow, capacity: int, roles: dict[str, RolePlan]) -> tuple[str, str]:
    """A sentence naming the role that holds the most on `row`, in what it is made of; and that role's name."""
    by_role: dict[str, dict[str, int]] = {}
    for key, size in row.breakdown.items():
        name, _, item = key.partition("/")
        by_role.setdefault(name, {})[item] = size
    name = max(by_role, key=lambda n: sum(by_role[n].values()))
    items, role, plan = by_role[name], program.roles.get(name), roles.get(name)
    total = sum(items.values())
    over = f", more than the device's {format_bytes(capacity)}" if total > capacity else ""
    if role is not None and role.kind in TRAINED:
        state = {k: v for k, v in items.items() if k in ("params", "adapters", "grads", "optimizer",
                                                         "optimizer_step")}
        # the gradients exist during the update only; while another call peaks they are as large as the fp32
        # weights that train (the adapters of a LoRA actor)
        grads = state.get("grads", state.get("adapters", state.get("params", 0)))
        size = sum(state.values()) + (grads if "grads" not in state else 0)
        settings = plan.settings if plan is not None else None
        sharded = getattr(settings, "strategy", None) == "fsdp" and plan.replicas > 1
        over = f", more than the device's {format_bytes(capacity)}" if size > capacity else ""
        if getattr(settings, "lora", None) is not None:  # LoraSettings only for a rank > 0
            what = f"`{name}`'s frozen weights and its adapters' training state are {format_bytes(size)} a device"
        else:
            what = (f"`{name}`'s training state alone is 16 bytes per parameter (4 fp32 weights + 4 grads + 8 AdamW) "
                    f"= {format_bytes(size)}" + (f" a device, sharded over {plan.replicas}" if sharded
                                                 else " on every device"))
        rest = {k: v for k, v in items.items() if k not in state and v}
        if rest:
            what += "; with " + " and ".join(f"{k} {format_bytes(v)}" for k, v in rest.items())
        return what + over, name
    if role is not None and role.kind == "rollout" and "kv_pool" in items and plan is not None and plan.settings:
        return (f"`{name}` ({plan.settings.engine}) takes memory_fraction {plan.settings.memory_fraction:g} of the "
                f"device: {format_bytes(total)} for its weights and KV pool{over}"), name
    parts = " + ".join(f"{k} {format_bytes(v)}" for k, v in sorted(items.items(), key=lambda kv: -kv[1]) if v)
    return f"`{name}` holds the most: {parts}{over}", name


@dataclasses.dataclass(frozen=True)
class Change:
    text: str  # as a user writes it: "`strategy = fsdp` on `actor`"
    edits: tuple[tuple[str, str, str, object], ...]  # (block: role | pool, name, key, value)
    cost: int  # cheaper first among changes of as many settings


def _candidates(program: Program, pool: str, step: StepShape) -> list[Change]:
    """The changes to try on `pool`, from the settings its roles resolve to (a role whose settings did not
    resolve, a wrong value reported by the compiler, is offered none)."""
    pool_plans, role_plans, _, _ = place(program)
    plans = {r.name: r for r in role_plans}
    roles = [plans[name] for name in program.roles  # in the spec's order: the order of equal-cost fixes
             if name in plans and _root(plans[name], plans).pool == pool and plans[name].settings is not None]
    decl = next(p for p in pool_plans if p.name == pool)
    out: list[Change] = []
    for role in roles:
        n, s = role.name, role.settings
        if role.kind in TRAINED + ("ref", "reward_model"):
            out += _token_budgets(step, role)
        if role.kind in TRAINED:
            micro = s.micro_batch
            if micro and micro > 1:
                for smaller in sorted({max(1, micro // 4), max(1, micro // 2)}, reverse=True):
                    out.append(Change(f"`micro_batch = {smaller}` on `{n}`", (("role", n, "micro_batch", smaller),), 0))
            if not s.gradient_checkpointing:
                out.append(Change(f"`gradient_checkpointing = true` on `{n}`",
                                  (("role", n, "gradient_checkpointing", True),), 1))
            replicas = _dp(role, plans)
            if s.strategy == "ddp" and replicas > 1:
                out.append(Change(f"`strategy = fsdp` on `{n}` (its state divided over {replicas} devices)",
                                  (("role", n, "strategy", "fsdp"),), 3))
            if not s.optimizer_offload and not s.param_offload:
                out.append(Change(f"`optimizer_offload = true` on `{n}` (AdamW's 8 bytes a parameter on the host)",
                                  (("role", n, "optimizer_offload", True),), 4))
            if not s.param_offload and replicas > 1:
                fsdp = () if s.strategy == "fsdp" else (("role", n, "strategy", "fsdp"),)
                out.append(Change(f"`param_offload = true`{' and `strategy = fsdp`' * bool(fsdp)} on `{n}`",
                                  fsdp + (("role", n, "param_offload", True),), 5))
        elif role.kind == "rollout" and engine_facts(s.engine).paged:
            fraction = s.memory_fraction
            for lower in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2):
                if lower < fraction:
                    out.append(Change(f"`memory_fraction = {lower}` on `{n}`", (("role", n, "memory_fraction", lower),),
                                      0))
        elif role.kind == "rollout":  # hf: the KV cache of the sequences it generates at once
            out += _generation_limits(step, role, plans)
        elif role.kind in ("ref", "reward_model"):
            if role.dtype_label == "fp32":
                out.append(Change(f"`dtype = bf16` on `{n}`", (("role", n, "dtype", "bf16"),), 2))
            if role.kind == "ref" and not s.param_offload:
                out.append(Change(f"`param_offload = true` on `{n}`", (("role", n, "param_offload", True),), 4))
    nodes, per_node = decl.nodes, decl.devices_per_node
    for times in (2, 4, 8):  # the fewest devices that fit; replicas grow with them
        grow = ("devices_per_node", per_node * times) if per_node * times <= 8 else ("nodes", nodes * times)
        edits = (("pool", pool) + grow,) + tuple(("role", r.name, "replicas", times * r.replicas)
                                                for r in roles if r.pool == pool)
        out.append(Change(f"`{grow[0]} = {grow[1]}` on pool `{pool}` ({times} times the devices and replicas)",
                          edits, 6))
    return out


def _token_budgets(step: StepShape, role: RolePlan) -> list[Change]:
    """Token budgets (verl's use_dynamic_bsz) of a few rows of full length each, largest first: they bound a
    micro-batch's working memory whatever the rows' lengths. One replaces the role's micro_batch."""

    length = step.length
    budget, micro = role.settings.micro_batch_tokens, role.settings.micro_batch
    below = budget if budget else length * (micro or 10**6)
    instead = f"; instead of `micro_batch = {micro}`" if micro and not budget else ""
    unset = (("role", role.name, "micro_batch", None),) if micro and not budget else ()
    return [Change(f"`micro_batch_tokens = {rows * length}` on `{role.name}` ({rows} row{'s' * (rows > 1)} of "
                   f"{length} tokens a pass{instead})",
                   unset + (("role", role.name, "micro_batch_tokens", rows * length),), 1 if unset else 0)
            for rows in (64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1) if rows * length < below]


def _generation_limits(step: StepShape, role: RolePlan, plans: dict[str, RolePlan]) -> list[Change]:
    """Scheduler limits for an hf rollout (`max_sequences`: the batch generated in chunks), largest first: its
    KV cache is that of one chunk. Each chunk is a pass of its own, so a smaller one costs generation time."""

    at_once = -(-(step.batch or 0) * step.n // max(_dp(role, plans), 1))
    limit = role.settings.max_sequences or at_once
    out, size = [], at_once // 2
    while size >= 1:
        if size < limit:
            out.append(Change(f"`max_sequences = {size}` on `{role.name}` (the batch generated {size} sequences at "
                              "a time)", (("role", role.name, "max_sequences", size),), 0))
        size //= 2
    return out


def verified_fixes(program: Program, pool: str, fits: Callable[[Program, str], bool], step: StepShape) -> list[str]:
    """Changes that make `pool` fit when the estimate is run again on them, smallest first."""
    return [f"fits with {change.text}" for change in verified_changes(program, pool, fits, step)]


def verified_changes(program: Program, pool: str, fits: Callable[[Program, str], bool],
                     step: StepShape) -> list[Change]:
    """verified_fixes as Changes, whose edits `rlgraph plan --fit` writes into the spec (`step`: the step's
    shape, shape.step_shape)."""
    candidates = _candidates(program, pool, step)
    found: list[Change] = []
    seen_roles_keys: set[tuple] = set()
    for change in sorted(candidates, key=lambda c: c.cost):
        key = tuple((block, name, k) for block, name, k, _ in change.edits)
        if key in seen_roles_keys:  # the largest micro-batch / memory fraction that fits is enough
            continue
        if fits(_apply(program, change.edits), pool):
            found.append(change)
            seen_roles_keys.add(key)
    if not found:  # two changes together
        for a, b in itertools.combinations(sorted(candidates, key=lambda c: c.cost), 2):
            keys = frozenset(e[:3] for e in a.edits + b.edits)
            if {e[:3] for e in a.edits} & {e[:3] for e in b.edits} or keys in seen_roles_keys:
                continue  # the same two settings again: the first (largest) values that fit are enough
            if fits(_apply(program, a.edits + b.edits), pool):
                found.append(Change(f"{a.text} and {b.text}", a.edits + b.edits, a.cost + b.cost))
                seen_roles_keys.add(keys)
            if len(found) >= MAX_FIXES:
                break
    return found[:MAX_FIXES]


def _apply(program: Program, edits) -> Program:
    roles, pools = dict(program.roles), dict(program.pools)
    for block, name, key, value in edits:
        table = roles if block == "role" else pools
        decl = table[name]
        table[name] = dataclasses.replace(decl, values={**decl.values, key: value})
    return dataclasses.replace(program, roles=roles, pools=pools)


def _root(role: RolePlan, plans: dict[str, RolePlan]) -> RolePlan:
    """The role whose devices `role` runs on (itself when it has a pool of its own)."""
    return plans.get(role.colocate, role) if role.colocate else role


def _dp(role: RolePlan, plans: dict[str, RolePlan]) -> int:
    """The data-parallel size a role's state would be sharded over: its root's devices (replicas x tp)."""
    root = _root(role, plans)
    return root.replicas * root.tp
