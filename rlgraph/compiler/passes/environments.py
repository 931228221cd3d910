"""Declared environments (`env NAME { class = ... }`) and the generate calls that use them (`generate(env = NAME)`).

Checked as text, never imported (`run`'s pre-flight imports the class and checks its interface): the class names a
Python class, each generate names a declared env, each env is used, and one environment reply fits in the
response budget it shares with the model's turns (the rollout's max_new_tokens). An env on a rollout that runs
ahead (train.staleness > 0) is fine: an episode is one sample, generated with one policy version.
"""

from __future__ import annotations

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import names_python_object, written_flows
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang import ast
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.validate import did_you_mean


def environments(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for env in program.envs.values():
        cls = env.get("class") or ""
        if env.is_set("class") and not names_python_object(cls):
            out.append(error("wrong-type", f"`{cls}` does not name a Python class", env.span_of("class"),
                             'write `class = "package.module:Class"` or `class = "path/to/file.py:Class"`'))
    used = _envs_written(program)
    for env in program.envs.values():
        if program.step is not None and env.name not in used:
            out.append(warning("unused-env", f"env `{env.name}` is declared, but no generate call uses it", env.span,
                               f"use it: `prompts -> ROLLOUT.generate(env = {env.name}) -> responses`, or remove it"))
    for call in graph.generate_calls():
        name = call.kwargs.get("env")
        if name is None:
            continue
        env = program.envs.get(name)
        if env is None:
            declared = ", ".join(f"`{n}`" for n in program.envs)
            out.append(error("unknown-env", f"`{name}` is not a declared env", call.kwarg_spans.get("env", call.span),
                             f"declared envs: {declared}" if declared else
                             f'declare it: `env {name} {{ class = "package.module:Class" }}`',
                             label=did_you_mean(name, program.envs)))
            continue
        rollout = program.roles.get(call.target)
        if rollout is not None and rollout.kind == "rollout":
            out += _budget(env, rollout)
    return out


def _envs_written(program: Program) -> set[str]:
    """Every env a flow of the step's text names, whether or not the call was built (a rejected call was reported)."""
    return {kwarg.value.value for flow in written_flows(program) for kwarg in flow.call.kwargs
            if kwarg.key == "env" and isinstance(kwarg.value, ast.Ident)}


def _budget(env: Decl, rollout: Decl) -> list[Diagnostic]:
    """With an env, max_new_tokens is the whole response: the model's turns and the environment's replies."""
    reply, budget = env.get("max_observation_tokens"), rollout.get("max_new_tokens")
    if not isinstance(reply, int) or not isinstance(budget, int) or reply < budget:
        return []
    return [warning(
        "env-budget", f"env `{env.name}` may reply with up to max_observation_tokens = {reply} tokens, but "
        f"`{rollout.name}` has max_new_tokens = {budget} for the whole response (the model's turns and the "
        "environment's replies): one reply could take all of it", env.span_of("max_observation_tokens"),
        f"set `max_observation_tokens` of `{env.name}` below {budget}, e.g. {max(budget // 4, 1)}, or raise "
        f"max_new_tokens of `{rollout.name}`", label=f">= max_new_tokens = {budget}",
        notes=[(f"max_new_tokens of `{rollout.name}`", rollout.span_of("max_new_tokens"))])]
