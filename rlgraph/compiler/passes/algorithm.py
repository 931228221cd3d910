"""The algorithm holds together: estimators get what they need, KL has a reference, weights reach the rollout."""

from __future__ import annotations

from rlgraph.compiler.builtins import GROUP_ESTIMATORS
from rlgraph.compiler.graph import CallNode, StepGraph, SyncEdge
from rlgraph.compiler.passes._common import expect_producer, is_call, is_estimator, quoted, samples_per_prompt
from rlgraph.compiler.topology import model_of, root_of
from rlgraph.contract.methods import TRAINING_METHODS
from rlgraph.contract.rollouts import FILTER_GROUPS, trained_generate
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang import ast
from rlgraph.lang.program import Decl, Program


def algorithm(program: Program, graph: StepGraph) -> list[Diagnostic]:
    critic = next((r.name for r in program.roles.values() if r.kind == "critic"), "critic")
    out: list[Diagnostic] = []
    for node in graph.calls():
        if node.kind != "transform":
            continue
        if node.target == "gae":
            out += expect_producer(graph, node, "values", "the values of a critic", is_call("critic", "values"),
                                   f"pass the output of `responses -> {critic}.values -> values`, or use an "
                                   "estimator without a critic, such as `grpo_advantage`")
        if node.target in GROUP_ESTIMATORS or node.target == FILTER_GROUPS:
            out += _group_size(program, graph, node)
        if node.target == "kl_penalty":
            out += _kl_inputs(program, graph, node)
        if node.target == "distill_advantage":
            out += _distill_inputs(program, graph, node)
    return out + _one_estimator(graph) + _syncs(program, graph) + _missing_syncs(program, graph)


