"""Fields flow: the step generates, and each field is produced once, used, acyclic, of the kind its consumer takes."""

from __future__ import annotations

from rlgraph.compiler.builtins import DATA_FIELDS
from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import (KIND_NAMES, field_span, quoted, signature_of, tis_reads,
                                             written_flows, written_inputs, written_outputs)
from rlgraph.diagnostics import Diagnostic, Span, error, warning
from rlgraph.lang.program import Program
from rlgraph.lang.validate import did_you_mean


def dataflow(program: Program, graph: StepGraph) -> list[Diagnostic]:
    if program.step is None:
        return _missing_step(program)
    return (_no_generate(program) + _undefined(program, graph) + _produced_twice(graph)
            + _unused(program, graph) + _cycle(graph) + _kinds(graph))


def _missing_step(program: Program) -> list[Diagnostic]:
    lines = program.sources.get(program.path, "").splitlines()
    line = next((i for i, text in enumerate(lines, 1) if text.strip() and not text.lstrip().startswith("#")), 1)
    width = len(lines[line - 1].split("#")[0].rstrip()) if lines else 1
    return [error("missing-block", "the spec has no `step` block",
                  Span(program.path, line, 1, line, 1 + max(width, 1)), "add the dataflow of one training step, e.g. "
                  "`step { prompts -> rollout.generate -> responses  ... }`")]


def _no_generate(program: Program) -> list[Diagnostic]:
    """An RL step generates; a supervised step (`demos -> actor.sft`) trains on the data's responses instead. Not
    both in one step: the batch is either prompts to sample or demonstrations to imitate."""
    flows = written_flows(program)
    generates = [f for f in flows if f.call.method == "generate"]
    sft = [f for f in flows if f.call.method == "sft"]
    if generates and sft:
        return [error("algorithm", "the step both generates and trains on demonstrations (`sft`): a step's batch is "
                      "either prompts to sample from or demonstrations to imitate", sft[0].call.span,
                      "put the SFT stage in a spec of its own and start the RL spec from its run: `model policy { "
                      "path = \"runs/NAME\" }` (docs/spec.md, Stages)", label="SFT beside a generate")]
    if generates or sft:
        return []
    step = program.step.span
    rollouts = [r.name for r in program.roles.values() if r.kind == "rollout"] or ["rollout"]
    return [error("algorithm", "the step never generates: it has no `generate` call",
                  Span(step.file, step.line, step.column, step.line, step.column + len("step")),
                  f"start the step with `prompts -> {rollouts[0]}.generate -> responses`")]


def _undefined(program: Program, graph: StepGraph) -> list[Diagnostic]:
    produced = set(graph.producers()) | set(DATA_FIELDS)
    known = produced | written_outputs(program)  # outputs of calls rejected earlier are not undefined
    rollouts = [r.name for r in program.roles.values() if r.kind == "rollout"] or ["rollout"]
    out = []
    for node in graph.calls():
        signature = signature_of(node)
        port_kinds = {p.name: p.kind for p in signature.inputs} if signature else {}
        for port, name in node.inputs:
            if name in known:
                continue
            hint = (f"responses come from a rollout: `prompts -> {rollouts[0]}.generate -> {name}`"
                    if port_kinds.get(port) == "responses" else
                    "a field is the output of a call of the step, or `prompts` (from the data)")
            out.append(error("undefined-field", f"`{name}` is used by `{node.label}`, but no call produces it",
                             field_span(node, name), hint,
                             label=did_you_mean(name, sorted(produced)) or "never produced"))
    return out


def _produced_twice(graph: StepGraph) -> list[Diagnostic]:
    out = []
    for name, nodes in graph.producers().items():
        if name in DATA_FIELDS:
            for node in nodes:
                out.append(error("duplicate-field", f"`{name}` comes from the data; `{node.label}` cannot produce it",
                                 field_span(node, name), f"name this output of `{node.label}` differently"))
            continue
        first = nodes[0]
        for node in nodes[1:]:
            out.append(error("duplicate-field", f"`{name}` is produced twice, by `{first.label}` and by `{node.label}`",
                             field_span(node, name),
                             "each field of a step is produced once: rename one of them (and its consumers)",
                             label="produced again", notes=[(f"first produced by `{first.label}`",
                                                             field_span(first, name))]))
    return out


