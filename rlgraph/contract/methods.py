"""The one table of role methods: (role kind, method) -> worker method, ports, dispatch, settings.

Both sides read it: the compiler builds its call signatures from these ports (rlgraph/compiler/builtins.py
adds docs and the spec's keyword arguments), and the step driver dispatches a role call from the same
entry (rlgraph/runtime/step.py, the one stage loop, through Ray or in process). tests/contract/test_methods.py holds the workers to it: every worker
class that hosts a role kind has each method with these inputs and a `settings` argument.

How a call reaches its worker: `worker.<worker_method>(rollout, *token inputs in port order,
settings=<settings>, **step arguments)`, where `rollout` is the step's generated batch (for `generate`:
the prompts instead), token inputs are the call's `token` ports that the spec names, and step arguments
are the per-step values the driver adds (seeds, offsets, the policy version).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgraph.contract import settings as s

# Field kinds: `prompts` (a batch of prompts from the data), `responses` (the generated samples, a
# Rollout), `token` (a float per response token, (batch, response_len)), `demos` (the data's prompts with their
# responses, a Rollout of one sample per row: what SFT trains on), `top_k` (a teacher's k most likely next tokens
# at each response position, their log-probs and ids, (batch, response_len, k, 2): what `actor.distill` trains on).
PROMPTS, RESPONSES, TOKEN, DEMOS, TOP_K = "prompts", "responses", "token", "demos", "top_k"
TENSOR_KINDS = (TOKEN, TOP_K)  # per-token tensors a call takes after the rollout, rows first

# How a role's replicas share a call (rlgraph/runtime/group.py): split the batch / one input each /
# the same call on all / replica 0 only.
DISPATCH_MODES = ("split", "each", "all", "one")


# Port names whose tensors the step's batch metrics read by their meaning (critic/score, critic/advantages,
# critic/values, ...), whichever call makes them: a role method's output (`critic.values`, `reward_model.score`)
# or a reward's or transform's (rlgraph/runtime/step.py keeps them as the step runs).
METRIC_PORTS = ("scores", "rewards", "advantages", "returns", "values")


@dataclass(frozen=True)
class Port:
    name: str  # the parameter's meaning, e.g. `old_log_prob`
    kind: str  # prompts | responses | token
    optional: bool = False
    # an output the call's first output holds, as this attribute: generate's log-probs, kept inside the Rollout
    # it returns (`sample_log_probs`). The step reads it from there and passes it to no role call (a worker
    # takes it from the rollout it gets anyway: `actor.update`'s `old_log_prob` None).
    within: str | None = None


@dataclass(frozen=True)
class RoleMethod:
    kind: str  # role kind
    method: str  # as the spec writes it: `actor.update`
    worker_method: str  # the worker's method that runs it
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    dispatch: str
    settings: type  # rlgraph.contract.settings class the call receives
    step_args: tuple[str, ...] = ()  # keyword arguments the driver adds each step
    min_outputs: int | None = None  # fewer outputs may be named (`generate -> responses`)

    @property
    def token_inputs(self) -> tuple[Port, ...]:
        """The per-token tensors the worker method takes after the rollout, in port order."""
        return tuple(p for p in self.inputs if p.kind in TENSOR_KINDS)

    def output(self, name: str) -> Port | None:
        return next((p for p in self.outputs if p.name == name), None)


# role kind -> the worker class that hosts it (rlgraph/workers); a rollout colocated with the policy
# it is synced from generates with that policy worker's module instead (the hybrid engine).
WORKERS = {"actor": "policy", "ref": "policy", "critic": "critic", "reward_model": "reward_model",
           "judge": "judge", "rollout": "rollout"}

_RESPONSES = (Port("responses", RESPONSES),)
_GENERATE_ARGS = ("seed", "uid_offset", "policy_version")
_UPDATE_ARGS = ("shuffle_seed",)

ROLE_METHODS: dict[tuple[str, str], RoleMethod] = {(m.kind, m.method): m for m in (
    RoleMethod("rollout", "generate", "generate", (Port("prompts", PROMPTS),),
               (Port("responses", RESPONSES), Port("log_prob", TOKEN, within="sample_log_probs")), "each",
               s.GenerateSettings,
               _GENERATE_ARGS, min_outputs=1),
    RoleMethod("actor", "log_prob", "log_prob", _RESPONSES, (Port("log_prob", TOKEN),), "split", s.LogProbSettings),
    RoleMethod("actor", "update", "update",
               (Port("old_log_prob", TOKEN), Port("advantages", TOKEN), Port("ref_log_prob", TOKEN, optional=True)),
               (), "split", s.ActorUpdateSettings, _UPDATE_ARGS),
    # supervised fine-tuning: the data's demonstrations (`demos`, a Rollout of prompts and their responses)
    RoleMethod("actor", "sft", "sft", (Port("demos", DEMOS),), (), "split", s.SftSettings, _UPDATE_ARGS),
    # on-policy distillation with the teacher's whole next-token distribution (GKD): a frozen role's top-k
    # log-probs at each position of the student's samples, and the student trained on its divergence from them
    RoleMethod("actor", "distill", "distill", (Port("teacher_top_k", TOP_K),), (), "split", s.ActorDistillSettings,
               _UPDATE_ARGS),
    RoleMethod("ref", "log_prob", "log_prob", _RESPONSES, (Port("ref_log_prob", TOKEN),), "split", s.LogProbSettings),
    RoleMethod("ref", "top_k", "top_k", _RESPONSES, (Port("teacher_top_k", TOP_K),), "split", s.TopKSettings),
    RoleMethod("critic", "values", "values", _RESPONSES, (Port("values", TOKEN),), "split", s.ForwardSettings),
    RoleMethod("critic", "update", "update", (Port("values", TOKEN), Port("returns", TOKEN)), (), "split",
               s.CriticUpdateSettings, _UPDATE_ARGS),
    RoleMethod("reward_model", "score", "score", _RESPONSES, (Port("scores", TOKEN),), "split", s.ForwardSettings),
    # an LLM judge: a generated verdict per sample, parsed into its score (NaN where it holds none); the call
    # takes no settings: how it generates is its role's (JudgeSettings)
    RoleMethod("judge", "score", "score", _RESPONSES, (Port("scores", TOKEN),), "split", s.NoSettings),
)}


# The methods that train a role's weights: at most one of them per role and step (a backward pass, an optimizer).
TRAINING_METHODS = ("update", "sft", "distill")


def methods_of(kind: str) -> dict[str, RoleMethod]:
    """The methods a role of `kind` offers, by the name a spec calls them."""
    return {method: m for (k, method), m in ROLE_METHODS.items() if k == kind}


def role_method(kind: str | None, method: str | None) -> RoleMethod | None:
    return ROLE_METHODS.get((kind or "", method or ""))


def call_settings_class(kind: str, target: str, role_kind: str | None = None, method: str | None = None) -> type:
    """The settings class a call of the Plan receives: by role method, by transform (built-in or declared), or
    none (a reward)."""
    if kind == "role":
        entry = role_method(role_kind, method)
        if entry is None:
            raise KeyError(f"no role method {role_kind}.{method}")
        return entry.settings
    if kind == "transform":  # a built-in by its name; any other is a transform the spec declares
        return s.TRANSFORM_SETTINGS.get(target, s.UserFunctionSettings)
    return s.NoSettings
