"""Batch arithmetic, verl users' most common confusion: a step's samples split evenly at every level.

`data.batch_size` counts prompts; the step's rollout draws `n` samples of each, so
a step has batch_size·n samples, spread over each role's data-parallel replicas
(generation spreads the prompts). An update's `minibatch` counts prompts, like
verl's ppo_mini_batch_size; a role's `micro_batch` counts samples per device per
forward pass, like verl's *_micro_batch_size_per_gpu, and its `micro_batch_tokens`
is a token budget per pass instead, like verl's *_max_token_len_per_gpu.

With `sequence_parallel = k` (Ulysses, verl's ulysses_sequence_parallel_size) each group of k replicas takes
the same samples, every device a 1/k slice of each sequence: the samples split over replicas / k groups
(verl's dp = world / sp), `micro_batch` counts samples per group, and a token budget per device holds
k times its tokens per group (verl: max_token_len = ppo_max_token_len_per_gpu x sp).

Every rule reads a role through its resources (topology.RoleResources: replicas, tp, micro-batch, ...), never
its declaration: the pass reads them off the spec, and the planner checks a change of them (`plan --fit`'s
candidates, rlgraph/plan/memory.py fit_test) with `batch_rules` on the resolved settings, without compiling again.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd

from rlgraph.compiler.graph import CallNode, StepGraph
from rlgraph.compiler.passes._common import quoted, samples_per_prompt
from rlgraph.compiler.topology import RoleResources, data_groups, declared_resources
from rlgraph.contract.methods import TRAINING_METHODS
from rlgraph.contract.rollouts import trained_generate
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.schema import ROLE_KEYS

SUGGESTED_MICRO_BATCH = 8  # samples per device per pass that the hint suggests (or the largest divisor below)


def batch(program: Program, graph: StepGraph) -> list[Diagnostic]:
    return batch_rules(program, graph, declared_resources(program))


def batch_rules(program: Program, graph: StepGraph, roles: Mapping[str, RoleResources]) -> list[Diagnostic]:
    """The batch arithmetic of the step of `graph` with the roles' resources `roles` (by name). `program` gives
    only what no resource changes: the data block, the trained rollout's `n` and `max_new_tokens`."""
    generate = trained_generate(graph.calls())
    prompts = program.data.get("batch_size") if program.data is not None else None
    sft = any(node.method == "sft" for node in graph.calls())
    if (generate is None and not sft) or not isinstance(prompts, int) or prompts < 1:
        return []  # no data or no rollout: reported by other passes
    rollout = program.roles.get(generate.target) if generate is not None else None
    # the trained rollout's: what every role call after it gets; SFT: one demonstration per row
    n = samples_per_prompt(program, generate) if generate is not None else 1
    out = _sequence_groups(graph, roles)
    if out:
        return out  # the groups do not tile the replicas: no share below is what it would be
    out = _over_replicas(program, graph, roles, prompts, n)
    for node in graph.calls():
        role = roles.get(node.target) if node.kind == "role" else None
        if node.method in TRAINING_METHODS and role is not None and role.kind is not None:
            out += _update(node, role, prompts, n)
    return (out + _unset_micro_batch(graph, roles, prompts, n)
            + _token_budget(program, graph, roles, rollout))


def _sequence_groups(graph: StepGraph, roles: Mapping[str, RoleResources]) -> list[Diagnostic]:
    """`sequence_parallel` groups the role's replicas: it must divide them."""
    out = []
    for name in dict.fromkeys(node.target for node in graph.calls() if node.kind == "role"):
        role = roles.get(name)
        if role is None or role.kind is None:
            continue
        sp, replicas = role.sequence_parallel, role.replicas
        if replicas % sp:
            fits = [d for d in range(sp - 1, 0, -1) if replicas % d == 0][:1] + \
                [d for d in range(sp + 1, replicas + 1) if replicas % d == 0][:1]
            out.append(error("batch-divisibility", f"sequence_parallel = {sp} does not divide the {replicas} "
                             f"replicas of `{name}`", role.decl.span_of("sequence_parallel"),
                             f"each group of sequence_parallel replicas shares its sequences (verl needs the world "
                             f"size divisible by ulysses_sequence_parallel_size): use {_either(fits)}",
                             label=f"{replicas} replicas / {sp}"))
    return out


