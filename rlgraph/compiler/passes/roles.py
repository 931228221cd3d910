"""Roles do their part: each trained role can train (not in fp16), is updated once, from the right inputs, and each
declared role is called."""

from __future__ import annotations

from rlgraph.compiler.graph import CallNode, StepGraph
from rlgraph.compiler.passes._common import (expect_producer, field_span, is_call, is_estimator, kept_log_probs,
                                             written_calls)
from rlgraph.contract.methods import TRAINING_METHODS
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.schema import TRAINED_KINDS

_UPDATE_EXAMPLE = {"actor": "old_log_prob, advantages -> {}.update", "critic": "values, returns -> {}.update"}
_CALL_EXAMPLE = {"rollout": "prompts -> {}.generate -> responses", "ref": "responses -> {}.log_prob -> ref_log_prob",
                 "reward_model": "responses -> {}.score -> scores", "judge": "responses -> {}.score -> scores"}


def roles(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out = [d for role in program.roles.values() for d in _trainable_dtype(role)]
    if program.step is None:  # reported by the dataflow pass; every role would look unused
        return out
    for role in program.roles.values():
        out += _updated_once(program, graph, role) + _called(program, role)
    for node in graph.calls():
        if node.method == "update" and node.role_kind == "actor":
            out += _actor_update(program, graph, node)
        elif node.method == "update" and node.role_kind == "critic":
            out += _critic_update(graph, node)
    return out


def _trainable_dtype(role: Decl) -> list[Diagnostic]:
    if role.kind not in TRAINED_KINDS or role.get("dtype") != "fp16":
        return []
    return [error("untrainable-dtype", f"{role.kind} `{role.name}` cannot train in fp16: without loss scaling its "
                  "gradients flush to zero and AdamW's eps (1e-8) underflows to 0, so the weights turn inf/NaN",
                  role.span_of("dtype"), "set `dtype = bf16` (fp32 master weights, bf16 compute) or `dtype = fp32`; "
                  "frozen roles (ref, reward_model, rollout) may stay fp16", label="fp16 cannot train")]


def _updated_once(program: Program, graph: StepGraph, role: Decl) -> list[Diagnostic]:
    if role.kind not in TRAINED_KINDS:
        return []
    if not any(written_calls(program, role.name, m) for m in TRAINING_METHODS):
        frozen = ("declare it as a `ref` role if it should stay frozen" if role.kind == "actor"
                  else "remove the critic if the step does not use values")
        return [error("not-updated", f"{role.kind} `{role.name}` is trained, but the step never updates it",
                      role.span, f"add `{_UPDATE_EXAMPLE[role.kind].format(role.name)}` to the step, or {frozen}")]
    updates = [n for m in TRAINING_METHODS for n in graph.role_calls(role.name, m)]
    return [error("duplicate-update", f"`{role.name}` is updated more than once in one step", node.span,
                  f"merge the updates into one `{role.name}.{updates[0].method}`; `epochs = 2` passes over the "
                  "batch twice",
                  notes=[("first updated", updates[0].span)]) for node in updates[1:]]


def _called(program: Program, role: Decl) -> list[Diagnostic]:
    if role.kind is None or role.kind in TRAINED_KINDS or written_calls(program, role.name):
        return []  # an uncalled trained role is reported as not updated
    return [warning("unused-role", f"{role.kind} role `{role.name}` is declared, but the step never calls it",
                    role.span, f"call it, e.g. `{_CALL_EXAMPLE[role.kind].format(role.name)}`, or remove it")]


def _actor_update(program: Program, graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    actor = node.target
    refs = [r.name for r in program.roles.values() if r.kind == "ref"] or ["ref"]
    synced = {edge.target for edge in graph.syncs if edge.source == actor}

    def own_log_probs(call: CallNode) -> bool:
        # recomputed by the actor, or kept by a rollout that samples from the actor's synced weights
        return is_call("actor", "log_prob", actor)(call) or (is_call("rollout", "generate")(call)
                                                              and call.target in synced)

    out = expect_producer(graph, node, "old_log_prob", f"the log-probs of `{actor}` itself", own_log_probs,
                          f"pass the output of `responses -> {actor}.log_prob -> old_log_prob`, or keep them "
                          f"from a rollout synced from `{actor}`: `generate -> responses, old_log_prob`")
    out += expect_producer(graph, node, "advantages", "the output of an advantage estimator", is_estimator,
                           "pass the `advantages` of an estimator such as `gae` or `grpo_advantage`, or of a "
                           "`transform` declared with `outputs = [advantages, ...]`")
    out += expect_producer(graph, node, "ref_log_prob", "the log-probs of a reference policy",
                           is_call("ref", "log_prob"),
                           f"pass the output of `responses -> {refs[0]}.log_prob -> ref_log_prob`")
    kl_coef, ref_log_prob = node.kwargs.get("kl_coef") or 0.0, node.input("ref_log_prob")
    if kl_coef > 0 and ref_log_prob is None:
        made = [name for call in graph.calls() if is_call("ref", "log_prob")(call) for _, name in call.outputs]
        inputs = [name for _, name in node.inputs] + (made or ["ref_log_prob"])[:1]
        out.append(error("algorithm",
                         f"`{node.label}` has a KL loss (kl_coef = {kl_coef:g}) but no `ref_log_prob` input",
                         node.kwarg_spans.get("kl_coef", node.span),
                         f"pass the reference log-probs as a third input: `{', '.join(inputs)} -> {node.label}(...)`, "
                         "or set kl_coef = 0"))
    if kl_coef == 0 and ref_log_prob is not None:
        out.append(warning("ignored-input",
                           f"`{node.label}` ignores `{ref_log_prob}`: its KL loss is off (kl_coef = 0)",
                           field_span(node, ref_log_prob),
                           f"turn the KL loss on, e.g. `{node.label}(kl_coef = 0.001)`, or drop the input",
                           label="ignored"))
    return out + _tis(graph, node)


def _tis(graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    """TIS weighs by pi_old / mu: it needs mu (the log-probs generate keeps) and is a no-op when pi_old is mu."""
    tis = node.kwargs.get("tis") or "off"
    generates = [call for call in graph.calls() if is_call("rollout", "generate")(call)]
    if tis == "off" or not generates:  # a step that never generates is reported by the dataflow pass
        return []
    span = node.kwarg_spans.get("tis", node.span)
    kept = kept_log_probs(graph)
    if not kept:
        generate = generates[0]
        return [error("algorithm", f"`{node.label}` has tis = {tis}, which weighs each sample by the rollout's "
                      f"sampling log-probs, but `{generate.label}` does not keep them", span,
                      f"keep them as a second output: `prompts -> {generate.label} -> {generate.outputs[0][1]}, "
                      "rollout_log_prob`, or set tis = off", label="needs the rollout's log-probs")]
    old_log_prob = node.input("old_log_prob")
    for generate, name in kept:
        if name == old_log_prob:
            actor = node.target
            return [warning("no-effect", f"tis = {tis} has no effect: old_log_prob is `{name}`, the rollout's "
                            "own sampling log-probs, so every importance weight pi_old / pi_rollout is 1", span,
                            f"recompute old_log_prob with the trainer, `responses -> {actor}.log_prob -> "
                            f"old_log_prob`, and keep the rollout's as `{generate.outputs[0][1]}, rollout_log_prob`; "
                            "or set tis = off", label="every weight is 1",
                            notes=[(f"`{name}` is kept by `{generate.label}`", field_span(generate, name))])]
    return []


def _critic_update(graph: StepGraph, node: CallNode) -> list[Diagnostic]:
    critic = node.target
    out = expect_producer(graph, node, "values", f"the values of `{critic}` itself",
                          is_call("critic", "values", critic),
                          f"pass the output of `responses -> {critic}.values -> values`")
    out += expect_producer(graph, node, "returns", "the returns of an advantage estimator", is_estimator,
                           "pass the `returns` of `gae` (rewards, values -> gae -> advantages, returns)")
    return out
