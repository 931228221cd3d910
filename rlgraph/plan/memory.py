"""Memory per device: what each role replica holds, summed per device, against the pool's `memory`.

docs/memory.md writes out every formula; in short, per device:

- trained role (actor, critic), Adam: fp32 params (the master weights), fp32
  grads, fp32 Adam m and v: 4+4+8 = 16 B/param in fp32 and in bf16 alike (bf16
  is the compute dtype, rlgraph/workers/precision.py); divided by the
  data-parallel size under `strategy = fsdp`, whole under ddp. bf16 under ddp
  adds the bf16 copy its forward passes run on (`compute_copy`, 2 B/param,
  whole): autocast caches the cast of every weight for the forward, and
  autograd keeps the casts until the backward. Under fsdp the bf16 weights
  are FSDP's gathered blocks, one (and the prefetched next) at a time, in place
  of the fp32 blocks an fp32 role gathers: 1/layers of the model each, a
  working buffer like activations, not counted for either dtype.
- LoRA actor (`lora { rank = r }`): the base weights as above (frozen, no grads,
  no Adam state), plus the adapters, r x (in + out) parameters per adapted linear
  layer, at 4 + 4 + 8 B each (fp32 adapter, grad, Adam m and v).
- frozen role (ref, reward_model): params only, in its dtype; sharded like its
  colocation root's strategy (fsdp shards), whole on a pool of its own. A ref on
  the model of a LoRA actor whose devices it shares holds nothing: it is the
  actor's base with the adapters off.
- rollout, and a judge (whose prompts are its template around each sample, and
  whose responses are its verdicts): weights in its dtype split over tp, or nothing for an hf rollout
  colocated with the actor whose model it generates with (the hybrid engine
  reads the actor's weights in place). hf: plus the KV cache of its share of
  the batch. sglang / vllm: `memory_fraction` of the device, weights and KV pool
  (memory_engine.py), whatever the batch.
- per call (memory_activations.py): an update's grads, activations and logits; a
  forward's activations and logits; a colocated engine's memory while it generates.
  Calls on a device run one at a time: its peak is resident + the largest call.
- an out-of-memory names the biggest cause first and only changes verified to fit
  (memory_advice.py). When only the working memory of rows at full length is over
  (the activations and logits of micro-batches counted in rows), a worst case that
  real, shorter rows stay under, it is a warning with the longest row that fits, as
  long as that is at least half the full length (FULL_LENGTH_SHARE; an error below). An
  hf engine's KV cache is not such a case: it grows to the longest of all the rows
  it generates together, and one of hundreds reaching max_new_tokens is common.
  A device that fits by less than its working memory's measured error is a
  warning too (`memory-within-error`: "within the estimate's error: may not fit").
- offload (`offloaded_items`): what a role keeps in host memory leaves its
  device's estimate and is listed in the row's `host` instead; `optimizer_offload`'s
  moments come back for each optimizer step (`optimizer_step`, part of the update).
- a mixture of experts (`Experts`): all its parameters for weights, grads, Adam
  state and a rollout's copy; the experts a token is routed to for activations.

The model's size comes from the model block (`params`, `layers`, ...), else
from the folder's config.json read as plain JSON, else from BUILTIN_MODELS.
Nothing here imports torch or transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlgraph.contract.engines import EngineFacts, engine_facts
from rlgraph.contract.methods import TRAINING_METHODS
from rlgraph.contract.settings import JudgeSettings, ModelSettings
from rlgraph.contract.stages import is_stage
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.diagnostics.codes import CODES
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.validate import did_you_mean
from rlgraph.plan.memory_activations import Pass, activation_bytes, backward_peak
from rlgraph.plan.memory_advice import first_cause, verified_fixes
from rlgraph.plan.memory_engine import EngineBudget, kv_bytes_per_token
from rlgraph.plan.model import MemoryRow, Placement, PoolPlan, RolePlan
from rlgraph.plan.placement import place
from rlgraph.plan.resolve import model_of_settings
from rlgraph.plan.resources import planned_resources
from rlgraph.plan.shape import StepShape
from rlgraph.plan.view import format_bytes

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER_BYTES = 4  # a trained role's params and grads are fp32 in every dtype (its dtype is the compute dtype)
ADAM_BYTES = 8  # fp32 first and second moments (m, v)
TRAINED = ("actor", "critic")
FROZEN = ("ref", "reward_model")

# Shapes of the built-in models, as the config.json their build scripts write.
# `builtin:arith-gpt`: rlgraph/models/build_arith_gpt.py (Architecture) with the
# character tokenizer of rlgraph/models/char_tokenizer.py (4 specials + 46 characters);
# tests/plan/test_memory.py checks that the two stay in step.
BUILTIN_MODELS: dict[str, dict] = {
    "builtin:arith-gpt": {
        "model_type": "llama", "vocab_size": 50, "hidden_size": 64, "intermediate_size": 256,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "max_position_embeddings": 64, "tie_word_embeddings": True,
    },
}
# `builtin:arith-rm` (rlgraph/models/build_arith_rm.py) is arith-gpt's body under a one-score head
# (64 more parameters than the tied LM head it replaces: nothing at this scale).
BUILTIN_MODELS["builtin:arith-rm"] = BUILTIN_MODELS["builtin:arith-gpt"]
# `builtin:arith-gpt-teacher` (rlgraph/models/build_arith_teacher.py): arith-gpt's recipe trained longer
BUILTIN_MODELS["builtin:arith-gpt-teacher"] = BUILTIN_MODELS["builtin:arith-gpt"]
# `builtin:arith-gpt-init` (rlgraph/models/build_arith_init.py): arith-gpt untrained
BUILTIN_MODELS["builtin:arith-gpt-init"] = BUILTIN_MODELS["builtin:arith-gpt"]
# `builtin:arith-tool-gpt` (rlgraph/models/build_arith_tool_gpt.py): arith-gpt's shape, 4 tool-call tags more
BUILTIN_MODELS["builtin:arith-tool-gpt"] = {**BUILTIN_MODELS["builtin:arith-gpt"], "vocab_size": 54}


@dataclass(frozen=True)
class ModelShape:
    params: int | None = None  # all of them: what weights, gradients and optimizer state are counted by
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    vocab: int | None = None
    intermediate: int | None = None  # the MLP's inner size (config.json), for the LoRA adapters' size
    tied: bool = False  # embeddings tied to the LM head (config.json's tie_word_embeddings)
    max_positions: int | None = None  # config.json's max_position_embeddings (vLLM's max_model_len)
    source: str = "spec"  # where the numbers came from: spec | config.json | builtin
    moe: Experts | None = None  # a mixture of experts' MLP; None: dense

    @property
    def has_kv(self) -> bool:
        return None not in (self.layers, self.kv_heads, self.head_dim)

    @property
    def active_params(self) -> int | None:
        """Parameters one token runs through: all of them less the routed experts it is not sent to. What
        compute and activations follow; memory holds all `params`."""
        if self.params is None or self.moe is None or self.hidden is None or self.layers is None:
            return self.params
        idle = (self.moe.experts - self.moe.per_token) * 3 * self.hidden * self.moe.intermediate
        return self.params - self.moe.layers(self.layers) * idle

    @property
    def active_intermediate(self) -> int | None:
        """The MLP width a token's activations have: its experts' (and the shared experts') under MoE."""
        if self.moe is None:
            return self.intermediate
        return self.moe.per_token * self.moe.intermediate + self.moe.shared_intermediate


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts MLP: `experts` routed experts of inner size `intermediate`, `per_token` of them run
    for each token, beside shared experts of total inner size `shared_intermediate` that every token runs; the
    first `dense_layers` layers (DeepSeek's first_k_dense_replace, Qwen's mlp_only_layers) keep a dense MLP."""

    experts: int
    per_token: int
    intermediate: int
    shared_intermediate: int = 0
    dense_layers: int = 0
    sparse_step: int = 1  # Qwen2/3-MoE's decoder_sparse_step: every step-th layer is sparse

    def layers(self, layers: int) -> int:
        """How many of `layers` have experts."""
        return sum(1 for i in range(self.dense_layers, layers) if (i + 1) % self.sparse_step == 0)


def experts_of(cfg: dict) -> Experts | None:
    """The experts of a config.json (Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek, OLMoE key names), or None."""
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    per_token = cfg.get("num_experts_per_tok") or cfg.get("moe_topk")
    if not experts or not per_token:
        return None
    inner = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")  # Mixtral: its experts' size
    if not inner:
        return None
    shared = cfg.get("shared_expert_intermediate_size") or (cfg.get("n_shared_experts") or 0) * inner
    only = cfg.get("mlp_only_layers") or []
    dense = cfg.get("first_k_dense_replace") or (len(only) if only == list(range(len(only))) else 0)
    return Experts(int(experts), int(per_token), int(inner), int(shared), int(dense),
                   int(cfg.get("decoder_sparse_step") or 1))


def count_params(config: dict) -> int | None:
    """All parameters of a Llama / Qwen2/3 / Mistral-shaped decoder from its config.json, experts included
    (Qwen2/3-MoE, Mixtral, DeepSeek's MLP), or None; None for attention of another shape (DeepSeek's MLA)."""
    cfg = config.get("text_config", config) if "hidden_size" not in config else config
    try:
        vocab, hidden, layers = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
        heads, inter = cfg["num_attention_heads"], cfg["intermediate_size"]
    except KeyError:
        return None
    if cfg.get("kv_lora_rank"):  # multi-head latent attention: not the q, k, v, o projections counted here
        return None
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    bias = cfg.get("attention_bias", cfg.get("model_type") in ("qwen2", "qwen2_moe"))
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden + (q + 2 * kv if bias else 0)
    if str(cfg.get("model_type", "")).startswith("qwen3"):
        attention += 2 * head_dim  # q_norm, k_norm
    dense = 3 * hidden * inter  # gate, up, down
    moe = experts_of(cfg)
    mlp = layers * dense
    if moe is not None:
        # a sparse layer: its routed experts, its router, its shared experts (and Qwen2-MoE's gate for them)
        sparse = (moe.experts * 3 * hidden * moe.intermediate + hidden * moe.experts
                  + 3 * hidden * moe.shared_intermediate
                  + (hidden if cfg.get("shared_expert_intermediate_size") else 0))
        moe_layers = moe.layers(layers)
        mlp = moe_layers * sparse + (layers - moe_layers) * dense
    per_layer = attention + 2 * hidden  # + input and post-attention RMSNorm
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + mlp + embeddings + hidden  # + final norm


def _read_config(path: str, base: Path, depth: int = 0) -> tuple[dict, str] | None:
    if path in BUILTIN_MODELS:
        return BUILTIN_MODELS[path], "builtin"
    if path.startswith("builtin:"):
        return None
    if is_stage(path):  # the stage's run's actor, or before it ran, the model its spec starts from
        return _stage_config(path, base, depth)
    for folder in (Path(path), base / path):
        file = folder / "config.json"
        try:
            if file.is_file():
                return json.loads(file.read_text(encoding="utf-8")), "config.json"
        except (OSError, ValueError):
            return None
    return None


def _stage_config(path: str, base: Path, depth: int) -> tuple[dict, str] | None:
    from rlgraph.contract.stages import StageError, stage_model_folder
    from rlgraph.lang.stages import stage_actor_model, stage_program

    try:
        return _read_config(str(stage_model_folder(path)), base, depth + 1)
    except StageError:  # not run yet
        pass
    program = stage_program(path, base) if depth < 8 else None  # a chain of stages, not a loop of them
    start = stage_actor_model(program) if program is not None else None
    return _read_config(start[0], start[1], depth + 1) if start is not None else None


def model_shape(model: ModelSettings, base: Path) -> ModelShape:
    """The model's size and attention shape: the spec's keys first, then config.json or the built-in table."""
    found = _read_config(model.path or "", base)
    config, source = found if found else ({}, "spec")
    cfg = config.get("text_config", config) if "hidden_size" not in config else config
    hidden = model.hidden or cfg.get("hidden_size")
    heads = model.heads or cfg.get("num_attention_heads")
    # config.json's head_dim stands unless the spec redefines the attention shape without it
    head_dim = model.head_dim or (
        None if model.hidden is not None or model.heads is not None else cfg.get("head_dim"))
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return ModelShape(
        params=model.params or count_params(config),
        layers=model.layers or cfg.get("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=model.kv_heads or cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        vocab=model.vocab or cfg.get("vocab_size"),
        intermediate=model.intermediate or cfg.get("intermediate_size"),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        max_positions=cfg.get("max_position_embeddings"),
        source=source if model.params is None else "spec",
        moe=_spec_experts(model) or experts_of(cfg),
    )


EXPERT_KEYS = ("experts", "experts_per_token", "expert_intermediate")


def _partial_experts(model: ModelSettings, decl: Decl) -> Diagnostic | None:
    """Some of the experts' keys without the others: the model cannot be counted as a mixture of experts.
    `decl`: the model's declaration, for where the keys are written."""
    written = [k for k in EXPERT_KEYS if getattr(model, k) is not None]
    if not written or len(written) == len(EXPERT_KEYS):
        return None
    missing = [k for k in EXPERT_KEYS if k not in written]
    return warning("memory-unknown", f"model `{model.name}` says {', '.join(f'`{k}`' for k in written)} but not "
                   f"{', '.join(f'`{k}`' for k in missing)}: its experts are not counted", decl.span_of(written[0]),
                   "a mixture of experts needs all three: e.g. `experts = 128  experts_per_token = 8  "
                   "expert_intermediate = 768` (config.json's num_experts, num_experts_per_tok, "
                   "moe_intermediate_size)", label="incomplete")


def _spec_experts(model: ModelSettings) -> Experts | None:
    """The model block's `experts`, `experts_per_token`, `expert_intermediate`, `shared_expert_intermediate`."""
    if not (model.experts and model.experts_per_token and model.expert_intermediate):
        return None
    return Experts(model.experts, model.experts_per_token, model.expert_intermediate,
                   model.shared_expert_intermediate or 0)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _root(plan: RolePlan, plans: dict[str, RolePlan]) -> RolePlan:
    """The role whose devices `plan` runs on (itself when it has a pool of its own)."""
    return plans.get(plan.colocate, plan) if plan.colocate else plan


def _sharded(plan: RolePlan, plans: dict[str, RolePlan]) -> bool:
    """Sharded over its replicas (fsdp): a trained role by its own strategy, a ref by the one its settings
    resolved (its root's), a reward model by its trained root's (whole on a pool of its own)."""
    strategy = getattr(plan.settings, "strategy", None)
    root = _root(plan, plans)
    if strategy is None and root is not plan and root.kind in TRAINED:
        strategy = getattr(root.settings, "strategy", None)
    return strategy == "fsdp"


def _engine(plan: RolePlan) -> EngineFacts:
    return engine_facts(plan.settings.engine)  # the schema admits only the contract's engine names


def shares_actor_weights(plan: RolePlan, plans: dict[str, RolePlan]) -> bool:
    """An hf rollout colocated with the actor whose model it generates with reads the actor's weights in place.

    Other engines (sglang, vllm) load the weights into their own memory, so they hold a copy even when colocated.
    """
    root = _root(plan, plans)
    return (plan.kind == "rollout" and _engine(plan).in_place and root is not plan
            and root.kind == "actor" and plan.model == root.model)


def lora_rank(plan: RolePlan) -> int:
    """The rank of a LoRA actor's adapters; 0 = full fine-tuning (no LoraSettings)."""
    lora = getattr(plan.settings, "lora", None) if plan.kind == "actor" else None
    return lora.rank if lora is not None else 0


def shares_actor_base(plan: RolePlan, plans: dict[str, RolePlan]) -> bool:
    """A ref on the model of a LoRA actor whose devices it shares is that actor's base (its adapters off)."""
    root = _root(plan, plans)
    return plan.kind == "ref" and any(
        lora_rank(actor) and _root(actor, plans) is root and actor.model == plan.model for actor in plans.values())


def adapter_params(shape: ModelShape, rank: int, targets: str | list[str]) -> int | None:
    """Parameters of LoRA adapters of rank `rank` on a Llama-shaped decoder: rank x (in + out) per adapted
    linear layer. "all-linear" adapts every projection (not the output head); a name this table does not
    know adds nothing. None when the shape is not known well enough."""
    if None in (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim):
        return None
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}
    moe = shape.moe
    i = intermediate_size(shape) if moe is None else moe.intermediate
    if i:
        dims.update(gate_proj=(h, i), up_proj=(h, i), down_proj=(i, h))
    elif targets == "all-linear":
        return None
    names = list(dims) if targets == "all-linear" else [t for t in dict.fromkeys(targets) if t in dims]
    if moe is None:
        return shape.layers * sum(rank * (dims[n][0] + dims[n][1]) for n in names)
    # MoE: each expert's gate/up/down are linear layers of their own (as are the shared experts' and, under
    # all-linear, the router); `intermediate` stays the dense layers' MLP
    attention = sum(rank * (dims[n][0] + dims[n][1]) for n in names if n.endswith(("q_proj", "k_proj", "v_proj",
                                                                                   "o_proj")))
    mlp = [n for n in names if n in ("gate_proj", "up_proj", "down_proj")]
    sparse = len(mlp) * rank * (moe.experts * (h + moe.intermediate) + (h + moe.shared_intermediate)
                                * bool(moe.shared_intermediate))
    sparse += rank * (h + moe.experts) if targets == "all-linear" else 0
    dense_i = shape.intermediate or moe.intermediate
    dense = len(mlp) * rank * (h + dense_i)
    sparse_layers = moe.layers(shape.layers)
    return shape.layers * attention + sparse_layers * sparse + (shape.layers - sparse_layers) * dense