def _groups_words(role: RoleResources, dp: int) -> str:
    """`the 8 data-parallel replicas`, or with sequence parallelism `the 4 data-parallel groups (8 replicas /
    sequence_parallel = 2)`."""
    sp = role.sequence_parallel
    if sp == 1:
        return f"the {dp} data-parallel replica{'s' * (dp != 1)}"
    return (f"the {dp} data-parallel group{'s' * (dp != 1)} ({role.replicas} replicas / "
            f"sequence_parallel = {sp})")


def _over_replicas(program: Program, graph: StepGraph, roles: Mapping[str, RoleResources], prompts: int,
                   n: int) -> list[Diagnostic]:
    """Every role called in the step gets an equal share: of the prompts (a rollout) or of the samples.

    Roles on the same devices with the same data-parallel size are reported together."""
    groups: dict[tuple[int, str], list[RoleResources]] = {}
    for name in dict.fromkeys(node.target for node in graph.calls() if node.kind == "role"):
        role = roles.get(name)
        if role is None or role.kind is None:
            continue
        dp = data_groups(role)
        if (prompts if role.kind == "rollout" else prompts * n) % dp:
            groups.setdefault((dp, role.root), []).append(role)
    out = []
    for (dp, root), together in groups.items():
        by_prompt = any(r.kind == "rollout" for r in together)  # the stricter: whole prompts per replica
        total = prompts if by_prompt else prompts * n
        multiple = dp if by_prompt else dp // gcd(dp, n)
        what = f"{prompts} prompts per step" if by_prompt else f"{prompts} prompts × n={n} = {total} samples per step"
        examples = _either(_multiples_near(prompts, multiple))
        change = f"use a batch_size that is a multiple of {multiple} (e.g. {examples})"
        replicas = _replicas_near(together[0], total, dp)
        if replicas:
            change += f", or replicas = {_either(replicas)} on `{root}`"
        spread = ("generation spreads the prompts over the replicas (the n samples of a prompt stay together): "
                  if by_prompt else "")
        out.append(error("batch-divisibility", f"{what} do not split evenly over "
                         f"{_groups_words(together[0], dp)} of {quoted(r.name for r in together)}",
                         program.data.span_of("batch_size"), spread + change,
                         label=f"{total} {'prompts' if by_prompt else 'samples'} / {dp} replicas"))
    return out


def _update(node: CallNode, role: RoleResources, prompts: int, n: int) -> list[Diagnostic]:
    dp, minibatch = data_groups(role), node.kwargs.get("minibatch")
    span = node.kwarg_spans.get("minibatch", node.span)
    unit = "`minibatch` counts prompts, like verl's ppo_mini_batch_size"
    if minibatch is None:
        minibatch = prompts  # one mini-batch: the whole step
    elif minibatch > prompts:
        return [error("batch-divisibility", f"a mini-batch of {minibatch} prompts is more than the {prompts} prompts "
                      "of a step", span, f"{unit}: use one that divides {prompts}, e.g. "
                      f"{_either(_divisors_near(prompts, prompts) + [prompts])}",
                      label=f"{minibatch} prompts × n={n} = {minibatch * n} samples")]
    elif prompts % minibatch:
        return [error("batch-divisibility", f"the {prompts} prompts of a step ({prompts * n} samples) do not split "
                      f"into mini-batches of {minibatch} prompts ({minibatch * n} samples)", span,
                      f"{unit}: use one that divides {prompts}, e.g. {_either(_divisors_near(prompts, minibatch))}",
                      label=f"does not divide {prompts}")]
    if prompts * n % dp:
        return []  # the whole batch does not split: reported once, at batch_size
    if minibatch * n % dp:
        fitting = _divisors_near(prompts, minibatch, lambda d: d * n % dp == 0)
        replicas = _replicas_near(role, minibatch * n, dp)
        return [error("batch-divisibility", f"a mini-batch of {minibatch} prompts × n={n} = {minibatch * n} samples "
                      f"does not split evenly over {_groups_words(role, dp)} of `{role.name}`", span,
                      f"use a minibatch that divides {prompts} and gives a multiple of {dp} samples"
                      + (f", e.g. {_either(fitting)}" if fitting else "")
                      + (f", or replicas = {_either(replicas)} on `{role.root}`" if replicas else ""),
                      label=f"{minibatch * n} samples / {dp} replicas")]
    return _micro_batch(role, minibatch, n, dp)


