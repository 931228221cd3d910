"""Compilation -> Plan: join placement, schedule, memory, role settings and the step's calls."""

from __future__ import annotations

from rlgraph.compiler import Compilation
from rlgraph.contract.rollouts import trained_generate
from rlgraph.diagnostics import Diagnostic
from rlgraph.lang.program import InvalidValue
from rlgraph.plan.checks import plan_checks
from rlgraph.plan.memory import estimate
from rlgraph.plan.model import CallPlan, Plan
from rlgraph.plan.placement import place
from rlgraph.plan.resolve import (call_settings, data_settings, env_settings, generate_settings, models_settings,
                                  reward_settings, train_settings)
from rlgraph.plan.schedule import schedule
from rlgraph.plan.shape import StepShape, step_shape
from rlgraph.plan.tokenizers import check_tokenizers


def _order(d: Diagnostic):
    return (d.span.file, d.span.line, d.span.column, d.code)


def plan_spec(compilation: Compilation) -> tuple[Plan, list[Diagnostic]]:
    """The Plan, and every diagnostic (the compiler's, then placement's and memory's).

    A spec with errors still gets the plan of what could be planned: a role whose
    placement fails is left out, the rest is placed, scheduled and estimated.
    """
    diagnostics = list(compilation.diagnostics)
    plan = Plan(spec=compilation.path)
    program, graph = compilation.program, compilation.graph
    if program is not None:
        # a step that reads a value the spec wrote wrongly (reported already) is skipped, not computed with a
        # default: `strategy = megatron` is no reason to estimate memory as for ddp
        plan.pools, plan.roles, plan.placements, placed = _unless_invalid(lambda: place(program), ([], [], [], []))
        plan.data = _or_none(lambda: data_settings(program))
        models = models_settings(program)
        plan.memory, estimated = _unless_invalid(
            lambda: estimate(program, plan_step_shape(compilation, plan), models, plan.pools, plan.roles,
                             plan.placements),
            ([], []))
        checked = _unless_invalid(lambda: plan_checks(program, plan.pools, plan.roles, plan.placements,
                                                      diagnostics + placed, models), [])
        diagnostics += placed + estimated + _unless_invalid(lambda: check_tokenizers(program, models), []) + checked
        # a reward, model or env with a wrong value (reported) is left out, as data and train are: shown with the
        # default in its place, it would show settings the user never wrote; a call that names it has none either
        plan.rewards = {name: decl.values.get("fn") for name, decl in program.rewards.items()
                        if "fn" not in getattr(decl.values, "invalid", ())}
        plan.reward_settings = _resolved(program.rewards, lambda decl: reward_settings(decl.values))
        plan.models = {name: model for name, model in models.items() if model is not None}
        plan.envs = _resolved(program.envs, lambda decl: env_settings(program, decl))
        plan.train = _or_none(lambda: train_settings(program))
    if graph is not None:
        plan.schedule, stage_of = schedule(graph, plan.placements)
        roles = {r.name: r.settings for r in plan.roles}
        replicas = {r.name: r.replicas for r in plan.roles}
        generate = trained_generate(graph.calls())  # what log-probs are scored at and mini-batches count
        rollout = _or_none(lambda: generate_settings(generate, roles.get(generate.target), plan.envs)) \
            if generate else None
        plan.calls = [CallPlan(c.id, c.label, c.kind, c.target, c.method, c.role_kind,
                               [list(port) for port in c.inputs], [list(port) for port in c.outputs],
                               stage_of.get(c.id, 0),
                               _or_none(lambda c=c: call_settings(c, roles, replicas, rollout, plan.envs, graph.producer)))
                      for c in graph.calls()]
        plan.syncs = [[s.source, s.target] for s in graph.syncs]
    diagnostics.sort(key=_order)
    plan.diagnostics = [d.to_json() for d in diagnostics]
    return plan, diagnostics


def plan_step_shape(compilation: Compilation, plan: Plan) -> StepShape:
    """The step's shape the memory estimate reads: the compiled graph's calls, the placed roles' settings and
    the data's. InvalidValue where the data block's settings did not resolve (a wrong value, reported)."""
    if compilation.program.data is not None and plan.data is None:
        raise InvalidValue("data")
    return step_shape(compilation.graph, plan.roles, plan.data)


def _or_none(resolve):
    """Resolved settings, or None where they read a value the spec wrote wrongly (InvalidValue: reported by the
    compiler as `wrong-type`; a plan with errors never runs). Nothing else is caught: the resolvers return None
    themselves for what an error elsewhere leaves out (a rollout without settings, an undeclared env), so a
    KeyError or TypeError here is a bug that shows, not a setting that silently goes missing."""
    try:
        return resolve()
    except InvalidValue:
        return None


def _resolved(decls, resolve) -> dict:
    """Name -> resolved settings of the declarations whose settings have no errors."""
    settings = {name: _or_none(lambda decl=decl: resolve(decl)) for name, decl in decls.items()}
    return {name: value for name, value in settings.items() if value is not None}


def _unless_invalid(step, skipped):
    try:
        return step()
    except InvalidValue:
        return skipped


def build_plan(compilation: Compilation) -> Plan:
    return plan_spec(compilation)[0]
