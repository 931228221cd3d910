"""Typed, fully resolved settings: what the Plan hands every role and every call.

Planning (rlgraph/plan/resolve.py) fills each of these from the spec, every default taken from the spec's
schema and every unit converted (mini-batches in samples per replica, clip ranges split low/high), so
nothing below the Plan has a default of its own and nothing reads a settings dict by string key. They are
frozen, serialised in plan.json (`settings_to_dict`) and read back strictly (`settings_from_dict`): a
plan.json written by another rlgraph version fails with the names of the fields that differ.

Pure Python: the compiler, the plan, the runtime and the workers all import this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# ---- role settings: one class per role kind --------------------------------------------------------


@dataclass(frozen=True)
class OptimSettings:
    """AdamW with linear warm-up, then a constant learning rate or a cosine decay to the run's last step."""

    lr: float
    betas: tuple[float, float]
    weight_decay: float
    warmup_steps: int  # with warmup_ratio: int(ratio x the run's steps), filled in once those are known
    warmup_ratio: float | None  # the spec's optim.warmup_ratio (verl: lr_warmup_steps_ratio); None = not given
    grad_clip: float | None  # clip the global gradient norm to this; None = off (the spec's 0)
    schedule: str  # constant | cosine (after the warm-up)
    min_lr_ratio: float  # cosine: the lr of the last step, as a share of lr
    decay_steps: int | None  # cosine: the run's steps (train.steps; with train.epochs filled in once known); else None


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters on the actor's linear layers (peft): only they train; the base weights stay frozen."""

    rank: int  # r of each adapter (verl: actor_rollout_ref.model.lora_rank); always > 0 here
    alpha: float  # the adapter's output is scaled by alpha / rank (verl: lora_alpha)
    dropout: float  # dropout on the adapter's input in update passes only (scoring runs without)
    target_modules: str | tuple[str, ...]  # "all-linear" or module names such as ("q_proj", "v_proj")


@dataclass(frozen=True)
class ActorSettings:
    dtype: str  # torch dtype name: float32 | bfloat16 | float16
    strategy: str  # ddp | fsdp
    micro_batch: int | None  # samples per device per forward pass; None = the whole batch at once
    micro_batch_tokens: int | None  # token budget per device per forward pass (rows x their longest row); None = off
    entropy_coeff: float
    optim: OptimSettings
    gradient_checkpointing: bool  # recompute each block's activations in backward (any train/eval mode)
    lora: LoraSettings | None  # None: full fine-tuning (the spec's rank 0)
    param_offload: bool  # fsdp: parameters, gradients and AdamW state on the host (FSDP2's CPUOffloadPolicy)
    optimizer_offload: bool  # AdamW state on the host between optimizer steps
    remove_padding: bool  # pack each pass's rows without their padding (workers/packing.py; verl: use_remove_padding)


@dataclass(frozen=True)
class CriticSettings:
    dtype: str
    strategy: str
    micro_batch: int | None
    micro_batch_tokens: int | None
    head: str  # value
    optim: OptimSettings
    gradient_checkpointing: bool
    param_offload: bool
    optimizer_offload: bool
    remove_padding: bool


@dataclass(frozen=True)
class RefSettings:
    dtype: str
    strategy: str  # the strategy of the trained role it is colocated with (fsdp shards it too), else ddp
    micro_batch: int | None
    micro_batch_tokens: int | None
    param_offload: bool  # weights on the host, on the device only for a log_prob call (sharded: FSDP2's policy)
    remove_padding: bool


@dataclass(frozen=True)
class RewardModelSettings:
    dtype: str
    micro_batch: int | None
    micro_batch_tokens: int | None
    retokenize: bool  # score the decoded text, tokenized by the reward model's own tokenizer
    remove_padding: bool


@dataclass(frozen=True)
class JudgeSettings:
    """An LLM judge (rlgraph/contract/judge.py): a model that generates a verdict on each sample from a template,
    parsed into its score."""

    engine: str  # a name in the engine registry (rlgraph/workers/engines)
    template: str  # the jinja2 text itself (a template file is read at planning)
    parser: str  # yes_no | tag:NAME | module:function | file.py:function
    base_dir: str  # the spec's folder: a parser's file or module is looked for there
    max_new_tokens: int  # the most tokens a verdict may have
    temperature: float  # 0 = greedy
    max_sequences: int | None  # the most verdicts generated at once; None = the engine's own
    memory_fraction: float
    dtype: str
    max_invalid_fraction: float  # share of a batch's verdicts that may hold no score (left out of the update)


@dataclass(frozen=True)
class ValSettings:
    """How validation generates (verl: rollout.val_kwargs). val/score/mean scores one answer per prompt, at
    `temperature` when n = 1 (0 = greedy), else the greedy one; n > 1 adds mean@n and best@n of n answers
    sampled at `temperature`."""

    n: int
    temperature: float
    top_p: float
    top_k: int  # 0 = all tokens