def _micro_batch(role: RoleResources, minibatch: int, n: int, dp: int) -> list[Diagnostic]:
    micro, per_device, sp = role.micro_batch, minibatch * n // dp, role.sequence_parallel
    if not isinstance(micro, int) or micro < 1 or per_device % micro == 0:
        return []
    relation = "is more than" if micro > per_device else "does not divide"
    examples = _divisors_near(per_device, micro) if micro < per_device else \
        _divisors_near(per_device, per_device) + [per_device]
    each = f"replica of `{role.name}`" if sp == 1 else f"group of {sp} replicas of `{role.name}` (sequence_parallel)"
    over = f"{dp} replica{'s' * (dp != 1)}" if sp == 1 else f"{dp} group{'s' * (dp != 1)}"
    per = "device" if sp == 1 else "sequence-parallel group"
    return [error("batch-divisibility", f"micro_batch = {micro} samples {relation} the {per_device} samples each "
                  f"{each} gets per mini-batch ({minibatch} prompts × n={n} over {over})", role.decl.span_of("micro_batch"),
                  f"`micro_batch` counts samples per {per} per forward pass, like verl's "
                  f"ppo_micro_batch_size_per_gpu: use a divisor of {per_device}, e.g. "
                  f"{_either(examples)}",
                  label=f"{per_device} samples per replica")]