def offloaded_items(plan: RolePlan) -> tuple[str, ...]:
    """The items of `role_memory` that a role keeps in host memory instead of on its device.

    A trained role's `param_offload` is FSDP2's CPUOffloadPolicy: each rank's shards of the parameters,
    gradients and AdamW state live in host memory and the optimizer steps there; the device holds only the
    blocks gathered for the pass that runs (a working buffer, not counted either way). `optimizer_offload`
    keeps AdamW's moments on the host between steps; each step moves them in (`optimizer_step`, a part of
    the update's peak, role_need). A ref's `param_offload` keeps its weights on the host between its
    log_prob calls (the estimate is the steady state between calls).

    verl's `fsdp_config.param_offload` is none of these for a trained role: it moves the shards in for each
    call, so the update holds them all on the device (rlgraph's `param_offload` is verl's `offload_policy`);
    a verl launch's update is estimated as the role without `param_offload` (docs/memory.md, Offload)."""
    settings = plan.settings
    if plan.kind in TRAINED:
        if settings.param_offload:
            return "params", "adapters", "grads", "optimizer"
        return ("optimizer",) if settings.optimizer_offload else ()
    return ("params",) if plan.kind == "ref" and settings.param_offload else ()


def kv_cache_bytes(shape: ModelShape, *, prompt_length: int, new_tokens: int, sequences: int, dtype: str,
                   tp: int = 1) -> int:
    """KV cache per device: 2 (K, V) × layers × kv_heads per device × head_dim × tokens × sequences × bytes."""
    return (kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, DTYPE_BYTES[dtype], tp)
            * (prompt_length + new_tokens) * sequences)