@dataclass(frozen=True)
class RolloutSettings:
    engine: str  # a name in the engine registry (rlgraph/workers/engines)
    n: int  # samples per prompt
    temperature: float  # 0 = greedy
    top_p: float
    top_k: int  # 0 = all tokens
    max_new_tokens: int
    tp: int  # devices per replica
    memory_fraction: float
    max_sequences: int | None  # the most sequences generated at once (vLLM max_num_seqs); None = the engine's own
    dtype: str
    val: ValSettings  # validation sampling, with train.val_samples folded in


# ---- call settings: one class per kind of call -----------------------------------------------------


@dataclass(frozen=True)
class NoSettings:
    """A call that takes no settings (a rule reward)."""


@dataclass(frozen=True)
class EnvSettings:
    """An environment the rollout talks with over several turns (the spec's `env NAME { ... }` block)."""

    name: str  # the declaration's name
    cls: str  # `module:Class` or `path/to/file.py:Class`, as written (the spec's `class`)
    base_dir: str  # the spec's folder: a relative file path is read, and a module looked for, there
    declared_at: str  # `file:line` of the declaration, for messages at run time
    args: dict[str, Any]  # keyword arguments of the class's constructor
    max_turns: int  # the model's turns per episode (verl: multi_turn.max_assistant_turns)
    max_observation_tokens: int  # an environment reply longer than this is cut (verl: max_tool_response_length)
    timeout_s: float  # the most seconds one call of the environment (reset or step) may take
    workers: int  # processes that host the episodes of a batch (a bounded pool)
    max_failed_fraction: float  # share of a step's samples whose episode may fail before the run stops
    tool_format: str  # auto | tag | chat_template: how tool calls are read and replies written


@dataclass(frozen=True)
class GenerateSettings:
    n: int
    temperature: float  # 0 = greedy
    top_p: float
    top_k: int
    max_new_tokens: int
    keep_log_probs: bool  # `-> responses, log_prob`: keep each sampled token's log-prob
    # (no max_sequences: the limit is the rollout's, RolloutSettings.max_sequences, given to its engine once where
    # the engine is built)
    # `generate(env = NAME)`: episodes of several turns with that environment; max_new_tokens is then the
    # whole response (the model's turns and the environment's replies); None: one turn
    env: EnvSettings | None


@dataclass(frozen=True)
class LogProbSettings:
    temperature: float  # the rollout's sampling temperature (1 for a greedy rollout): log pi of what was sampled
    micro_batch: int | None
    micro_batch_tokens: int | None


@dataclass(frozen=True)
class TopKSettings:
    """A frozen role's k most likely next tokens at each response position (a distillation teacher's)."""

    k: int | None  # None: the whole vocabulary (the full distribution)
    temperature: float  # the distribution's temperature (the student's is the same: DistillSettings)
    micro_batch: int | None
    micro_batch_tokens: int | None


@dataclass(frozen=True)
class ForwardSettings:
    """A forward pass over the batch: critic values, reward-model scores."""

    micro_batch: int | None
    micro_batch_tokens: int | None


@dataclass(frozen=True)
class UserFunctionSettings:
    """A function the spec declares (`transform NAME { ... }` or `loss NAME { ... }`): what to import and what
    it is called with. A user transform's call settings; an actor update's `user_loss`."""

    name: str  # the declaration's name
    fn: str  # `module:function` or `path/to/file.py:function`, as written
    base_dir: str  # the spec's folder: a relative file path is read, and a module looked for, there
    declared_at: str  # `file:line` of the declaration, for messages at run time
    inputs: tuple[str, ...]  # a transform's input fields, passed to fn by these names (a loss: empty)
    outputs: tuple[str, ...]  # what a transform returns, in order (a loss: empty)
    args: dict[str, Any]  # keyword arguments: the declared ones, with the call's overrides


@dataclass(frozen=True)
class ActorUpdateSettings:
    epochs: int
    minibatch: int | None  # prompts per optimizer step, as written (None = the whole batch)
    mini_batch_size: int | None  # the same in samples per replica: minibatch x n / replicas
    micro_batch: int | None
    micro_batch_tokens: int | None
    loss_agg: str
    clip_low: float
    clip_high: float
    clip_c: float  # dual-clip bound for negative advantages
    kl_coef: float  # KL loss against ref_log_prob (0 = off)
    kl_kind: str
    policy_loss: str  # vanilla | gspo | cispo
    entropy_coeff: float
    temperature: float  # as LogProbSettings.temperature
    tis: str  # off | token | sequence: truncated importance weights against the rollout's kept log-probs
    tis_cap: float  # the weights' truncation (verl: algorithm.rollout_is_threshold)
    user_loss: UserFunctionSettings | None  # policy_loss names a declared `loss`: its function; None: a built-in