def _unused(program: Program, graph: StepGraph) -> list[Diagnostic]:
    used = {name for node in graph.calls() for _, name in node.inputs} | written_inputs(program) | tis_reads(graph)
    misspelled = used - set(graph.producers()) - set(DATA_FIELDS)  # their error already suggests the name
    out = []
    for node in graph.calls():
        signature = signature_of(node)
        unused = [(i, name) for i, (_, name) in enumerate(node.outputs)
                  if name not in used and not any(did_you_mean(m, [name]) for m in misspelled)]
        for index, name in unused:
            if signature is not None and index >= signature.least_outputs:
                hint = f"drop `{name}` from the outputs of `{node.label}`, or use it in a call"
            elif len(unused) == len(node.outputs):
                hint = f"use `{name}` in a call, or remove the call `{node.label}`"
            else:
                hint = f"use `{name}` in a call"
            out.append(warning("unused-field", f"`{name}` is produced by `{node.label}` but never used",
                               field_span(node, name), hint, label="never used"))
    return out


def _cycle(graph: StepGraph) -> list[Diagnostic]:
    path = graph.find_cycle()
    if not path:
        return []
    order = {node.id: i for i, node in enumerate(graph.calls())}
    ring = path[:-1]
    start = min(range(len(ring)), key=lambda i: order.get(ring[i], len(order)))
    ring = ring[start:] + ring[:start]  # start at the call written first (the data node has no inputs)
    labels = [graph.call(n).label for n in ring]
    first, last = graph.call(ring[0]), graph.call(ring[-1])
    closing = graph.g.edges[last.id, first.id]["fields"][0]
    notes = [(f"`{graph.g.edges[u, v]['fields'][0]}` flows from `{graph.call(u).label}` to `{graph.call(v).label}`",
              field_span(graph.call(v), graph.g.edges[u, v]["fields"][0]))
             for u, v in zip(ring, ring[1:])]  # the closing edge is the one pointed at
    return [error("cycle", "the step's dataflow has a cycle: " + " -> ".join(labels + labels[:1]),
                  field_span(first, closing),
                  "each call runs once per step, after the calls that produce its inputs: "
                  "a call cannot consume a field computed from its own output",
                  label=f"produced by `{last.label}`, downstream of this call", notes=notes)]


def _kinds(graph: StepGraph) -> list[Diagnostic]:
    kinds: dict[str, tuple[str, str]] = {name: (kind, "the data") for name, kind in DATA_FIELDS.items()}
    for node in graph.calls():
        signature = signature_of(node)
        if signature is not None:
            for port, (_, name) in zip(signature.outputs, node.outputs):
                kinds.setdefault(name, (port.kind, f"`{node.label}`"))
    out = []
    for node in graph.calls():
        signature = signature_of(node)
        if signature is None:
            continue
        for port, (_, name) in zip(signature.inputs, node.inputs):
            if name not in kinds or kinds[name][0] == port.kind:
                continue
            have, source = kinds[name]
            later = {f for n in graph.downstream(node.id) | {node.id} for _, f in graph.call(n).outputs}
            fitting = [f for f, (kind, _) in kinds.items() if kind == port.kind and f not in later]
            hint = (f"`{node.label}` takes {KIND_NAMES[port.kind]} there, such as {quoted(fitting[:4])}"
                    if fitting else f"`{node.label}` takes {KIND_NAMES[port.kind]} there")
            out.append(error("field-type", f"`{node.label}` expects {KIND_NAMES[port.kind]} as `{port.name}`, "
                             f"but `{name}` holds {KIND_NAMES[have]} (from {source})", field_span(node, name), hint,
                             label=KIND_NAMES[have]))
    return out
