"""Checks that need what only the plan knows: a model's attention shape (config.json) and the placements.

- A rollout's `tp` shards the attention heads over its devices, so it must divide them. The engines
  (vLLM, SGLang) shard the key/value heads too, or replicate them when tp is a multiple of their count.
  (tp within one node is placement's check.)
- A rollout's `max_new_tokens` must fit in its model's context (config.json's max_position_embeddings) after a
  prompt of at least one token: a longer response can never be generated, and the engine would size its cache
  for it (max_new_tokens = 10**9 passed `check` and asked for a 256 GB allocation).
- Devices that no role holds cost as much as busy ones: a warning, as a smaller pool or more replicas
  may be what was meant.
"""

from __future__ import annotations

from pathlib import Path

from rlgraph.compiler.topology import model_of, tp_of
from rlgraph.contract.settings import ModelSettings
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang.program import Decl, Program
from rlgraph.plan.memory import model_shape
from rlgraph.plan.model import Placement, PoolPlan, RolePlan
from rlgraph.plan.resolve import model_of_settings


def plan_checks(program: Program, pools: list[PoolPlan], roles: list[RolePlan], placements: list[Placement],
                earlier: list[Diagnostic], models: dict[str, ModelSettings | None]) -> list[Diagnostic]:
    """`pools`, `roles`, `placements`: what placement made; `earlier`: the compiler's and placement's
    diagnostics; `models`: the models' settings (resolve.models_settings).

    The tp and context checks read each role's tp, model and max_new_tokens from its declaration, not from
    `roles`: those are empty when placement was skipped for a wrong pool value, which is no reason to skip
    checks that do not depend on pools (and a rollout whose other settings are wrong is still checked)."""
    out = []
    for role in program.roles.values():
        out += _tp_heads(program, role, models)
        out += _context_length(program, role, models)
    if not any(d.is_error for d in earlier):  # a misnamed pool or an unplaced role would leave devices "idle"
        out += _idle_devices(program, pools, roles, placements)
    return out


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _tp_heads(program: Program, role: Decl, models: dict[str, ModelSettings | None]) -> list[Diagnostic]:
    tp, name = tp_of(role), model_of(program, role)
    if tp == 1:
        return []
    model = model_of_settings(models, name)  # read only for tp > 1: a wrong value in it skips the checks then
    if model is None:
        return []
    shape = model_shape(model, Path(program.path).parent)
    heads, kv_heads = shape.heads, shape.kv_heads
    decl = program.models[name]  # where its keys are written
    source = decl.span_of("heads") if model.heads is not None else decl.span_of("path")
    where = {"config.json": " (its config.json)", "builtin": " (built in)"}.get(shape.source, "")
    note = [(f"model `{name}` has {heads} attention heads and {kv_heads} key/value heads{where}", source)]
    if heads and heads % tp:
        return [error("tp-heads", f"`{role.name}` has tp = {tp}, which does not divide the {heads} attention heads "
                      f"of model `{name}`", role.span_of("tp"),
                      f"set `tp` to a divisor of {heads}: {_divisors(heads)}",
                      "each of the tp devices holds an equal share of the heads",
                      label=f"{heads} heads / tp {tp}", notes=note)]
    if kv_heads and (kv_heads % tp if tp <= kv_heads else tp % kv_heads):
        return [error("tp-heads", f"`{role.name}` has tp = {tp}, which neither divides nor is a multiple of the "
                      f"{kv_heads} key/value heads of model `{name}`", role.span_of("tp"),
                      f"set `tp` to a divisor of {kv_heads} ({_divisors(kv_heads)}) or a multiple of it that "
                      f"divides the {heads} attention heads",
                      "each device holds an equal share of the key/value heads, or one copy of one of them",
                      label=f"{kv_heads} key/value heads / tp {tp}", notes=note)]
    return []


def _context_length(program: Program, role: Decl, models: dict[str, ModelSettings | None]) -> list[Diagnostic]:
    name = model_of(program, role) if role.kind == "rollout" else None
    model = model_of_settings(models, name)
    if model is None:
        return []
    shape = model_shape(model, Path(program.path).parent)
    tokens, positions = role["max_new_tokens"], shape.max_positions  # the schema fills in its default
    if not isinstance(positions, int) or tokens < positions:
        return []
    where = {"config.json": "its config.json", "builtin": "built in"}.get(shape.source, shape.source)
    return [error("context-length", f"`{role.name}` has max_new_tokens = {tokens}, more than model `{name}` can hold "
                  f"after a prompt: it reads at most {positions} positions (max_position_embeddings, {where})",
                  role.span_of("max_new_tokens"),
                  f"set `max_new_tokens` to at most {positions - 1}, and `data.max_prompt_length` so that the two "
                  f"add up to {positions} or less", label=f"the model's context is {positions} tokens",
                  notes=[(f"model `{name}` is declared here", program.models[name].span_of("path"))])]


def _idle_devices(program: Program, pools: list[PoolPlan], roles: list[RolePlan],
                  placements: list[Placement]) -> list[Diagnostic]:
    """Run only on a spec without errors: every pool has its size (no missing `nodes`, no placeholder)."""
    out = []
    for pool in pools:
        nodes, per_node, span = pool.nodes, pool.devices_per_node, program.pools[pool.name].span
        used = {(p.node, d) for p in placements if p.pool == pool.name for d in p.devices}
        total, idle = nodes * per_node, nodes * per_node - len(used)
        if idle <= 0:
            continue
        roots = [r.name for r in roles if r.pool == pool.name]
        if not roots:
            out.append(warning("idle-devices", f"no role uses pool `{pool.name}`: its {total} device"
                               f"{'s' * (total != 1)} sit{'s' * (total == 1)} idle", span,
                               "place a role on it (`pool = ...`), or remove the pool",
                               label=f"{total} idle"))
            continue
        held = ", ".join(f"`{r}` holds {sum(len(p.devices) for p in placements if p.role == r)}" for r in roots)
        out.append(warning(
            "idle-devices", f"pool `{pool.name}` has {total} device{'s' * (total != 1)}, but its roles use "
            f"{len(used)} ({held}): {idle} device{'s' * (idle != 1)} sit{'s' * (idle == 1)} idle", span,
            f"raise `replicas` of a role on `{pool.name}` to use them, or shrink the pool "
            f"(`nodes`, `devices_per_node`) to {len(used)} device{'s' * (len(used) != 1)}",
            label=f"{idle} of {total} idle"))
    return out
