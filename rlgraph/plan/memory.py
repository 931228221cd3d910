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
- rollout: weights in its dtype split over tp, or nothing for an hf rollout
  colocated with the actor whose model it generates with (the hybrid engine
  reads the actor's weights in place; sglang keeps a copy of its own); plus the
  KV cache of its share of the batch.
- offload (`offloaded_items`): what a role keeps in host memory leaves its
  device's estimate and is listed in the row's `host` instead.

The model's size comes from the model block (`params`, `layers`, ...), else
from the folder's config.json read as plain JSON, else from BUILTIN_MODELS.
Nothing here imports torch or transformers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from rlgraph.compiler.topology import model_of, root_of
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.plan.model import MemoryRow, Placement, PoolPlan, RolePlan
from rlgraph.plan.view import format_bytes
from rlgraph.spec.program import Decl, Program
from rlgraph.spec.validate import did_you_mean

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER_BYTES = 4  # a trained role's params and grads are fp32 in every dtype (its dtype is the compute dtype)
ADAM_BYTES = 8  # fp32 first and second moments (m, v)
TRAINED = ("actor", "critic")
FROZEN = ("ref", "reward_model")
IN_PLACE_ENGINES = ("hf",)  # generate with the colocated actor's own module: no second copy of the weights

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


@dataclass(frozen=True)
class ModelShape:
    params: int | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    vocab: int | None = None
    intermediate: int | None = None  # the MLP's inner size (config.json), for the LoRA adapters' size
    source: str = "spec"  # where the numbers came from: spec | config.json | builtin

    @property
    def has_kv(self) -> bool:
        return None not in (self.layers, self.kv_heads, self.head_dim)


def count_params(config: dict) -> int | None:
    """Parameters of a Llama / Qwen2 / Mistral-shaped decoder from its config.json, or None."""
    cfg = config.get("text_config", config) if "hidden_size" not in config else config
    try:
        vocab, hidden, layers = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
        heads, inter = cfg["num_attention_heads"], cfg["intermediate_size"]
    except KeyError:
        return None
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    bias = cfg.get("attention_bias", cfg.get("model_type") == "qwen2")
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden + (q + 2 * kv if bias else 0)
    mlp = 3 * hidden * inter  # gate, up, down
    per_layer = attention + mlp + 2 * hidden  # + input and post-attention RMSNorm
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + embeddings + hidden  # + final norm


def _read_config(path: str, base: Path) -> tuple[dict, str] | None:
    if path in BUILTIN_MODELS:
        return BUILTIN_MODELS[path], "builtin"
    if path.startswith("builtin:"):
        return None
    for folder in (Path(path), base / path):
        file = folder / "config.json"
        try:
            if file.is_file():
                return json.loads(file.read_text(encoding="utf-8")), "config.json"
        except (OSError, ValueError):
            return None
    return None


def model_shape(model: Decl, base: Path) -> ModelShape:
    """The model's size and attention shape: the spec's keys first, then config.json or the built-in table."""
    found = _read_config(model.get("path") or "", base)
    config, source = found if found else ({}, "spec")
    cfg = config.get("text_config", config) if "hidden_size" not in config else config
    hidden = model.get("hidden") or cfg.get("hidden_size")
    heads = model.get("heads") or cfg.get("num_attention_heads")
    # config.json's head_dim stands unless the spec redefines the attention shape
    head_dim = None if model.is_set("hidden") or model.is_set("heads") else cfg.get("head_dim")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return ModelShape(
        params=model.get("params") or count_params(config),
        layers=model.get("layers") or cfg.get("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=model.get("kv_heads") or cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        vocab=model.get("vocab") or cfg.get("vocab_size"),
        intermediate=cfg.get("intermediate_size"),
        source=source if not model.is_set("params") else "spec",
    )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _strategy(program: Program, role: Decl) -> str:
    """A trained role's own strategy; a frozen one follows its colocation root (ddp on a pool of its own)."""
    if role.kind in TRAINED:
        return role.get("strategy", "ddp")
    root = root_of(program, role)
    return root.get("strategy", "ddp") if root is not role and root.kind in TRAINED else "ddp"


def shares_actor_weights(program: Program, role: Decl) -> bool:
    """An hf rollout colocated with the actor whose model it generates with reads the actor's weights in place.

    Other engines (sglang) load the weights into their own memory, so they hold a copy even when colocated.
    """
    root = root_of(program, role)
    return (role.kind == "rollout" and role.get("engine", "hf") in IN_PLACE_ENGINES
            and role.get("colocate") is not None and root is not role
            and root.kind == "actor" and model_of(program, role) == root.get("model"))


def lora_rank(role: Decl) -> int:
    """The rank of a LoRA actor's adapters; 0 = full fine-tuning."""
    return (role.get("lora") or {}).get("rank", 0) if role.kind == "actor" else 0


def shares_actor_base(program: Program, role: Decl) -> bool:
    """A ref on the model of a LoRA actor whose devices it shares is that actor's base (its adapters off)."""
    root = root_of(program, role)
    return role.kind == "ref" and any(
        lora_rank(actor) and root_of(program, actor) is root and actor.get("model") == model_of(program, role)
        for actor in program.roles.values())


def adapter_params(shape: ModelShape, rank: int, targets: str | list[str]) -> int | None:
    """Parameters of LoRA adapters of rank `rank` on a Llama-shaped decoder: rank x (in + out) per adapted
    linear layer. "all-linear" adapts every projection (not the output head); a name this table does not
    know adds nothing. None when the shape is not known well enough."""
    if None in (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim):
        return None
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}
    if shape.intermediate:
        i = shape.intermediate
        dims.update(gate_proj=(h, i), up_proj=(h, i), down_proj=(i, h))
    elif targets == "all-linear":
        return None
    names = list(dims) if targets == "all-linear" else [t for t in dict.fromkeys(targets) if t in dims]
    return shape.layers * sum(rank * (dims[n][0] + dims[n][1]) for n in names)


def offloaded_items(role: Decl) -> tuple[str, ...]:
    """The items of `role_memory` that a role keeps in host memory instead of on its device.

    A trained role's `param_offload` is FSDP2's CPUOffloadPolicy: each rank's shards of the parameters,
    gradients and AdamW state live in host memory and the optimizer steps there; the device holds only the
    blocks gathered for the pass that runs (a working buffer, not counted either way). `optimizer_offload`
    keeps AdamW's moments on the host between steps. A ref's `param_offload` keeps its weights on the host
    between its log_prob calls (the estimate is the steady state between calls)."""
    if role.kind in TRAINED:
        if role.get("param_offload"):
            return "params", "adapters", "grads", "optimizer"
        return ("optimizer",) if role.get("optimizer_offload") else ()
    return ("params",) if role.kind == "ref" and role.get("param_offload") else ()


def kv_cache_bytes(shape: ModelShape, *, prompt_length: int, new_tokens: int, sequences: int, dtype: str,
                   tp: int = 1) -> int:
    """KV cache per device: 2 (K, V) × layers × kv_heads per device × head_dim × tokens × sequences × bytes."""
    kv_heads_per_device = _ceil_div(shape.kv_heads, tp)
    return (2 * shape.layers * kv_heads_per_device * shape.head_dim * (prompt_length + new_tokens)
            * sequences * DTYPE_BYTES[dtype])


def role_memory(program: Program, role: Decl, plan: RolePlan, shape: ModelShape | None) -> tuple[dict[str, int], list[str]]:
    """Bytes per device of one replica of `role`, by item; and what could not be estimated."""
    items: dict[str, int] = {}
    unknown: list[str] = []
    dtype = role.get("dtype", "fp32")
    b = DTYPE_BYTES[dtype]
    P = shape.params if shape else None
    shard = plan.replicas if _strategy(program, role) == "fsdp" else 1
    if role.kind in TRAINED:
        if P is None:
            return items, ["weights"]
        trained = P  # parameters with grads and Adam state
        items["params"] = _ceil_div(P * MASTER_BYTES, shard)
        if lora_rank(role):  # only the adapters train; the base is frozen
            trained = adapter_params(shape, lora_rank(role), role["lora"].get("target_modules", "all-linear"))
            if trained is None:
                return items, ["adapters"]
            items["adapters"] = trained * MASTER_BYTES
        items["grads"] = _ceil_div(trained * MASTER_BYTES, shard)
        items["optimizer"] = _ceil_div(trained * ADAM_BYTES, shard)
        if b != MASTER_BYTES and shard == 1:
            items["compute_copy"] = P * b  # autocast's bf16 copy of every weight, during each forward
    elif role.kind in FROZEN:
        if P is None:
            return items, ["weights"]
        items["params"] = 0 if shares_actor_base(program, role) else _ceil_div(P * b, shard)
    elif role.kind == "rollout":
        if shares_actor_weights(program, role):
            items["weights"] = 0
        elif P is None:
            unknown.append("weights")
        else:
            items["weights"] = _ceil_div(P * b, plan.tp)
        data = program.data
        if shape is None or not shape.has_kv:
            unknown.append("kv_cache")
        elif data is not None and data.get("batch_size"):
            sequences = _ceil_div(data["batch_size"] * role.get("n", 1), max(plan.replicas, 1))
            items["kv_cache"] = kv_cache_bytes(shape, prompt_length=data.get("max_prompt_length", 64),
                                               new_tokens=role.get("max_new_tokens", 32), sequences=sequences,
                                               dtype=dtype, tp=plan.tp)
    return items, unknown


def _unknown_builtin(program: Program, model_name: str | None) -> Diagnostic | None:
    """A `builtin:` path that names no built-in model (a typo such as `builtin:arith-gtp`): an error at the path."""
    model = program.models.get(model_name) if model_name else None
    path = (model.get("path") or "") if model else ""
    if not path.startswith("builtin:") or path in BUILTIN_MODELS:
        return None
    hints = [hint for hint in (did_you_mean(path, BUILTIN_MODELS),) if hint]
    return error("unknown-model", f"`{path}` is not a built-in model", model.span_of("path"), *hints,
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


def _advice(program: Program, item: str, roles: dict[str, RolePlan]) -> str:
    name, _, what = item.partition("/")
    role, plan = program.roles.get(name), roles.get(name)
    if role is None or plan is None:
        return ""
    if role.kind in TRAINED and _strategy(program, role) == "ddp" and plan.replicas > 1:
        return (f"shard `{name}` with `strategy = fsdp`: params, grads and optimizer states are divided by its "
                f"{plan.replicas} replicas")
    if role.kind in TRAINED:
        return f"raise `replicas` of `{name}` (with `strategy = fsdp` each device holds 1/replicas of its 16 B/param)"
    if what == "kv_cache":
        return (f"lower `batch_size`, `n` or `max_new_tokens`, or give `{name}` more replicas or a larger `tp`: "
                "the KV cache is split over both")
    if role.get("dtype", "fp32") == "fp32":
        return f"set `dtype = bf16` on `{name}` to halve its weights"
    return f"give `{name}` more devices (`tp` for a rollout) or a pool of its own"


def estimate(program: Program, pools: list[PoolPlan], roles: list[RolePlan],
             placements: list[Placement]) -> tuple[list[MemoryRow], list[Diagnostic]]:
    """One MemoryRow per device of every pool, and out-of-memory / memory-unknown diagnostics."""
    diagnostics: list[Diagnostic] = []
    base = Path(program.path).parent
    shapes: dict[str, ModelShape] = {}
    role_plans = {r.name: r for r in roles}
    per_replica: dict[str, dict[str, int]] = {}
    per_replica_host: dict[str, dict[str, int]] = {}  # offloaded: in the host memory of the device's node
    warned: set[tuple[str, str]] = set()
    for plan in roles:
        role = program.roles[plan.name]
        model_name = plan.model
        if model_name in program.models and model_name not in shapes:
            shapes[model_name] = model_shape(program.models[model_name], base)
        items, unknown = role_memory(program, role, plan, shapes.get(model_name))
        host = offloaded_items(role)
        per_replica[plan.name] = {item: size for item, size in items.items() if item not in host}
        per_replica_host[plan.name] = {item: size for item, size in items.items() if item in host}
        misnamed = _unknown_builtin(program, model_name)
        if misnamed is not None:  # not "add params = 7B": the name is wrong
            if (model_name, "builtin") not in warned:
                warned.add((model_name, "builtin"))
                diagnostics.append(misnamed)
            continue
        for what in unknown:
            key = (model_name or plan.name, "weights") if what == "weights" else (plan.name, what)
            if key not in warned:
                warned.add(key)
                diagnostics.append(_unknown_diagnostic(program, role, model_name, [what]))

    rows: dict[tuple[str, int, int], MemoryRow] = {}
    for pool in pools:
        for node in range(pool.nodes):
            for device in range(pool.devices_per_node):
                rows[pool.name, node, device] = MemoryRow(pool.name, node, device, 0, pool.device_memory_bytes, {})
    for p in placements:
        for device in p.devices:
            row = rows.get((p.pool, p.node, device))
            if row is None:
                continue
            for item, size in per_replica.get(p.role, {}).items():
                key = f"{p.role}/{item}"
                row.breakdown[key] = row.breakdown.get(key, 0) + size
                row.estimated_bytes += size
            for item, size in per_replica_host.get(p.role, {}).items():
                key = f"{p.role}/{item}"
                row.host[key] = row.host.get(key, 0) + size
    out = list(rows.values())
    diagnostics += _check_fit(program, pools, out, role_plans)
    return out, diagnostics


def _check_fit(program: Program, pools: list[PoolPlan], rows: list[MemoryRow],
               roles: dict[str, RolePlan]) -> list[Diagnostic]:
    out = []
    for pool in pools:
        capacity = pool.device_memory_bytes
        if capacity is None:
            continue
        over = [r for r in rows if r.pool == pool.name and r.estimated_bytes > capacity]
        if not over:
            continue
        worst = max(over, key=lambda r: r.estimated_bytes)
        items = sorted(worst.breakdown.items(), key=lambda kv: -kv[1])
        top_role = items[0][0].split("/")[0]
        terms = " + ".join(f"{k} {format_bytes(v)}" for k, v in items if v)
        decl = program.pools[pool.name]
        role = program.roles.get(top_role)
        total = pool.nodes * pool.devices_per_node
        out.append(error(
            "out-of-memory",
            f"estimated {format_bytes(worst.estimated_bytes)} on device {worst.device} of node {worst.node} of pool "
            f"`{pool.name}` exceeds its {format_bytes(capacity)} ({len(over)} of {total} device"
            f"{'s' * (total != 1)} over, by {math.ceil(100 * (worst.estimated_bytes / capacity - 1))}%)",
            decl.span_of("memory"),
            f"per device: {terms}",
            _advice(program, items[0][0], roles),
            label=f"{format_bytes(capacity)} < {format_bytes(worst.estimated_bytes)}",
            notes=[(f"`{top_role}` holds the most", role.span)] if role is not None else ()))
    return out