@dataclass(frozen=True)
class SftSettings:
    """Supervised fine-tuning on demonstrations: the negative log-likelihood of their response tokens."""

    epochs: int
    minibatch: int | None  # demonstrations per optimizer step, as written (None = the whole batch)
    mini_batch_size: int | None  # the same per replica: minibatch / replicas
    micro_batch: int | None
    micro_batch_tokens: int | None
    loss_agg: str


@dataclass(frozen=True)
class ActorDistillSettings:
    """On-policy distillation: the student's divergence from the teacher's next-token distribution at every
    position of its own samples (rlgraph/algos/distill.py, GKD's generalized JSD)."""

    epochs: int
    minibatch: int | None  # prompts per optimizer step, as written (None = the whole batch)
    mini_batch_size: int | None  # the same in samples per replica: minibatch x n / replicas
    micro_batch: int | None
    micro_batch_tokens: int | None
    loss_agg: str
    beta: float  # 1: reverse KL(student || teacher); 0: forward KL(teacher || student); between: the JSD
    temperature: float  # both distributions' temperature (the teacher's top_k call's)


@dataclass(frozen=True)
class CriticUpdateSettings:
    epochs: int
    minibatch: int | None
    mini_batch_size: int | None
    micro_batch: int | None
    micro_batch_tokens: int | None
    loss_agg: str
    clip: float  # value clip range around the old values


@dataclass(frozen=True)
class KlPenaltySettings:
    kind: str
    coef: float
    target: float | None  # a target KL makes the coefficient adaptive
    horizon: int


@dataclass(frozen=True)
class GaeSettings:
    gamma: float
    lam: float


@dataclass(frozen=True)
class GrpoSettings:
    epsilon: float
    norm_by_std: bool


@dataclass(frozen=True)
class GroupBaselineSettings:
    """RLOO and REINFORCE++-baseline: a per-prompt baseline."""

    epsilon: float


@dataclass(frozen=True)
class ReinforcePPSettings:
    gamma: float


@dataclass(frozen=True)
class DistillSettings:
    """On-policy distillation's advantage (rlgraph.algos.distill_advantage)."""

    coef: float
    gamma: float


@dataclass(frozen=True)
class OverlongPenaltySettings:
    """DAPO's overlong reward shaping (verl: reward_model.overlong_buffer): a response longer than
    max_new_tokens - buffer loses penalty_factor x (its excess / buffer), down to -penalty_factor."""

    buffer: int  # tokens before max_new_tokens where the penalty starts (verl: overlong_buffer.len)
    penalty_factor: float  # the penalty of a response that fills max_new_tokens (verl: overlong_buffer.penalty_factor)
    max_new_tokens: int  # of the step's trained generate call


@dataclass(frozen=True)
class FilterGroupsSettings:
    """DAPO's dynamic sampling (verl: algorithm.filter_groups): the prompts whose samples all got the same
    value are dropped, and more prompts are drawn and generated until the batch is full."""

    max_rounds: int  # generation rounds per step before the run stops (0 = no bound; verl: max_num_gen_batches)


@dataclass(frozen=True)
class RewardSettings:
    """A reward's guards: a rule reward's (its function is `Plan.rewards[name]`) or a reward service's (`url`)."""

    max_invalid_fraction: float  # share of a batch's rows that may get no usable score (left out of the update)
    timeout_s: float  # the most seconds one call of the function (one row), or a service's request, may take
    batched: bool  # the function takes the batch's columns as lists and returns a list of scores
    workers: int  # processes that score a batch's rows in parallel (a batched function uses one)
    url: str | None  # the service that scores the rows (rlgraph/workers/reward_service.py); None: a function
    rows_per_request: int  # of a service
    concurrency: int  # a service's requests in flight at the same time
    retries: int  # after a connection error, a timeout or a 5xx answer
    backoff_s: float  # before the first retry, doubled at each next one


@dataclass(frozen=True)
class TrainSettings:
    steps: int | None  # None: counted from `epochs` when the data is loaded (rlgraph.runtime.loop)
    epochs: int | None  # passes over data.train; None when `steps` is given (it wins, as verl's does)
    seed: int
    validate_every: int  # 0 = only before the first and after the last step
    checkpoint_every: int  # 0 = only after the last step
    keep_checkpoints: int
    deterministic: bool  # GPU workers use deterministic kernels (CPU ones always are)
    max_failures: int  # worker-process deaths recovered from (restart + latest checkpoint) before giving up
    samples_every: int  # steps between samples written to samples.jsonl (0 = never)
    staleness: int  # policy versions a sample may lag behind the update it trains (0 = synchronous)
    loggers: tuple[str, ...]  # where each step's metrics go besides metrics.jsonl: console, tensorboard, wandb, mlflow


