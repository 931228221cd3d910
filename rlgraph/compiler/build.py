"""Program -> StepGraph: resolve every call of the step against roles, rewards and built-ins."""

from __future__ import annotations

import os

from rlgraph.compiler.builtins import (DATA_FIELDS, REWARD_CALL, ROLE_METHODS, TRANSFORMS, Signature, UserFunction,
                                       user_signature)
from rlgraph.compiler.graph import DATA_NODE, CallNode, StepGraph, SyncEdge
from rlgraph.contract.rollouts import FILTER_GROUPS
from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.lang import ast
from rlgraph.lang.program import Decl, Program, Values
from rlgraph.lang.schema import Key, TypeMismatch
from rlgraph.lang.validate import did_you_mean


def user_functions(program: Program) -> dict[str, UserFunction]:
    """The spec's declared transforms and losses, by name."""
    base_dir = os.path.dirname(os.path.abspath(program.path))

    def read(decl: Decl, key: str, empty):  # a wrong value (reported) declares nothing: calls of it are skipped
        return (decl.get(key) or empty) if decl.is_valid(key) else empty

    return {decl.name: UserFunction(decl.name, decl.keyword, read(decl, "fn", ""), tuple(read(decl, "inputs", ())),
                                    tuple(read(decl, "outputs", ())), dict(read(decl, "args", {})), decl.span, base_dir)
            for decl in (*program.transforms.values(), *program.losses.values())}


def _signature(call: ast.Call, program: Program, diagnostics: list[Diagnostic],
               functions: dict[str, UserFunction]):
    """(node kind, role kind, signature) for a call, or None with a diagnostic."""
    if call.method is not None:
        role = program.roles.get(call.target)
        if role is None:
            suggestion = did_you_mean(call.target, program.roles)
            diagnostics.append(error("unknown-role", f"`{call.target}` is not a declared role", call.target_span,
                                     "" if suggestion else "declared roles: " + ", ".join(
                                         f"`{r}`" for r in program.roles), label=suggestion))
            return None
        if role.kind is None:  # its kind was already reported
            return None
        methods = ROLE_METHODS[role.kind]
        if call.method not in methods:
            diagnostics.append(error(
                "unknown-call", f"`{call.target}` is a {role.kind} role and has no call `{call.method}`",
                call.method_span, did_you_mean(call.method, methods),
                f"a {role.kind} role offers: " + ", ".join(f"`{m}`" for m in methods)))
            return None
        return "role", role.kind, methods[call.method]
    if call.target in program.rewards:
        return "reward", None, REWARD_CALL
    if call.target in program.transforms:
        function = functions[call.target]
        if not function.inputs or not function.outputs:  # a wrong or missing declaration, reported already
            return None
        return "transform", None, user_signature(function)
    if call.target in TRANSFORMS:
        return "transform", None, TRANSFORMS[call.target]
    if call.target in program.losses:
        diagnostics.append(error("unknown-call", f"`{call.target}` is a loss: the actor's update calls it",
                                 call.target_span, f"pass it to the update: `actor.update(policy_loss = {call.target})`",
                                 notes=[("declared here", program.losses[call.target].span)]))
        return None
    if call.target in program.roles:
        role = program.roles[call.target]
        methods = ROLE_METHODS.get(role.kind or "", {})
        diagnostics.append(error("unknown-call", f"`{call.target}` is a role: name the call",
                                 call.target_span, "write `" + "`, `".join(f"{call.target}.{m}" for m in methods) + "`"))
        return None
    known = list(program.rewards) + list(program.transforms) + list(TRANSFORMS)
    diagnostics.append(error("unknown-call", f"`{call.target}` is neither a reward nor a transform",
                             call.target_span, did_you_mean(call.target, known),
                             "declare it with `reward NAME { fn = \"module:function\" }` or `transform NAME { fn = "
                             "\"module:function\"  inputs = [...]  outputs = [...] }`, or use one of: "
                             + ", ".join(f"`{t}`" for t in TRANSFORMS)))
    return None


def _declared_loss(kwarg: ast.Assign, program: Program) -> str | None:
    """The declared loss `policy_loss = NAME` names, if it names one."""
    if kwarg.key == "policy_loss" and isinstance(kwarg.value, ast.Ident) and kwarg.value.value in program.losses:
        return kwarg.value.value
    return None


def argument_value(key: Key, kwarg: ast.Assign, program: Program):
    """A call argument's value as the step graph holds it; raises TypeMismatch for a value of the wrong type
    (reported by `_kwargs` as `wrong-type`)."""
    loss = _declared_loss(kwarg, program)
    return loss if loss is not None else key.type.convert(kwarg.value)