def _group_size(program: Program, graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    """`node` compares the samples of one prompt: the trained rollout's `n` (the call's own, else its role's)."""
    call = trained_generate(graph.calls())
    role = program.roles.get(call.target) if call is not None else None
    if role is None or call.id not in graph.upstream(node.id):
        return []
    own = call.kwargs.get("n") is not None  # `generate(n = ...)` of this call
    n = samples_per_prompt(program, call)
    if n >= 2:
        return _greedy_group(node, role, call)
    defaulted = not own and not role.is_set("n")
    where = f"`{call.label}`" if own else f"rollout `{role.name}`"
    if node.target in GROUP_ESTIMATORS:
        # a group of one keeps its raw score (mean 0, std 1: verl's rule), so the step trains, without a baseline
        return [warning(
            "single-sample-group", f"`{node.label}` compares the samples of each prompt, but {where} draws only "
            f"{n} sample per prompt" + (" (`n` defaults to 1)" if defaulted else "")
            + ": each advantage is its raw score, with no baseline (as verl does with a group of one)",
            call.kwarg_spans["n"] if own else role.span_of("n"),
            (f"add `n = 4` (or more) to role `{role.name}`" if defaulted else "set n = 4 or more")
            + " to compare a prompt's samples",
            label=f"{n} sample per prompt", notes=[(f"`{node.label}` is called", node.span)])]
    return [error(
        "algorithm", f"`{node.label}` compares the samples of each prompt, but {where} draws only "
        f"{n} sample per prompt" + (" (`n` defaults to 1)" if defaulted else ""),
        call.kwarg_spans["n"] if own else role.span_of("n"),
        (f"add `n = 4` (or more) to role `{role.name}`" if defaulted else "set n = 4 or more")
        + ": a group needs at least 2 samples of one prompt",
        label=f"{n} sample per prompt", notes=[(f"`{node.label}` is called", node.span)])]


def _greedy_group(node: CallNode, role: Decl, call: CallNode) -> list[Diagnostic]:
    # Greedy decoding gives one answer n times: each sample equals its group's mean, so no advantage is non-zero.
    own = call.kwargs.get("temperature") is not None
    temperature = call.kwargs["temperature"] if own else role.get("temperature", 1.0)
    if temperature != 0:
        return []
    n = call.kwargs.get("n") or role.get("n", 1)
    return [warning(
        "greedy-group", f"`{node.label}` compares the samples of each prompt, but "
        f"{f'`{call.label}`' if own else f'rollout `{role.name}`'} decodes "
        f"greedily (temperature = 0): its {n} samples of a prompt are the same, so every "
        "advantage is zero and the policy never learns",
        call.kwarg_spans["temperature"] if own else role.span_of("temperature"),
        "set temperature = 1.0 (or anything above 0) so that the samples of a prompt differ",
        label="greedy: every sample alike", notes=[(f"`{node.label}` is called", node.span)])]


def _kl_inputs(program: Program, graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    actor, model = _actor_and_model(program)
    return _frozen_and_actor(program, graph, node, "ref_log_prob", "a reference policy", "reference", "policy",
                             f"declare a reference policy, e.g. `role ref {{ model = {model}  colocate = {actor} }}`, "
                             "and pass the output of `responses -> ref.log_prob -> ref_log_prob`")


def _distill_inputs(program: Program, graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    """The teacher is a `ref` role: a frozen model scored by the trainer's forward pass, as a reference is."""
    actor, _ = _actor_and_model(program)
    return _frozen_and_actor(program, graph, node, "teacher_log_prob", "a teacher (a `ref` role)", "teacher",
                             "student", f"declare the teacher as a frozen role, e.g. `role teacher {{ kind = ref  "
                             f"model = TEACHER_MODEL  colocate = {actor} }}`, and pass the output of `responses -> "
                             "teacher.log_prob -> teacher_log_prob`")


def _actor_and_model(program: Program) -> tuple[str, str]:
    actors = [r for r in program.roles.values() if r.kind == "actor"]
    return (actors[0].name if actors else "actor"), ((model_of(program, actors[0]) if actors else None) or "...")


def _frozen_and_actor(program: Program, graph: StepGraph, node: CallNode, port: str, frozen: str, who: str,
                      trained: str, declare_hint: str) -> list[Diagnostic]:
    """`node` compares a frozen role's log-probs (on `port`) with the actor's (on `log_prob`): kl_penalty against
    a reference, distill_advantage against a teacher. Both must be the trainer's forward passes: `actor.update`
    takes the rollout's kept log-probs because there they are what they are, the behaviour policy's, but a
    rollout engine's numbers differ from the trainer's, and the comparison would charge that to the policy."""
    refs = [r.name for r in program.roles.values() if r.kind == "ref"]
    actor, _ = _actor_and_model(program)
    kept = _from_generate(graph, node.input("log_prob"))
    why = (f"; the {who}'s log-probs come from the trainer's forward pass, and a rollout engine's from its own "
           f"kernels and precision, so the comparison would charge their difference to the {trained} even where "
           f"the {trained} equals the {who} (`actor.update` accepts kept log-probs as the behaviour policy's: that "
           "is what they are)")
    return (expect_producer(graph, node, port, f"the log-probs of {frozen}", is_call("ref", "log_prob"),
                            f"pass the output of `responses -> {refs[0]}.log_prob -> {port}`" if refs else declare_hint)
            + expect_producer(graph, node, "log_prob", "the log-probs of an actor", is_call("actor", "log_prob"),
                              f"pass the output of `responses -> {actor}.log_prob -> old_log_prob`" + why * kept))


def _from_generate(graph: StepGraph, name: str | None) -> bool:
    producer = graph.producer(name) if name is not None else None
    return producer is not None and is_call("rollout", "generate")(producer)


def _one_estimator(graph: StepGraph) -> list[Diagnostic]:
    estimators = [n for n in graph.calls() if is_estimator(n)]
    return [error("algorithm", f"the step computes advantages twice, with {quoted([estimators[0].label, node.label])}",
                  node.span, "keep one advantage estimator per step",
                  notes=[(f"`{estimators[0].label}` is called", estimators[0].span)])
            for node in estimators[1:]]


def _written_sync(program: Program, edge: SyncEdge) -> ast.Sync | None:
    statements = program.step.statements if program.step else ()
    return next((s for s in statements if isinstance(s, ast.Sync) and s.span == edge.span), None)


def _syncs(program: Program, graph: StepGraph) -> list[Diagnostic]:
    actors = [r.name for r in program.roles.values() if r.kind == "actor"] or ["actor"]
    rollouts = [c.target for c in graph.generate_calls()] or ["rollout"]
    out = []
    for edge in graph.syncs:
        source, target = program.roles.get(edge.source), program.roles.get(edge.target)
        written = _written_sync(program, edge)
        if source is None or target is None or written is None:
            continue  # an unknown role, already reported
        if source.kind not in (None, "actor"):
            out.append(error("bad-sync", f"`{source.name}` is a {source.kind} role: only an actor's weights are synced "
                             "to a rollout", written.source.span, f"sync from the actor that `{target.name}` generates "
                             f"for, e.g. `sync {actors[0]} -> {target.name}`"))
        if target.kind not in (None, "rollout"):
            out.append(error("bad-sync", f"`{target.name}` is a {target.kind} role: a sync goes to a rollout",
                             written.target.span, f"sync to the rollout that generates, e.g. `sync {source.name} -> "
                             f"{rollouts[0]}`"))
        if source.kind != "actor" or target.kind != "rollout":
            continue
        source_model, target_model = model_of(program, source), model_of(program, target)
        if source_model is not None and target_model is not None and source_model != target_model:
            out.append(error("bad-sync", f"`{source.name}` trains model `{source_model}`, but rollout `{target.name}` "
                             f"holds model `{target_model}`", edge.span,
                             f"a sync copies weights into the same model: set `model = {source_model}` on "
                             f"`{target.name}`, or colocate it with `{source.name}`",
                             notes=[(f"`{target.name}` holds `{target_model}`", target.span_of("model"))]))
    return out


def _missing_syncs(program: Program, graph: StepGraph) -> list[Diagnostic]:
    """An updated actor must reach the rollout that generates its training data: by a sync, or in place."""
    out = []
    for update in graph.calls():
        actor = program.roles.get(update.target)
        if update.method not in TRAINING_METHODS or update.role_kind != "actor" or actor is None:
            continue
        upstream = graph.upstream(update.id)
        for call in graph.generate_calls():
            rollout = program.roles.get(call.target)
            if call.id not in upstream or rollout is None:
                continue
            model = model_of(program, actor)
            if model is None or model != model_of(program, rollout):
                continue  # a different model: a sync is no fix (and a sync to it is reported as bad)
            if any(e.source == actor.name and e.target == rollout.name for e in graph.syncs):
                continue
            if root_of(program, rollout).name == root_of(program, actor).name:
                continue  # colocated: the rollout reads the actor's weights in place
            out.append(warning(
                "missing-sync", f"`{actor.name}` trains on responses from rollout `{rollout.name}`, but nothing syncs "
                f"its new weights to `{rollout.name}`", call.span, f"add `sync {actor.name} -> {rollout.name}` to the "
                f"step; without it `{rollout.name}` keeps generating with the initial weights of `{model}`",
                label="generates with stale weights", notes=[(f"`{actor.name}` is updated", update.span)]))
    return out