def _unset_micro_batch(graph: StepGraph, roles: Mapping[str, RoleResources], prompts: int,
                       n: int) -> list[Diagnostic]:
    """On GPUs, a role without `micro_batch` runs every pass on its whole share of the step at once.

    CPU specs (small models, the built-in task) are left alone: there the whole batch is the fast choice."""
    out = []
    for name in dict.fromkeys(node.target for node in graph.calls() if node.kind == "role"):
        role = roles.get(name)
        if role is None or "micro_batch" not in ROLE_KEYS.get(role.kind, {}) or role.micro_batch is not None:
            continue
        if role.micro_batch_tokens is not None:
            continue
        dp = data_groups(role)
        if role.device != "gpu" or prompts * n % dp:
            continue
        # samples per device in one pass: an update's mini-batch, or the whole step for a forward pass
        per_pass = [(node.kwargs.get("minibatch") if node.method in TRAINING_METHODS else None) or prompts
                    for node in graph.role_calls(name)]
        per_pass = [p * n // dp for p in per_pass]
        common, biggest = gcd(*per_pass), max(per_pass)
        if biggest <= SUGGESTED_MICRO_BATCH:
            continue
        suggestion = next(d for d in range(min(SUGGESTED_MICRO_BATCH, common), 0, -1) if common % d == 0)
        passes = "forward or backward pass" if role.kind in ("actor", "critic") else "forward pass"
        out.append(warning(
            "micro-batch-unset", f"`{name}` has no micro_batch: it runs up to {biggest} samples per device in one "
            f"{passes}", role.decl.span,
            "the memory of activations (and of an LM head's logits: ~300 KB per token in bf16 at a 152k "
            "vocabulary) grows with the samples of one pass; set `micro_batch` (samples per device per pass, like "
            f"verl's ppo_micro_batch_size_per_gpu), e.g. `micro_batch = {suggestion}`",
            label=f"{biggest} samples per pass"))
    return out


def _token_budget(program: Program, graph: StepGraph, roles: Mapping[str, RoleResources],
                  rollout: Decl | None) -> list[Diagnostic]:
    """`micro_batch_tokens` holds at least one whole sequence, and is not set beside `micro_batch`.

    Both set would be ambiguous (verl's use_dynamic_bsz silently ignores the sample count): an error."""
    out = []
    prompt_length = program.data.get("max_prompt_length")
    new_tokens = rollout.get("max_new_tokens") if rollout is not None else program.data.get("max_response_length")
    for name in dict.fromkeys(node.target for node in graph.calls() if node.kind == "role"):
        role = roles.get(name)
        budget = role.micro_batch_tokens if role is not None else None
        if not isinstance(budget, int):
            continue
        span = role.decl.span_of("micro_batch_tokens")
        if role.micro_batch is not None:
            out.append(error(
                "token-budget", f"`{name}` sets both micro_batch = {role.micro_batch} samples and "
                f"micro_batch_tokens = {budget} tokens per forward pass", span,
                "a micro-batch is either a number of samples (`micro_batch`, like verl's ppo_micro_batch_size_per_gpu) "
                "or a token budget (`micro_batch_tokens`, like verl's use_dynamic_bsz with ppo_max_token_len_per_gpu): "
                "keep one", label="and micro_batch"))
        sp = role.sequence_parallel
        if isinstance(prompt_length, int) and isinstance(new_tokens, int) and budget * sp < prompt_length + new_tokens:
            longest = prompt_length + new_tokens
            least = -(-longest // sp)
            if sp > 1:  # each device holds 1/sp of a row's tokens: verl's budget per group is budget x sp
                out.append(error(
                    "token-budget", f"micro_batch_tokens = {budget} × sequence_parallel = {sp} is less than one whole "
                    f"sequence of {longest} tokens (data.max_prompt_length = {prompt_length} + max_new_tokens = "
                    f"{new_tokens})", span, f"each device holds 1/{sp} of a row's tokens: use micro_batch_tokens >= "
                    f"{least}, e.g. {4 * least} (4 rows of the longest length per group)",
                    label=f"{least} tokens per device per row"))
                continue
            out.append(error(
                "token-budget", f"micro_batch_tokens = {budget} is less than one whole sequence: data.max_prompt_length "
                f"= {prompt_length} + " + (f"max_new_tokens = {new_tokens} of `{rollout.name}`" if rollout is not None
                                           else f"data.max_response_length = {new_tokens}") + f" = {longest} tokens", span,
                f"a forward pass holds at least one whole row (prompt + response): use micro_batch_tokens >= {longest}, "
                f"e.g. {4 * longest} (4 rows of the longest length per pass)", label=f"{longest} tokens per row"))
    return out + _call_token_budget(graph, roles, prompt_length, new_tokens)


def _call_token_budget(graph: StepGraph, roles: Mapping[str, RoleResources], prompt_length,
                       new_tokens) -> list[Diagnostic]:
    """A forward call's own `micro_batch` / `micro_batch_tokens` (`ref.log_prob(micro_batch = 8)`): one of them,
    and a budget of at least one whole sequence."""
    out = []
    for node in graph.calls():
        budget, micro = node.kwargs.get("micro_batch_tokens"), node.kwargs.get("micro_batch")
        if not isinstance(budget, int):
            continue
        span = node.kwarg_spans.get("micro_batch_tokens", node.span)
        if micro is not None:
            out.append(error("token-budget", f"`{node.label}` sets both micro_batch = {micro} samples and "
                             f"micro_batch_tokens = {budget} tokens per forward pass", span,
                             "a call's micro-batch is either a number of samples or a token budget: keep one",
                             label="and micro_batch"))
        role = roles.get(node.target) if node.kind == "role" else None
        sp = role.sequence_parallel if role is not None else 1
        if isinstance(prompt_length, int) and isinstance(new_tokens, int) and budget * sp < prompt_length + new_tokens:
            longest = prompt_length + new_tokens
            out.append(error("token-budget", f"micro_batch_tokens = {budget} of `{node.label}` is less than one whole "
                             f"sequence: data.max_prompt_length = {prompt_length} + max_new_tokens = {new_tokens} = "
                             f"{longest} tokens" + (f" (each device holds 1/{sp} of it: sequence_parallel = {sp})"
                                                    if sp > 1 else ""), span,
                             f"use micro_batch_tokens >= {-(-longest // sp)}, e.g. {4 * -(-longest // sp)}",
                             label=f"{longest} tokens per row"))
    return out


# ---- suggestions ------------------------------------------------------------------


def _either(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


def _multiples_near(value: int, step: int) -> list[int]:
    """The multiples of `step` just below and above `value`: (32, 3) -> [30, 33]."""
    below = value // step * step
    return [m for m in (below, below + step) if m > 0]


def _divisors_near(total: int, target: int, ok=lambda d: True) -> list[int]:
    """The divisors of `total` nearest to `target` from below and above (other than `target`)."""
    below = next((d for d in range(min(target - 1, total), 0, -1) if total % d == 0 and ok(d)), None)
    above = next((d for d in range(target + 1, total + 1) if total % d == 0 and ok(d)), None)
    return [d for d in (below, above) if d is not None]


def _replicas_near(role: RoleResources, total: int, dp: int) -> list[int]:
    """Replica counts (of the role's root) that would make `total` split evenly."""
    colocated = role.root != role.name
    per_dp = role.tp if colocated else 1  # root replicas per data-parallel rank of `role`
    per_root = role.root_tp if colocated else 1
    per_dp *= role.sequence_parallel  # a data-parallel group of `role` is this many of its replicas
    out = []
    for d in _divisors_near(total, dp):
        if d * per_dp % per_root == 0:
            out.append(d * per_dp // per_root)
    return out