def _kwargs(call: ast.Call, signature: Signature, diagnostics: list[Diagnostic], program: Program):
    values = Values({name: key.default for name, key in signature.kwargs.items()})
    spans = {}
    for kwarg in call.kwargs:
        if _declared_loss(kwarg, program) is not None:
            values[kwarg.key], spans[kwarg.key] = kwarg.value.value, kwarg.value.span
            continue
        key = signature.kwargs.get(kwarg.key)
        if key is None:
            allowed = ", ".join(f"`{k}`" for k in signature.kwargs) or "none"
            diagnostics.append(error("unknown-key", f"`{call.label}` takes no argument `{kwarg.key}`",
                                     kwarg.key_span, did_you_mean(kwarg.key, signature.kwargs),
                                     f"allowed: {allowed}"))
            continue
        if kwarg.key in spans:
            diagnostics.append(error("duplicate-name", f"argument `{kwarg.key}` is given twice", kwarg.key_span))
            continue
        try:
            values[kwarg.key] = argument_value(key, kwarg, program)
        except TypeMismatch as exc:
            message, close = str(exc), ""
            if kwarg.key == "policy_loss":  # the name of a declared loss is a value too
                message += (f" or a declared loss: {', '.join(f'`{n}`' for n in program.losses)}" if program.losses
                            else " (or the name of a declared `loss`)")
                close = did_you_mean(str(getattr(kwarg.value, "value", "")), program.losses)
            diagnostics.append(error("wrong-type", f"wrong value for `{kwarg.key}` of `{call.label}`: {message}",
                                     kwarg.value.span, f"`{kwarg.key}`: {key.doc}", label=close))
            values.invalid.add(kwarg.key)  # checks and settings that read it are skipped
            continue
        spans[kwarg.key] = kwarg.value.span
    for name, key in signature.kwargs.items():
        if key.required and name not in spans and not any(k.key == name for k in call.kwargs):
            diagnostics.append(error("missing-key", f"`{call.label}` needs the argument `{name}`", call.span,
                                     f"add `{name} = ...`: {key.doc}"))
    return values, spans


def _ports(flow: ast.Flow, signature: Signature, diagnostics: list[Diagnostic], declared: Span | None = None):
    call = flow.call
    n_in, n_out = len(flow.inputs), len(flow.outputs)
    shape = (", ".join(p.name + ("?" if p.optional else "") for p in signature.inputs) or "nothing") + \
        f" -> {call.label} -> " + (", ".join(p.name for p in signature.outputs) or "nothing")
    ok = True
    notes = [(f"`{call.label}` is declared here", declared)] if declared is not None else []
    if not signature.required_inputs <= n_in <= len(signature.inputs):
        diagnostics.append(error("bad-arguments", f"`{call.label}` takes {_count(signature.required_inputs, len(signature.inputs))} "
                                 f"input field{'s' if len(signature.inputs) != 1 else ''}, got {n_in}",
                                 flow.span, f"write it as `{shape}`", notes=notes))
        ok = False
    if not signature.least_outputs <= n_out <= len(signature.outputs):
        what = "produces nothing" if not signature.outputs else \
            f"produces {_count(signature.least_outputs, len(signature.outputs))} field{'s' if len(signature.outputs) != 1 else ''}"
        diagnostics.append(error("bad-arguments", f"`{call.label}` {what}, but {n_out} are named",
                                 flow.span, f"write it as `{shape}`", notes=notes))
        ok = False
    if not ok:
        return None
    inputs = tuple((port.name, ref.name) for port, ref in zip(signature.inputs, flow.inputs))
    outputs = tuple((port.name, ref.name) for port, ref in zip(signature.outputs, flow.outputs))
    return inputs, outputs


def _count(low: int, high: int) -> str:
    return str(high) if low == high else f"{low} to {high}"


def build_graph(program: Program) -> tuple[StepGraph, list[Diagnostic]]:
    graph = StepGraph()
    diagnostics: list[Diagnostic] = []
    if program.step is None:
        return graph, diagnostics
    seen: dict[str, int] = {}
    functions = user_functions(program)
    for statement in program.step.statements:
        if isinstance(statement, ast.Sync):
            for end in (statement.source, statement.target):
                if end.name not in program.roles:
                    diagnostics.append(error("unknown-role", f"`{end.name}` is not a declared role", end.span,
                                             did_you_mean(end.name, program.roles)))
            graph.syncs.append(SyncEdge(statement.source.name, statement.target.name, statement.span))
            continue
        resolved = _signature(statement.call, program, diagnostics, functions)
        if resolved is None:
            continue
        kind, role_kind, signature = resolved
        kwargs, kwarg_spans = _kwargs(statement.call, signature, diagnostics, program)
        loss = None if "policy_loss" in kwargs.invalid else kwargs.get("policy_loss")
        user = functions.get(statement.call.target) if kind == "transform" else \
            functions[loss] if loss in program.losses else None
        ports = _ports(statement, signature, diagnostics, user.span if user is not None else None)
        if ports is None:
            continue
        label = statement.call.label
        seen[label] = seen.get(label, 0) + 1
        node_id = label if seen[label] == 1 else f"{label}#{seen[label]}"
        field_spans = {ref.name: ref.span for ref in statement.inputs + statement.outputs}
        graph.add_call(CallNode(node_id, label, kind, statement.call.target, statement.call.method, role_kind,
                                ports[0], ports[1], kwargs, statement.call.span, field_spans, kwarg_spans, user))
    producers = graph.producers()
    for node in graph.calls():
        for _, name in node.inputs:
            if name in producers:
                graph.add_flow(producers[name][0].id, node.id, name)
            elif name in DATA_FIELDS:
                graph.add_flow(DATA_NODE, node.id, name)
    _after_filter(graph)
    return graph, diagnostics


def _after_filter(graph: StepGraph) -> None:
    """Every call that `filter_groups` does not depend on runs after it, on the kept prompts only: an ordering
    edge (no field) from the filter to each, so the schedule shows the calls of a generation round apart
    from the rest of the step."""
    if graph.find_cycle():
        return  # reported by the dataflow pass; the order is undefined anyway
    for node in graph.calls():
        if node.kind == "transform" and node.target == FILTER_GROUPS:
            before = graph.upstream(node.id) | {node.id}
            for other in graph.calls():
                if other.id not in before and not graph.g.has_edge(node.id, other.id):
                    graph.g.add_edge(node.id, other.id, kind="order", fields=[])
