"""The calls a step may make, with their inputs, outputs and keyword arguments.

Pure data, so that `check` and `plan` know every signature without importing
torch. Role methods come from rlgraph/contract/methods.py, the table the runtime dispatches from;
transforms run on the driver (rlgraph/runtime/transforms.py -> rlgraph.algos).

Field kinds: `prompts` (a batch of prompts from the data), `responses` (the
generated samples), `token` (a float per response token, shape (batch, response_len)), `demos` (the data's
demonstrations), `top_k` (a teacher's top-k next-token log-probs and ids, (batch, response_len, k, 2)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.contract.methods import ROLE_METHODS as CONTRACT
from rlgraph.contract.methods import Port
from rlgraph.diagnostics import Span
from rlgraph.lang.schema import MAX_BATCH, Bool, Choice, Float, Int, Key, Like, Ref

LOSS_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "k2+", "k3+", "low_var_kl+")
TIS_LEVELS = ("off", "token", "sequence")  # rlgraph.algos.TIS_LEVELS (not imported: no torch here)
POLICY_LOSSES = ("vanilla", "gspo", "cispo")  # rlgraph.algos.registry.POLICY_LOSSES


@dataclass(frozen=True)
class Signature:
    name: str
    doc: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    kwargs: dict[str, Key] = field(default_factory=dict)
    min_outputs: int | None = None  # fewer outputs may be named (e.g. advantages without returns)

    @property
    def required_inputs(self) -> int:
        return sum(not p.optional for p in self.inputs)

    @property
    def least_outputs(self) -> int:
        return len(self.outputs) if self.min_outputs is None else self.min_outputs


_TOKEN = "token"
_UPDATE_COMMON = {
    "epochs": Key(Int(min=1), "PPO epochs over the batch", 1),
    "minibatch": Key(Int(min=1), "prompts per mini-batch (one optimizer step each); default: the whole batch"),
    "loss_agg": Key(Choice(LOSS_AGG), "how token losses are averaged", "token-mean"),
}

# ---- role methods, by role kind ---------------------------------------------------------
# Ports, outputs and the worker side come from the one table in rlgraph/contract/methods.py; here each
# method gets its doc and the keyword arguments a spec may give it.
_DOCS = {
    ("rollout", "generate"): "sample `n` responses per prompt (and keep their log-probs, if named)",
    ("actor", "log_prob"): "log-probabilities of the responses under the current policy",
    ("actor", "update"): "PPO policy update over mini-batches",
    ("actor", "sft"): "supervised fine-tuning: the negative log-likelihood of the demonstrations' response tokens",
    ("actor", "distill"): "on-policy distillation (GKD): the divergence of the actor's next-token distribution from "
                          "the teacher's at every position of its own samples, minimised over mini-batches",
    ("ref", "log_prob"): "log-probabilities under the frozen reference policy",
    ("ref", "top_k"): "a teacher's k most likely next tokens and their log-probs at every response position (the "
                      "whole distribution when k is unset)",
    ("critic", "values"): "value estimates per response token",
    ("critic", "update"): "clipped value-loss update over mini-batches",
    ("reward_model", "score"): "a sequence classifier's score on the reward token of each response",
    ("judge", "score"): "an LLM judge's verdict on each response, from its template, parsed into a score",
}
# A forward pass's own micro-batch (verl sizes log-prob passes apart from updates: log_prob_micro_batch_size_per_gpu,
# log_prob_max_token_len_per_gpu); unset: the role's micro_batch or micro_batch_tokens.
_FORWARD = {
    "micro_batch": Key(Int(min=1, max=MAX_BATCH), "samples per device per forward pass of this call, instead of the "
                       "role's micro_batch / micro_batch_tokens (verl: log_prob_micro_batch_size_per_gpu)"),
    "micro_batch_tokens": Key(Int(min=1), "token budget per device per forward pass of this call, instead of the "
                              "role's (verl: log_prob_max_token_len_per_gpu with use_dynamic_bsz)"),
}
_KWARGS: dict[tuple[str, str], dict[str, Key]] = {
    ("actor", "log_prob"): _FORWARD,
    ("ref", "log_prob"): _FORWARD,
    ("critic", "values"): _FORWARD,
    ("ref", "top_k"): {
        **_FORWARD,
        "k": Key(Int(min=1), "next tokens kept per position, the teacher's most likely; both distributions are "
                 "renormalised over them (default: the whole vocabulary, the exact divergence; "
                 "batch x n x max_new_tokens x k x 8 bytes move to the actor)"),
        "temperature": Key(Float(min=0.0, min_exclusive=True), "temperature of the teacher's distribution, and of the "
                           "student's in `distill` (GKD's temperature)", 1.0),
    },
    ("reward_model", "score"): _FORWARD,
    # per call, so one step can sample and decode greedily (ReMax's baseline); unset: the rollout role's value
    ("rollout", "generate"): {
        "n": Key(Int(min=1), "samples per prompt of this call (default: the rollout's `n`)"),
        "temperature": Key(Float(min=0.0), "sampling temperature of this call, 0 = greedy (default: the rollout's)"),
        "env": Key(Ref("env"), "a declared `env`: each sample is an episode of up to its max_turns model turns, "
                   "the environment answering each; the rollout's max_new_tokens bounds the model's turns and the "
                   "replies together (default: none, one turn)"),
    },
    ("actor", "update"): {
        **_UPDATE_COMMON,
        "clip": Key(Float(min=0.0), "PPO clip range, both sides", 0.2),
        "clip_low": Key(Float(min=0.0), "lower clip range (overrides clip)"),
        "clip_high": Key(Float(min=0.0), "upper clip range (overrides clip), e.g. 0.28 for clip-higher"),
        "clip_c": Key(Float(min=1.0), "dual-clip bound for negative advantages (> 1)", 3.0),
        "kl_coef": Key(Float(min=0.0), "KL loss coefficient; needs ref_log_prob (0 = off)", 0.0),
        "kl_kind": Key(Choice(KL_KINDS), "KL estimator of the KL loss", "low_var_kl"),
        "policy_loss": Key(Choice(POLICY_LOSSES),
                           "token-level PPO, sequence-level GSPO, CISPO (clipped, detached IS weight), or the "
                           "name of a declared `loss`", "vanilla"),
        "tis": Key(Choice(TIS_LEVELS), "truncated importance sampling against the rollout's sampling log-probs "
                   "(kept by `generate -> responses, LOG_PROBS`): each token's policy loss is scaled by "
                   "min(pi_old / mu, tis_cap), per token or per sample (verl: algorithm.rollout_is with "
                   "rollout_is_level, rollout_is_mode = truncate)", "off"),
        "tis_cap": Key(Float(min=1.0), "truncation of the TIS weights (verl: algorithm.rollout_is_threshold)", 2.0),
    },
    ("actor", "sft"): {
        "epochs": Key(Int(min=1), "epochs over each batch of demonstrations", 1),
        "minibatch": Key(Int(min=1), "demonstrations per mini-batch (one optimizer step each); default: the "
                         "whole batch"),
        "loss_agg": Key(Choice(LOSS_AGG), "how token losses are averaged (verl's SFT: token-mean)", "token-mean"),
    },
    ("actor", "distill"): {
        **_UPDATE_COMMON,
        "epochs": Key(Int(min=1), "epochs over each batch of samples", 1),
        "beta": Key(Float(0.0, 1.0), "which divergence: 1 the reverse KL(student || teacher), mode-seeking, as the "
                    "on-policy distillation recipes; 0 the forward KL(teacher || student), mass-covering; between, "
                    "the generalized Jensen-Shannon divergence (TRL GKD's beta)", 1.0),
    },
    ("critic", "update"): {
        **_UPDATE_COMMON,
        "clip": Key(Float(min=0.0), "value clip range around the old values", 0.5),
    },
}


ROLE_METHODS: dict[str, dict[str, Signature]] = {}
for (_kind, _method), _entry in CONTRACT.items():
    ROLE_METHODS.setdefault(_kind, {})[_method] = Signature(
        _method, _DOCS[_kind, _method], _entry.inputs, _entry.outputs,
        dict(_KWARGS.get((_kind, _method), {})), min_outputs=_entry.min_outputs)

# A `reward NAME { fn = ... }` declaration is called as `responses -> NAME -> scores`.
REWARD_CALL = Signature("reward", "the rule reward function, its score on the last response token",
                        (Port("responses", "responses"),), (Port("scores", _TOKEN),))

_GROUP = {"epsilon": Key(Float(min=0.0), "added to the std / denominators", 1e-6)}
_ADV_OUT = (Port("advantages", _TOKEN), Port("returns", _TOKEN))

TRANSFORMS: dict[str, Signature] = {
    "kl_penalty": Signature(
        "kl_penalty", "rewards = scores - coef * KL(policy || ref), per token",
        (Port("scores", _TOKEN), Port("log_prob", _TOKEN), Port("ref_log_prob", _TOKEN)),
        (Port("rewards", _TOKEN),), {
            "kind": Key(Choice(KL_KINDS), "KL estimator", "k1"),
            "coef": Key(Float(min=0.0), "KL coefficient (the initial one when adaptive)", 0.001),
            "target": Key(Float(min=0.0), "target KL: makes the coefficient adaptive"),
            "horizon": Key(Int(min=1), "adaptive controller horizon, in samples", 10000),
        }),
    "gae": Signature("gae", "generalized advantage estimation with a critic",
                     (Port("rewards", _TOKEN), Port("values", _TOKEN)), _ADV_OUT, {
                         "gamma": Key(Float(0.0, 1.0), "discount", 1.0),
                         "lam": Key(Float(0.0, 1.0), "GAE lambda", 0.95),
                     }, min_outputs=2),
    "grpo_advantage": Signature("grpo_advantage", "group-normalised outcome advantage (GRPO)",
                                (Port("rewards", _TOKEN),), _ADV_OUT, {
                                    **_GROUP,
                                    "norm_by_std": Key(Bool(), "divide by the group std (false: Dr. GRPO)", True),
                                }, min_outputs=1),
    "rloo_advantage": Signature("rloo_advantage", "leave-one-out baseline (RLOO)",
                                (Port("rewards", _TOKEN),), _ADV_OUT, dict(_GROUP), min_outputs=1),
    "reinforce_pp_advantage": Signature("reinforce_pp_advantage", "whitened discounted return (REINFORCE++)",
                                        (Port("rewards", _TOKEN),), _ADV_OUT, {
                                            "gamma": Key(Float(0.0, 1.0), "discount", 1.0),
                                        }, min_outputs=1),
    "reinforce_pp_baseline_advantage": Signature(
        "reinforce_pp_baseline_advantage", "group-mean baseline, then whitened (REINFORCE++-baseline)",
        (Port("rewards", _TOKEN),), _ADV_OUT, dict(_GROUP), min_outputs=1),
    "remax_advantage": Signature(
        "remax_advantage", "reward-to-go minus the reward of a baseline answer to the same prompt (ReMax: the greedy "
        "one; verl: algorithm.adv_estimator = remax)",
        (Port("rewards", _TOKEN), Port("baselines", _TOKEN)), _ADV_OUT, min_outputs=1),
    "distill_advantage": Signature(
        "distill_advantage", "on-policy distillation: each sampled token's advantage is the teacher's log-prob of it "
        "minus the student's (the negative per-token reverse KL), from a `ref` role holding the teacher's model",
        (Port("log_prob", _TOKEN), Port("teacher_log_prob", _TOKEN)), _ADV_OUT, {
            "coef": Key(Float(min=0.0, min_exclusive=True), "scale of the advantage", 1.0),
            "gamma": Key(Float(0.0, 1.0), "discount of the later tokens' advantages added to a token's (0: each "
                         "token alone, as the distillation recipes do)", 0.0),
        }, min_outputs=1),
    "overlong_penalty": Signature(
        "overlong_penalty", "DAPO's overlong reward shaping: a response within `buffer` tokens of max_new_tokens "
        "loses up to `penalty_factor`, linearly in its length (verl: reward_model.overlong_buffer)",
        (Port("scores", _TOKEN),), (Port("rewards", _TOKEN),), {
            "buffer": Key(Int(min=1), "tokens before max_new_tokens where the penalty starts "
                          "(verl: overlong_buffer.len)", required=True),
            "penalty_factor": Key(Float(min=0.0), "the penalty of a response that fills max_new_tokens "
                                  "(verl: overlong_buffer.penalty_factor)", 1.0),
        }),
    "filter_groups": Signature(
        "filter_groups", "DAPO's dynamic sampling: drop the prompts whose samples all got the same value and draw "
        "more until the batch is full; the calls after it see only the kept prompts (verl: algorithm.filter_groups; "
        "its metric is the field passed in)",
        (Port("scores", _TOKEN),), (), {
            "max_rounds": Key(Int(min=0), "generation rounds per step before the run stops, 0 = no bound "
                              "(verl: filter_groups.max_num_gen_batches)", 10),
        }),
}

# ---- user functions: declared in the spec (`transform NAME { ... }`, `loss NAME { ... }`) ------------------


@dataclass(frozen=True)
class UserFunction:
    """A function the spec declares, as the compiler knows it: by name, never imported (pre-flight does that)."""

    name: str
    kind: str  # transform | loss
    fn: str  # `module:function` or `file.py:function`, as written
    inputs: tuple[str, ...]  # a transform's input fields, in the order a call names them (a loss: none)
    outputs: tuple[str, ...]
    args: dict  # keyword arguments and their declared values
    span: Span  # the declaration's name
    base_dir: str  # the spec's folder, absolute: where fn is looked for (as a reward's is)


# Keyword arguments a user transform gets from the batch when its function names them, and those a user loss
# gets from actor.update as the built-in losses do: restated from rlgraph/workers/user_functions.py (no torch
# here); tests/runtime/test_user_functions.py holds them equal.
TRANSFORM_CONTEXT = ("response_mask", "index", "rollout")
LOSS_ARGUMENTS = ("old_log_prob", "log_prob", "advantages", "response_mask", "clip_low", "clip_high", "agg",
                  "clip_c", "rollout_is_weights")


def user_signature(function: UserFunction) -> Signature:
    """A user transform's call signature: its declared per-token inputs and outputs, its args as keywords."""
    return Signature(function.name, f"user transform `{function.fn}`",
                     tuple(Port(name, _TOKEN) for name in function.inputs),
                     tuple(Port(name, _TOKEN) for name in function.outputs),
                     {name: Key(Like(value), f"declared in transform `{function.name}` (default {value!r})", value)
                      for name, value in function.args.items()})


# Estimators that compare the samples of one prompt: they need n >= 2.
GROUP_ESTIMATORS = ("grpo_advantage", "rloo_advantage", "reinforce_pp_baseline_advantage")

# The fields that come from the data rather than from a call: its prompts, and (rows with a `response`) the
# demonstrations, each prompt with its response as one Rollout (what `actor.sft` trains on).
DATA_FIELDS = {"prompts": "prompts", "demos": "demos"}