def intermediate_size(shape: ModelShape) -> int | None:
    """The MLP's inner size a token's activations have: config.json's, else what the parameter count leaves
    for the MLPs (3 h i a layer); under MoE its experts' and the shared experts' together."""
    if shape.moe is not None:
        return shape.active_intermediate
    if shape.intermediate:
        return shape.intermediate
    if None in (shape.params, shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim):
        return None
    h = shape.hidden
    attention = 2 * h * shape.heads * shape.head_dim + 2 * h * shape.kv_heads * shape.head_dim
    embeddings = 2 * (shape.vocab or 0) * h
    rest = shape.params - embeddings - shape.layers * attention
    return rest // (3 * h * shape.layers) if rest > 0 else None


def micro_pass(step: StepShape, role: Any, kwargs: dict, samples: int, split: int = 1) -> Pass:
    """The largest micro-batch of a call that gets `samples` sequences on each data-parallel group of `split`
    devices (1: each device; `sequence_parallel` > 1: the devices that share each sequence).

    A token budget bounds the pass whatever the rows' lengths (rows of full length; per device, so a group's
    micro-batch holds `split` times it, as verl's max_token_len_per_gpu x sp); a micro-batch counted in rows
    holds rows of `step.row_length` tokens (full length unless the verdict asks at a shorter one)."""
    budget = kwargs.get("micro_batch_tokens") or role.micro_batch_tokens  # role: its resolved settings
    micro = kwargs.get("micro_batch") or role.micro_batch
    if budget:
        rows = max(1, budget * split // max(step.length, 1))
        return Pass(rows=max(1, min(rows, samples)), length=step.length, scored=step.response, split=split)
    length = step.row_length
    return Pass(rows=max(1, min(micro or samples, samples)), length=length, scored=min(step.response, length),
                split=split)


FORWARD_METHODS = ("log_prob", "values", "score", "top_k")
VALUE_HEADS = ("critic", "reward_model")  # one score per position: no vocabulary logits


def _call_phases(plan: RolePlan, shape: ModelShape | None, step: StepShape, dtype_bytes: int) -> tuple[dict[str, dict[str, int]], set[str]]:
    """Activations and logits of each of the role's calls, by call (`actor.update`, `ref.log_prob`, ...); and the
    updates whose mini-batch takes several micro-batches (gradients accumulate: the second one's backward starts
    with the first one's gradients)."""
    inter = intermediate_size(shape) if shape is not None else None
    if shape is None or None in (shape.layers, shape.hidden, inter) or not step.batch or not step.length:
        return {}, set()
    split = max(plan.sequence_parallel, 1)
    groups = max(plan.replicas // split, 1)  # data-parallel groups: each takes its own samples
    share = _ceil_div(step.batch * step.n, groups)  # samples on each device (each group)
    kv = shape.kv_heads * shape.head_dim if shape.kv_heads and shape.head_dim else None
    phases, accumulated = {}, set()
    settings = plan.settings
    for method, kwargs in step.calls.get(plan.name, []):
        backward = method in TRAINING_METHODS
        if not backward and method not in FORWARD_METHODS:
            continue
        samples = share
        minibatch = kwargs.get("minibatch")
        if backward and minibatch:
            samples = max(1, _ceil_div(minibatch * step.n, groups))
        micro = micro_pass(step, settings, kwargs, samples, split)
        items = activation_bytes(micro, layers=shape.layers, hidden=shape.hidden, intermediate=inter,
                                 vocab=shape.vocab, dtype_bytes=dtype_bytes, backward=backward,
                                 checkpointing=getattr(settings, "gradient_checkpointing", False),
                                 value_head=plan.kind in VALUE_HEADS, kv=kv, heads=shape.heads)
        phases[f"{plan.name}.{method}"] = items
        if backward and (micro.rows < samples or kwargs.get("micro_batch_tokens") or settings.micro_batch_tokens):
            accumulated.add(f"{plan.name}.{method}")
    return phases, accumulated


@dataclass
class RoleNeed:
    """What one replica of a role holds on each of its devices: `resident` all step long, `phases` only while a
    call runs (the grads and activations of an update, the working memory of a log_prob, a colocated engine's
    memory while it generates: it releases it while the trainer runs)."""

    resident: dict[str, int] = field(default_factory=dict)
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    budget: EngineBudget | None = None  # a paged engine's, where the device's memory is known


def shares_devices(plan: RolePlan, plans: dict[str, RolePlan]) -> bool:
    """Another role runs on this role's devices (colocated with it, or it with another)."""
    root = _root(plan, plans)
    return any(other is not plan and _root(other, plans) is root for other in plans.values())


def role_need(plan: RolePlan, plans: dict[str, RolePlan], shape: ModelShape | None, step: StepShape,
              capacity: int | None, device: str | None) -> RoleNeed:
    """Bytes per device of one replica of the role `plan`, resident and per call (from its resolved settings;
    `plans`: every role's, by name; `device`: the device kind of the pool it runs on); and what could not be
    estimated."""
    need = RoleNeed()
    settings, role = plan.settings, plan
    b = DTYPE_BYTES[plan.dtype_label]
    P = shape.params if shape else None
    shard = plan.replicas if _sharded(plan, plans) else 1
    if role.kind in TRAINED + FROZEN:
        if P is None:
            need.unknown.append("weights")
            return need
        need.phases, accumulated = _call_phases(plan, shape, step, b)
    if role.kind in TRAINED:
        trained = P  # parameters with grads and Adam state
        need.resident["params"] = _ceil_div(P * MASTER_BYTES, shard)
        if lora_rank(role):  # only the adapters train; the base is frozen
            trained = adapter_params(shape, lora_rank(role), settings.lora.target_modules)
            if trained is None:
                need.unknown.append("adapters")
                return need
            need.resident["adapters"] = trained * MASTER_BYTES
        need.resident["optimizer"] = _ceil_div(trained * ADAM_BYTES, shard)
        if b != MASTER_BYTES and shard == 1:
            need.resident["compute_copy"] = P * b  # autocast's bf16 copy of every weight, during each forward
        # the gradients exist from a training call's backward (update, sft, distill) to its optimizer step; the
        # backward allocates them as it frees the activations, the LM head's first (none for adapters or a value head)
        head = 0 if lora_rank(role) or role.kind == "critic" else (shape.vocab or 0) * (shape.hidden or 0)
        grads = _ceil_div(trained * MASTER_BYTES, shard)
        trains = [f"{role.name}.{m}" for m in TRAINING_METHODS if f"{role.name}.{m}" in need.phases]
        for update in trains or [f"{role.name}.update"]:
            need.phases[update] = backward_peak(need.phases.get(update, {}), grads=grads,
                                                head_grads=_ceil_div(head * MASTER_BYTES, shard),
                                                accumulated=update in accumulated, tied=bool(head) and shape.tied)
            if settings.optimizer_offload and not settings.param_offload:
                # the moments come back to the device for each optimizer step (workers/offload.py
                # state_on_device), beside the gradients, once the backward has freed the activations: the
                # update peaks at the larger
                step = {"grads": grads, "optimizer_step": need.resident["optimizer"]}
                if sum(step.values()) > sum(need.phases[update].values()):
                    need.phases[update] = step
    elif role.kind in FROZEN:
        need.resident["params"] = 0 if shares_actor_base(plan, plans) else _ceil_div(P * b, shard)
    elif role.kind in ("rollout", "judge"):  # a judge generates its verdicts as a rollout generates
        _rollout_need(plan, plans, shape, step, capacity, device, need)
    return need


def judge_step(judge: JudgeSettings, step: StepShape) -> StepShape:
    """What a judge generates from: one prompt per sample of the step (batch x n), each its template around the
    sample's prompt, response and ground truth (counted as long as a response), one token per character of the
    template at most; and verdicts of its max_new_tokens."""
    return replace(step, batch=(step.batch or 0) * step.n or None, n=1,
                   prompt=step.prompt + 2 * step.response + len(judge.template), response=judge.max_new_tokens)


def _rollout_need(plan: RolePlan, plans: dict[str, RolePlan], shape: ModelShape | None, step: StepShape,
                  capacity: int | None, device: str | None, need: RoleNeed) -> None:
    settings, dtype = plan.settings, plan.dtype_label
    generate = f"{plan.name}.generate"
    if plan.kind == "judge":
        step, generate = judge_step(settings, step), f"{plan.name}.score"
    if shares_actor_weights(plan, plans):
        need.resident["weights"] = 0
        weights = 0
    elif shape is None or shape.params is None:
        need.unknown.append("weights")
        weights = None
    else:
        weights = _ceil_div(shape.params * DTYPE_BYTES[dtype], plan.tp)
    if shape is None or not shape.has_kv:
        need.unknown.append("kv_cache")
        if weights:
            need.resident["weights"] = weights
        return
    sequences = _ceil_div((step.batch or 0) * step.n, max(plan.replicas, 1))
    limit = settings.max_sequences
    cpu_kv_cache = _engine(plan).cpu_kv_cache if device == "cpu" else None
    if cpu_kv_cache is not None and weights is not None and shape.max_positions:
        # the KV cache the engine takes on CPU, by the same function it is sized with (rlgraph/contract/engines.py),
        # held for the whole run (vLLM's CPU build has no sleep mode)
        need.resident.update({"weights": weights, "kv_pool": cpu_kv_cache(
            layers=shape.layers, kv_heads=shape.kv_heads, head_dim=shape.head_dim, dtype_bytes=DTYPE_BYTES[dtype],
            max_len=shape.max_positions, max_sequences=limit)})
        return
    if _engine(plan).paged and capacity is not None and weights is not None:
        need.budget = EngineBudget(capacity, settings.memory_fraction, weights,
                                   kv_cache_bytes(shape, prompt_length=step.prompt, new_tokens=step.response,
                                                  sequences=1, dtype=dtype, tp=plan.tp), step.length, sequences,
                                   limit)
        engine = {"weights": weights, "kv_pool": need.budget.kv_pool}  # the whole fraction, whatever the batch
        # released while the trainer runs (wake/sleep, verl's hybrid engine); a judge's engine stays
        if shares_devices(plan, plans) and plan.kind == "rollout":
            need.phases[generate] = engine
        else:
            need.resident.update(engine)
        return
    at_once = min(sequences, limit) if limit else sequences  # hf: the batch in chunks of max_sequences
    # at full length whatever the verdict asks: HF's cache grows for the whole chunk together until its last
    # sequence ends, and among hundreds of samples one that runs to max_new_tokens is the common case
    kv = kv_cache_bytes(shape, prompt_length=step.prompt, new_tokens=step.response, sequences=at_once,
                        dtype=dtype, tp=plan.tp) if step.batch else None
    if weights:
        need.resident["weights"] = weights
    if kv is not None:
        need.phases[generate] = {"kv_cache": kv}  # the batch it generates at once, freed after the call


def _unknown_builtin(program: Program, model: ModelSettings | None) -> Diagnostic | None:
    """A `builtin:` path that names no built-in model (a typo such as `builtin:arith-gtp`): an error at the path."""
    path = (model.path or "") if model else ""
    if not path.startswith("builtin:") or path in BUILTIN_MODELS:
        return None
    hints = [hint for hint in (did_you_mean(path, BUILTIN_MODELS),) if hint]
    return error("unknown-model", f"`{path}` is not a built-in model", program.models[model.name].span_of("path"),
                 *hints,
                 "the built-in models: " + ", ".join(f"`{name}`" for name in BUILTIN_MODELS),
                 label="no such built-in model")


def _unknown_diagnostic(program: Program, role: Decl, model_name: str | None, what: list[str]) -> Diagnostic:
    model = program.models.get(model_name) if model_name else None
    where = model.span_of("path") if model else role.span
    name = f"model `{model_name}`" if model_name else f"`{role.name}`"
    if "adapters" in what:
        return warning("memory-unknown", f"the LoRA adapters of `{role.name}` cannot be estimated: {name} does not "
                       "say its `layers`, `heads`, `hidden` size and (for all-linear) its MLP size", where,
                       "point `path` at a folder with config.json")
    if "weights" in what:
        return warning("memory-unknown", f"the memory of `{role.name}` cannot be estimated: {name} has no `params`, "
                       "no readable config.json and is not a built-in model", where,
                       f"add `params = 7B` (the parameter count) to {name}",
                       "add `layers`, `hidden`, `heads`, `kv_heads` too for the rollout's KV cache")
    return warning("memory-unknown", f"the KV cache of `{role.name}` cannot be estimated: {name} does not say "
                   "its `layers`, `heads` and `hidden` size", where,
                   f"add e.g. `layers = 28  hidden = 3584  heads = 28  kv_heads = 4` to {name}, "
                   "or point `path` at a folder with config.json")


def _engine_diagnostics(role: Decl, plan: RolePlan, budget: EngineBudget) -> list[Diagnostic]:
    where = role.span_of("memory_fraction")
    engine = f"`{role.name}` ({plan.settings.engine}, tp {plan.tp})"
    share = (f"memory_fraction {budget.fraction:g} of {format_bytes(budget.capacity)} = "
             f"{format_bytes(budget.reserved)}")
    fix = f"set `memory_fraction = {budget.fraction_needed:.2f}` or more (the weights and one sequence)"
    if budget.weights > budget.reserved:
        return [error("engine-memory", f"{engine} cannot hold its weights: {format_bytes(budget.weights)} a device, "
                      f"more than its {share}", where, fix, label=f"needs {budget.fraction_needed:.2f}")]
    if not budget.concurrent:
        return [error("engine-memory", f"{engine} has no room for one sequence of {budget.length:,} tokens "
                      f"({format_bytes(budget.per_sequence)} of KV cache): its {share} less "
                      f"{format_bytes(budget.weights)} of weights leaves {format_bytes(budget.kv_pool)}", where, fix,
                      label=f"needs {budget.fraction_needed:.2f}")]
    if not budget.sequences:
        return []
    waves = budget.waves
    return [Diagnostic("engine-batch", CODES["engine-batch"].severity,
                       f"{engine} holds {budget.pool_holds:,} sequences of {budget.length:,} tokens at once "
                       f"(a KV pool of {format_bytes(budget.kv_pool)}: {share} less "
                       f"{format_bytes(budget.weights)} of weights){budget.limit_note()}; its {budget.sequences:,} "
                       f"samples a step run "
                       f"in {waves} wave{'s' * (waves != 1)}", where)]


def estimate(program: Program, step: StepShape, models: dict[str, ModelSettings | None], pools: list[PoolPlan],
             roles: list[RolePlan], placements: list[Placement]) -> tuple[list[MemoryRow], list[Diagnostic]]:
    """One MemoryRow per device of every pool, and out-of-memory / engine / memory-unknown diagnostics.
    `step`: the step's shape (shape.step_shape, from the compiled graph and the resolved settings); `models`:
    the models' settings (resolve.models_settings)."""
    known: dict[str, ModelShape] = {}  # the models' shapes, read once for every estimate below
    rows, peaks, diagnostics = _estimate(program, step, models, pools, roles, placements, known)

    def rows_at(longest: int) -> list[MemoryRow]:  # the estimate with a micro-batch's rows at most this long
        return _estimate(program, replace(step, longest=longest), models, pools, roles, placements, known)[0]

    diagnostics += _check_fit(program, step, models, pools, rows, peaks, {r.name: r for r in roles}, rows_at, known)
    return rows, diagnostics


def _estimate(program: Program, step: StepShape, models: dict[str, ModelSettings | None], pools: list[PoolPlan],
              roles: list[RolePlan], placements: list[Placement], known: dict[str, ModelShape] | None = None):
    """`known`: the shapes of models read by an estimate before, by name, filled with those read here (a shape
    depends on its model's settings and the spec's folder alone, which no estimate of one spec changes)."""
    known = {} if known is None else known
    diagnostics: list[Diagnostic] = []
    base = Path(program.path).parent
    shapes: dict[str, ModelShape] = {}
    capacity = {p.name: p.device_memory_bytes for p in pools}
    devices = {p.name: p.device for p in pools}
    needs: dict[str, RoleNeed] = {}
    host_items: dict[str, tuple[str, ...]] = {}
    warned: set[tuple[str, str]] = set()
    placed_pool = {p.role: p.pool for p in placements}
    plans = {r.name: r for r in roles}
    for plan in roles:
        role = program.roles[plan.name]
        if plan.settings is None:  # a value its settings read is wrong (reported): nothing to estimate it from
            continue
        model_name = plan.model
        model = model_of_settings(models, model_name)  # InvalidValue: a wrong value in it (reported)
        if model is not None and model_name not in shapes:
            if model_name not in known:
                known[model_name] = model_shape(model, base)
            shapes[model_name] = known[model_name]
            partial = _partial_experts(model, program.models[model_name])
            if partial is not None:
                diagnostics.append(partial)
        need = role_need(plan, plans, shapes.get(model_name), step, capacity.get(placed_pool.get(plan.name)),
                         devices.get(_root(plan, plans).pool))
        needs[plan.name], host_items[plan.name] = need, offloaded_items(plan)
        if need.budget is not None:
            diagnostics += _engine_diagnostics(role, plan, need.budget)
        misnamed = _unknown_builtin(program, model)
        if misnamed is not None:  # not "add params = 7B": the name is wrong
            if (model_name, "builtin") not in warned:
                warned.add((model_name, "builtin"))
                diagnostics.append(misnamed)
            continue
        for what in need.unknown:
            key = (model_name or plan.name, "weights") if what == "weights" else (plan.name, what)
            if key not in warned:
                warned.add(key)
                diagnostics.append(_unknown_diagnostic(program, role, model_name, [what]))

    rows: dict[tuple[str, int, int], MemoryRow] = {}
    phases: dict[tuple[str, int, int], dict[str, dict[str, int]]] = {}
    for pool in pools:
        for node in range(pool.nodes):
            for device in range(pool.devices_per_node):
                rows[pool.name, node, device] = MemoryRow(pool.name, node, device, 0, pool.device_memory_bytes, {})
                phases[pool.name, node, device] = {}

    def add(into: dict[str, int], key: str, size: int) -> None:
        into[key] = into.get(key, 0) + size

    for p in placements:
        need, host = needs.get(p.role), host_items.get(p.role, ())
        if need is None:
            continue
        for device in p.devices:
            row = rows.get((p.pool, p.node, device))
            if row is None:
                continue
            for item, size in need.resident.items():
                add(row.host if item in host else row.breakdown, f"{p.role}/{item}", size)
            for call, items in need.phases.items():
                for item, size in items.items():
                    if item in host:
                        add(row.host, f"{p.role}/{item}", size)
                    else:
                        add(phases[p.pool, p.node, device].setdefault(call, {}), f"{p.role}/{item}", size)
    peaks: dict[tuple[str, int, int], tuple[str | None, dict[str, int]]] = {}
    for key, row in rows.items():
        # the calls on one device run one after another: the peak is the largest call on top of what stays
        totals = {call: sum(items.values()) for call, items in phases[key].items()}
        peak = max(totals, key=lambda call: totals[call], default=None)
        if peak is not None:
            for item, size in phases[key][peak].items():
                add(row.breakdown, item, size)
        row.estimated_bytes = sum(row.breakdown.values())
        peaks[key] = (peak, totals)
    return list(rows.values()), peaks, diagnostics


def _check_fit(program: Program, step: StepShape, models: dict[str, ModelSettings | None], pools: list[PoolPlan],
               rows: list[MemoryRow], peaks: dict,
               roles: dict[str, RolePlan], rows_at: Callable[[int], list[MemoryRow]],
               known: dict[str, ModelShape]) -> list[Diagnostic]:
    out = []
    length = step.length
    for pool in pools:
        capacity = pool.device_memory_bytes
        if capacity is None:
            continue
        over = [r for r in rows if r.pool == pool.name and r.estimated_bytes > capacity]
        if not over:
            out += _within_error(program, pool, [r for r in rows if r.pool == pool.name])
            continue
        worst = max(over, key=lambda r: r.estimated_bytes)

        def holds(longest: int) -> bool:
            return all(r.estimated_bytes <= capacity for r in rows_at(longest) if r.pool == pool.name)

        longest = _longest_that_fits(holds, length) if length > 1 and holds(1) else 0
        if longest >= FULL_LENGTH_SHARE * length:  # only the working memory of long rows does not fit: a worst case
            out.append(_full_length_warning(program, step, models, pool, worst, length, longest, known))
            continue
        items = sorted(worst.breakdown.items(), key=lambda kv: -kv[1])
        terms = " + ".join(f"{k} {format_bytes(v)}" for k, v in items if v)
        peak, totals = peaks[worst.pool, worst.node, worst.device]
        at = ""
        if peak is not None:
            others = ", ".join(f"`{call}` {format_bytes(size)}" for call, size in sorted(totals.items(),
                                                                                          key=lambda kv: -kv[1])
                               if call != peak)
            at = f" (while `{peak}` runs{'; the other calls, one at a time: ' + others if others else ''})"
        decl = program.pools[pool.name]
        cause, top_role = first_cause(program, worst, capacity, roles)
        role = program.roles.get(top_role)
        total = pool.nodes * pool.devices_per_node
        fixes = verified_fixes(program, pool.name, fit_test(program, step, models, known), step)
        short = (f"; at full length ({length:,} tokens) it holds micro-batches whose longest row is up to "
                 f"{longest:,} tokens, under {FULL_LENGTH_SHARE:.0%} of it" if longest else "")
        out.append(error(
            "out-of-memory",
            f"estimated {format_bytes(worst.estimated_bytes)} on device {worst.device} of node {worst.node} of pool "
            f"`{pool.name}` exceeds its {format_bytes(capacity)} ({len(over)} of {total} device"
            f"{'s' * (total != 1)} over, by {math.ceil(100 * (worst.estimated_bytes / capacity - 1))}%){short}",
            decl.span_of("memory"),
            cause,
            f"per device{at}: {terms}",
            *(fixes or ["no single change of sharding, offload, checkpointing, micro-batch, memory fraction or "
                        "device count makes it fit: a smaller model, or more devices and fsdp together"]),
            label=f"{format_bytes(capacity)} < {format_bytes(worst.estimated_bytes)}",
            notes=[(f"`{top_role}` holds the most", role.span)] if role is not None else ()))
    return out


# A launch over its devices only at full length is a warning while rows of at least this share of the full length
# fit: real rows are shorter (verl runs such launches); below it, an error. Calibrated against verl's recorded
# batch-size searches (docs/memory.md): every batch verl ran holds rows of at least 837 of 1,536 tokens (54%) in
# the estimate, the largest of each search that ran out of memory at most 759 (49%). The smaller sizes that ran
# out (72B at 23 and 24 prompts a GPU: 1,041 and 993 tokens) stay warnings: the estimate cannot tell them apart.
FULL_LENGTH_SHARE = 0.5

# How far the working memory of a pass (activations, logits) may be off: the worst of bench/calibrate_memory.py's
# measurements (docs/memory.md, Calibration: every pass within 0.84-1.05 of its estimate). The weights, grads
# and optimizer state are counted exactly; the GPU's allocator and context are not measured at all.
WORKING_MEMORY_ERROR = 0.16
WORKING_ITEMS = ("activations", "logits")


def _within_error(program: Program, pool: PoolPlan, rows: list[MemoryRow]) -> list[Diagnostic]:
    """A device that fits by less than its working memory's error: not a pass but a warning, since a
    launch there may run out of memory as the measured ones could (verl's batch-size searches)."""
    capacity = pool.device_memory_bytes

    def error_of(row: MemoryRow) -> int:
        working = sum(v for k, v in row.breakdown.items() if k.rpartition("/")[2] in WORKING_ITEMS)
        return math.ceil(WORKING_MEMORY_ERROR * working)

    close = [r for r in rows if r.estimated_bytes + error_of(r) > capacity]
    if not close:
        return []
    worst = max(close, key=lambda r: r.estimated_bytes + error_of(r))
    return [warning(
        "memory-within-error",
        f"within the estimate's error: may not fit: device {worst.device} of node {worst.node} of pool "
        f"`{pool.name}` needs an estimated {format_bytes(worst.estimated_bytes)} of its "
        f"{format_bytes(capacity)}, and its working memory (activations, logits) may be "
        f"{WORKING_MEMORY_ERROR:.0%} larger: up to {format_bytes(worst.estimated_bytes + error_of(worst))}",
        program.pools[pool.name].span_of("memory"),
        "per device: " + " + ".join(f"{k} {format_bytes(v)}" for k, v in
                                    sorted(worst.breakdown.items(), key=lambda kv: -kv[1]) if v),
        "a smaller micro_batch or micro_batch_tokens leaves room for the error (docs/memory.md, Calibration)",
        label=f"{format_bytes(worst.estimated_bytes)} of {format_bytes(capacity)}")]


def _longest_that_fits(holds: Callable[[int], bool], length: int) -> int:
    """The longest row (tokens) at which `holds`, by bisection: holds(1) is true, holds(length) false."""
    low, high = 1, length
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if holds(middle) else (low, middle)
    return low


def _full_length_warning(program: Program, step: StepShape, models: dict[str, ModelSettings | None], pool: PoolPlan,
                         worst: MemoryRow, length: int, longest: int,
                         known: dict[str, ModelShape]) -> Diagnostic:
    """Only the working memory that grows with the rows' lengths does not fit: the micro-batches counted in rows
    (their activations and logits), at rows of full length. Real rows are mostly
    shorter (verl runs such launches), so this is a warning, with the length that fits and the fixes that
    bound the working memory whatever the lengths."""
    capacity = pool.device_memory_bytes
    fixes = verified_fixes(program, pool.name, fit_test(program, step, models, known), step)
    return warning(
        "memory-at-full-length",
        f"with every row at full length ({step.prompt:,} prompt + {step.response:,} response = {length:,} tokens) "
        f"device {worst.device} of node {worst.node} of pool `{pool.name}` needs an estimated "
        f"{format_bytes(worst.estimated_bytes)}, over its {format_bytes(capacity)}; it holds micro-batches whose "
        f"longest row is up to {longest:,} tokens",
        program.pools[pool.name].span_of("memory"),
        "per device at full length: " + " + ".join(
            f"{k} {format_bytes(v)}" for k, v in sorted(worst.breakdown.items(), key=lambda kv: -kv[1]) if v),
        "the activations and logits of a micro-batch counted in rows grow with the "
        "rows' lengths; what does not depend on them fits. A token budget (`micro_batch_tokens`, verl's "
        "use_dynamic_bsz) bounds them whatever the lengths",
        *(fixes or ["no single change of micro-batch, token budget or checkpointing makes full-length rows fit"]),
        label=f"rows up to {longest:,} tokens fit")


def fit_test(program: Program, step: StepShape, models: dict[str, ModelSettings | None],
             known: dict[str, ModelShape] | None = None) -> Callable[[Program, str], bool]:
    """The test a change to `program` must pass to be offered as a fix of `pool`: the pool's devices hold the
    estimate (engines included), and the compiler's rules that read what a change sets find no error the spec did
    not have already (more devices change the samples each replica gets, which a micro-batch must divide).

    A change sets role and pool keys (memory_advice.Change): it is resolved into settings and placed
    (placement.place, the one resolution), then the estimate and the compiler's resource rules (batch
    arithmetic, param_offload's sharding: `resource_errors`) read those settings, on the step graph compiled
    once (`step.graph`: a change sets no key the graph is built from). No other check of the compiler finds
    another error with a change (tests/plan/test_memory_fit.py holds that for every kind of change). `step` is the shape
    of `program`'s step and of every change's: a change sets role and pool keys, none of which it is made of;
    `models` likewise: the models' settings, which no change edits, and `known` the shapes read of them (filled
    here with any not read yet: a model's shape is the same for every change)."""
    known = {} if known is None else known
    before = resource_errors(program, step, place(program))

    def fits(changed: Program, pool: str) -> bool:
        placed = place(changed)
        return _fits(program, placed, pool, step, models, known) and resource_errors(program, step, placed) <= before

    return fits


def resource_errors(program: Program, step: StepShape, placed) -> set[tuple[str, str]]:
    """The errors of the compiler's resource rules (rlgraph.compiler.topology.RoleResources) on the roles
    `placed` (placement.place's result), as (code, message)."""
    from rlgraph.compiler import run_check
    from rlgraph.compiler.passes.batch import batch_rules
    from rlgraph.compiler.passes.offload import offload_rules

    from rlgraph.compiler.graph import StepGraph

    pools, roles = placed[0], placed[1]
    resources = planned_resources(program, pools, roles)
    graph = step.graph if step.graph is not None else StepGraph()  # no step: no call to check
    found = run_check(batch_rules, program, graph, resources) + run_check(offload_rules, resources)
    return {(d.code, d.message) for d in found if d.is_error}


def _fits(program: Program, placed, pool: str, step: StepShape, models: dict[str, ModelSettings | None],
          known: dict[str, ModelShape]) -> bool:
    """Whether `pool`'s devices hold the estimate of the roles `placed` (placement.place's result), engines
    included. `program`: the spec, for its folder and where keys are written (no key a change sets)."""
    pools, roles, placements, diagnostics = placed
    if any(d.is_error for d in diagnostics):
        return False
    rows, _, diagnostics = _estimate(program, step, models, pools, roles, placements, known)
    if any(d.code == "engine-memory" for d in diagnostics):
        return False
    return all(r.estimated_bytes <= r.capacity_bytes for r in rows if r.pool == pool and r.capacity_bytes)