@dataclass(frozen=True)
class DataSettings:
    train: tuple[str, ...]  # data names, read one after the other (verl: data.train_files)
    val: tuple[str, ...] | None
    batch_size: int  # prompts per step
    max_prompt_length: int
    shuffle: bool
    val_batch_size: int
    max_response_length: int  # SFT: longer demonstrations (response + EOS, in tokens) are left out


@dataclass(frozen=True)
class ModelSettings:
    """A model block: where its weights are, and the size and shape keys the spec wrote. A shape key of None
    was not written: the memory estimate and the plan's checks take config.json's or the built-in table's.
    Resolved once at planning; Plan.models holds them (plan.json's `models`), so the plan hash changes exactly
    when the block's values do."""

    name: str
    path: str | None  # None only where the required key is missing (reported by the compiler)
    params: int | None
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    vocab: int | None
    intermediate: int | None
    head_dim: int | None
    experts: int | None
    experts_per_token: int | None
    expert_intermediate: int | None
    shared_expert_intermediate: int | None


@dataclass(frozen=True)
class PoolSettings:
    """A pool block, as placement reads it. Not in plan.json: the Plan's PoolPlan is what placement made of it."""

    name: str
    nodes: int | None  # None only where the required key is missing (reported by the compiler)
    devices_per_node: int | None  # likewise
    device: str  # cpu | gpu
    memory: int | None  # bytes of one device; None: not said (no memory check)


ROLE_SETTINGS: dict[str, type] = {
    "actor": ActorSettings,
    "critic": CriticSettings,
    "ref": RefSettings,
    "reward_model": RewardModelSettings,
    "judge": JudgeSettings,
    "rollout": RolloutSettings,
}

TRANSFORM_SETTINGS: dict[str, type] = {
    "kl_penalty": KlPenaltySettings,
    "gae": GaeSettings,
    "grpo_advantage": GrpoSettings,
    "rloo_advantage": GroupBaselineSettings,
    "reinforce_pp_advantage": ReinforcePPSettings,
    "reinforce_pp_baseline_advantage": GroupBaselineSettings,
    "remax_advantage": NoSettings,
    "distill_advantage": DistillSettings,
    "overlong_penalty": OverlongPenaltySettings,
    "filter_groups": FilterGroupsSettings,
}

SETTINGS_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    NoSettings, GenerateSettings, LogProbSettings, ForwardSettings, ActorUpdateSettings, CriticUpdateSettings,
    UserFunctionSettings, EnvSettings, ModelSettings,
    *ROLE_SETTINGS.values(), *TRANSFORM_SETTINGS.values(), TrainSettings, DataSettings, RewardSettings, ValSettings,
)}

_NESTED = {"optim": OptimSettings, "lora": LoraSettings, "user_loss": UserFunctionSettings, "env": EnvSettings,
           "val": ValSettings}
_TUPLES = ("betas", "target_modules", "inputs", "outputs", "loggers", "train", "val")


class SettingsError(ValueError):
    """A settings dict that does not match its class (a plan.json from another rlgraph version)."""


def settings_to_dict(settings: Any) -> dict[str, Any]:
    """Plain JSON values; the class name goes beside it (see `CallPlan`, `RolePlan`)."""
    out = dataclasses.asdict(settings)
    for name in _TUPLES:
        _listify(out, name)
    return out


def _listify(data: dict[str, Any], name: str) -> None:
    for value in data.values():
        if isinstance(value, dict):
            _listify(value, name)
    if isinstance(data.get(name), tuple):
        data[name] = list(data[name])


def settings_from_dict(cls: type | str, data: dict[str, Any]) -> Any:
    """`cls(**data)`, strictly: a missing or unknown field is a SettingsError naming it."""
    if isinstance(cls, str):
        if cls not in SETTINGS_CLASSES:
            raise SettingsError(f"unknown settings class {cls!r}")
        cls = SETTINGS_CLASSES[cls]
    names = {f.name for f in dataclasses.fields(cls)}
    missing, unknown = sorted(names - set(data)), sorted(set(data) - names)
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + \
                ([f"unknown {', '.join(unknown)}"] if unknown else [])
        raise SettingsError(f"{cls.__name__}: {'; '.join(parts)}")
    values = dict(data)
    for name, nested in _NESTED.items():
        if name in values and isinstance(values[name], dict):
            values[name] = settings_from_dict(nested, values[name])
    for name in _TUPLES:
        if isinstance(values.get(name), list):
            values[name] = tuple(values[name])
    return cls(**values)
