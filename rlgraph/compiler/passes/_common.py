"""Small helpers the passes share. Not a pass: nothing here is listed in PASSES.

Passes look at the step's text (`program.step`) as well as at the graph, so that a
call the builder rejected (already reported) does not cause a second, confusing
report: a field that a rejected call produces is not "undefined", a role that a
rejected call names is not "unused".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rlgraph.compiler.builtins import REWARD_CALL, ROLE_METHODS, TRANSFORMS, Signature, user_signature
from rlgraph.compiler.graph import CallNode, StepGraph
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang import ast
from rlgraph.lang.program import Program

KIND_NAMES = {"prompts": "prompts", "responses": "generated responses", "token": "per-token values",
              "demos": "demonstrations (the data's prompts with their responses)",
              "top_k": "a teacher's top-k next-token log-probs (from `TEACHER.top_k`)"}


def signature_of(node: CallNode) -> Signature | None:
    if node.kind == "transform":
        return user_signature(node.user) if node.user is not None else TRANSFORMS.get(node.target)
    if node.kind == "reward":
        return REWARD_CALL
    return ROLE_METHODS.get(node.role_kind or "", {}).get(node.method or "")


def written_flows(program: Program) -> list[ast.Flow]:
    """Every flow the step's text writes, whether or not it became a call of the graph."""
    if program.step is None:
        return []
    return [s for s in program.step.statements if isinstance(s, ast.Flow)]


def written_inputs(program: Program) -> set[str]:
    return {ref.name for flow in written_flows(program) for ref in flow.inputs}


def written_outputs(program: Program) -> set[str]:
    return {ref.name for flow in written_flows(program) for ref in flow.outputs}


def written_calls(program: Program, target: str, method: str | None = None) -> list[ast.Flow]:
    return [f for f in written_flows(program)
            if f.call.target == target and (method is None or f.call.method == method)]


def quoted(names: Iterable[str]) -> str:
    """`a`, `b` and `c`."""
    items = [f"`{n}`" for n in names]
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def names_python_object(text: str) -> bool:
    """`package.module:name` or verl's file form `path/to/file.py:name` (only the name is checked in a path);
    the name may be dotted (`module:Outer.inner`). Checked as text: nothing is imported."""
    module, _, attr = text.rpartition(":")
    names = attr.split(".") if module.endswith(".py") else module.split(".") + attr.split(".")
    return bool(module and attr) and all(part.isidentifier() for part in names)


def field_span(node: CallNode, name: str):
    return node.field_spans.get(name, node.span)


def expect_producer(graph: StepGraph, node: CallNode, port: str, wanted: str,
                    accept: Callable[[CallNode], bool], hint: str) -> list[Diagnostic]:
    """The field on `port` of `node` must come from a call that `accept`s; nothing when it is undefined
    or comes from the data (the dataflow pass reports those)."""
    name = node.input(port)
    producer = graph.producer(name) if name is not None else None
    if producer is None or accept(producer):
        return []
    return [error("algorithm", f"`{node.label}` needs {wanted} as `{port}`, but `{name}` comes from "
                  f"`{producer.label}`", field_span(node, name), hint, label=f"from `{producer.label}`",
                  notes=[(f"`{name}` is produced by `{producer.label}`", field_span(producer, name))])]


def is_call(role_kind: str, method: str, target: str | None = None) -> Callable[[CallNode], bool]:
    """A predicate: the call is `method` of a role of `role_kind` (of the role `target`, if given)."""
    return lambda n: (n.kind == "role" and n.role_kind == role_kind and n.method == method
                      and (target is None or n.target == target))


def kept_log_probs(graph: StepGraph) -> list[tuple[CallNode, str]]:
    """(generate call, field) for each generate that keeps its samples' log-probs (`-> responses, NAME`)."""
    return [(call, name) for call in graph.calls() if is_call("rollout", "generate")(call)
            for port, name in call.outputs if port == "log_prob"]


def tis_reads(graph: StepGraph) -> set[str]:
    """The kept log-probs that an `actor.update(tis = ...)` reads from the rollout, without naming them."""
    if not any(is_call("actor", "update")(call) and (call.kwargs.get("tis") or "off") != "off"
               for call in graph.calls()):
        return set()
    return {name for _, name in kept_log_probs(graph)}


# The advantage estimators: the transforms whose first output is `advantages`.
ESTIMATORS = tuple(name for name, sig in TRANSFORMS.items() if sig.outputs and sig.outputs[0].name == "advantages")


def is_estimator(node: CallNode) -> bool:
    """A built-in estimator, or a user transform declared with `advantages` as its first output."""
    if node.kind != "transform":
        return False
    return node.user.outputs[:1] == ("advantages",) if node.user is not None else node.target in ESTIMATORS


def samples_per_prompt(program: Program, generate: CallNode) -> int:
    """The `n` of a generate call: its own argument, else its rollout's."""
    if generate.kwargs.get("n") is not None:
        return generate.kwargs["n"]
    role = program.roles.get(generate.target)
    return role.get("n", 1) if role is not None else 1
