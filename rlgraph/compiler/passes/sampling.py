"""Several generate calls, dynamic sampling and overlong shaping hold together.

- Every role call of a step reads one rollout, the *trained* one (rlgraph/contract/rollouts.py): two generate
  calls that both feed role calls are an error. The other generate calls are side generations (ReMax's greedy
  answer): one row per prompt and sample of their own, so what is computed from them may only enter a transform
  as a baseline (`remax_advantage`'s `baselines`), never as a per-sample value of the trained rollout.
- `filter_groups` (DAPO's dynamic sampling) splits the step: the calls it depends on run once per generation
  round, the rest once on the kept prompts (an update, which produces nothing, is always among the rest). The step
  has one filter and one generate call, and trains synchronously (a refill draws prompts the next step's
  generation would have had).
- `overlong_penalty`'s buffer fits in the trained generate's max_new_tokens.
"""

from __future__ import annotations

from rlgraph.compiler.graph import CallNode, StepGraph
from rlgraph.compiler.passes._common import field_span, quoted
from rlgraph.contract.rollouts import FILTER_GROUPS, generate_calls, trained_generate, trained_generates
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Program

BASELINE_PORTS = {("remax_advantage", "baselines")}


def sampling(program: Program, graph: StepGraph) -> list[Diagnostic]:
    if graph.find_cycle():
        return []  # reported by the dataflow pass; upstream sets are meaningless
    return _one_trained(graph) + _side_values(graph) + _filters(program, graph) + _overlong(program, graph)


def _one_trained(graph: StepGraph) -> list[Diagnostic]:
    trained = trained_generates(graph.calls())
    readers = {name: node for node in graph.calls() if node.kind == "role" and node.method != "generate"
               for _, name in node.inputs}
    out = []
    for call in trained[1:]:
        name = next(name for _, name in call.outputs if name in readers)
        first = next(name for _, name in trained[0].outputs if name in readers)
        out.append(error(
            "several-rollouts", f"role calls read the output of `{trained[0].id}` and of `{call.id}`, but every "
            "role call of a step trains on one rollout", field_span(readers[name], name),
            f"let the role calls read only `{trained[0].id}`'s output; a second generate may feed rewards, e.g. a "
            "baseline: `greedy -> REWARD -> greedy_scores` then `scores, greedy_scores -> remax_advantage`",
            label=f"from `{call.id}`",
            notes=[(f"`{readers[first].label}` reads `{first}` of `{trained[0].id}`", field_span(readers[first], first))]))
    return out


def _side_origin(graph: StepGraph, node: CallNode, name: str, side: set[str]) -> str | None:
    """The side generate call that the field `name` (an input of `node`) is computed from, if any."""
    producer = graph.producer(name)
    if producer is None:
        return None
    found = (graph.upstream(producer.id) | {producer.id}) & side
    return sorted(found)[0] if found else None


def _side_values(graph: StepGraph) -> list[Diagnostic]:
    trained = trained_generate(graph.calls())
    side = {g.id for g in generate_calls(graph.calls()) if g is not trained}
    out = []
    for node in graph.calls():
        if node.kind != "transform":
            continue
        for port, name in node.inputs:
            origin = _side_origin(graph, node, name, side) if side else None
            baseline = (node.target, port) in BASELINE_PORTS
            if origin is not None and not baseline:
                out.append(error(
                    "algorithm", f"`{node.label}` takes a value per sample of the trained rollout as `{port}`, but "
                    f"`{name}` is computed from the responses of `{origin}`, a second generate call", field_span(node, name),
                    f"a second generate's rows are its own prompts x n; use them as a baseline: `..., {name} -> "
                    "remax_advantage -> advantages`", label=f"from `{origin}`"))
            elif baseline and origin is None and trained is not None and graph.producer(name) is not None:
                out.append(error(
                    "algorithm", f"`{node.label}` takes the score of a baseline answer as `{port}`, but `{name}` is "
                    f"computed from the trained responses of `{trained.id}`", field_span(node, name),
                    f"generate the baseline answer with a second call, e.g. `prompts -> {trained.target}.generate(n = 1, "
                    f"temperature = 0) -> greedy` and `greedy -> REWARD -> greedy_scores`", label="not a baseline"))
    return out


def _filters(program: Program, graph: StepGraph) -> list[Diagnostic]:
    filters = [n for n in graph.calls() if n.kind == "transform" and n.target == FILTER_GROUPS]
    if not filters:
        return []
    first = filters[0]
    out = [error("dynamic-sampling", "the step filters its groups twice", node.span, "keep one `filter_groups`",
                 notes=[("first filtered here", first.span)]) for node in filters[1:]]
    generates = generate_calls(graph.calls())
    if len(generates) > 1:
        out.append(error(
            "dynamic-sampling", f"`filter_groups` drops prompts, but the step generates {len(generates)} times "
            f"({quoted(g.id for g in generates)}): this runtime refills only a step with one generate call",
            first.span, "drop `filter_groups` or the second generate call",
            notes=[(f"`{g.id}`", g.span) for g in generates]))
    train = program.train
    staleness = train.get("staleness", 0) if train is not None else 0
    if staleness:
        out.append(error(
            "dynamic-sampling", f"`filter_groups` draws more prompts while the step runs, but train.staleness = "
            f"{staleness} generates the next steps' prompts ahead of it", first.span,
            "set `train.staleness = 0` (dynamic sampling trains synchronously here), or drop `filter_groups`",
            notes=[("asynchronous here", train.span_of("staleness"))]))
    return out


def _overlong(program: Program, graph: StepGraph) -> list[Diagnostic]:
    trained = trained_generate(graph.calls())
    role = program.roles.get(trained.target) if trained is not None else None
    longest = role.get("max_new_tokens") if role is not None else None
    out = []
    for node in graph.calls():
        buffer = node.kwargs.get("buffer") if node.kind == "transform" and node.target == "overlong_penalty" else None
        if isinstance(buffer, int) and isinstance(longest, int) and buffer > longest:
            out.append(error(
                "wrong-type", f"`{node.label}` penalises the last buffer = {buffer} tokens before max_new_tokens, but "
                f"`{role.name}` generates at most {longest}", node.kwarg_spans.get("buffer", node.span),
                f"use a buffer of at most {longest} (DAPO: a quarter of the response length, e.g. "
                f"{max(longest // 4, 1)})", label=f"> max_new_tokens = {longest}",
                notes=[(f"max_new_tokens of `{role.name}`", role.span_of("max_new_tokens"))]))
    return out
