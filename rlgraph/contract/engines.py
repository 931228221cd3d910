"""Every rollout engine's facts, written once: the schema's choices, the compiler's support checks, the
planner's memory model, the importer's mapping, the runtime's placement of a rollout and the engine registry
all read this table. Adding an engine = its module in rlgraph/workers/engines/ + one line in ENGINES.

Pure Python (no torch, no engine package): `check` and `plan` read it without importing any engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFacts:
    name: str  # the value of a rollout's `engine`
    engine_class: str  # `module:Class` of its rlgraph.workers.engines.base.Engine subclass
    # generates with the colocated trainer's own module (no copy of the weights, no weight sync); otherwise the
    # engine holds weights of its own, even colocated, refreshed after every update
    in_place: bool
    # allocates its KV cache up front as a pool of pages within `memory_fraction` (docs/memory.md, "Rollout");
    # otherwise per call, for the sequences it generates at once
    paged: bool
    max_tp: int  # tensor-parallel devices one replica can span
    kept_log_probs: bool  # can return each sampled token's log-prob (`generate -> responses, log_prob`)
    memory_fraction: bool  # honours the rollout's `memory_fraction`
    release_memory: bool  # can free and re-take its device memory between generations
    devices: tuple[str, ...]  # the pool device kinds (`pool { device = ... }`) it runs on
    cpu_max_tp: int | None = None  # max_tp on CPU pools where it is lower; None: max_tp
    # its load_weights may return before it has read the tensors (SGLang's scheduler copies them afterwards): a
    # weight sync keeps every bucket of an update allocated until the update ends (workers/weight_sync.py)
    reads_weights_later: bool = False
    # its own processes can join a weight-sync group and take each bucket there (SGLang's schedulers,
    # update_weights_from_distributed): a sync over nccl to its own pool goes into them, not through the rollout's
    # process (the engine confirms at start-up: `group_receiver`)
    receives_in_own_processes: bool = False
    # the package of its own it needs beyond the `run` extra (its class's `check_installed` says how to get it);
    # None: nothing to check, and pre-flight need not import the engine to know
    package: str | None = None
    # on CPU pools: the KV cache it takes at start and holds for the run (bytes, from the model's shape; see
    # vllm_cpu_kv_cache_bytes for the arguments), where it differs from the paged GPU budget; None: as on GPUs
    cpu_kv_cache: Callable[..., int] | None = None


# --- vLLM on CPUs (the vllm-cpu build): what both the engine and the plan size its KV cache from ---

# head sizes vLLM's CPU attention has kernels for (vllm-cpu 0.32.0, v1/attention/backends/cpu_attn.py
# get_supported_head_sizes); a model with other heads runs with them widened (workers/engines/vllm_heads.py)
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
VLLM_DEFAULT_MAX_SEQUENCES = 256  # vLLM's max_num_seqs when the rollout sets no max_sequences


def vllm_cpu_head_dim(head_dim: int) -> int:
    """The head size the engine runs a model's heads at on CPU: the smallest kernel size that holds them."""
    return next((size for size in VLLM_CPU_HEAD_SIZES if size >= head_dim), head_dim)


def vllm_cpu_kv_cache_bytes(*, layers: int, kv_heads: int, head_dim: int, dtype_bytes: int, max_len: int,
                            max_sequences: int | None) -> int:
    """The KV cache vLLM gets on CPU (`kv_cache_memory_bytes`): K and V of max_num_seqs sequences of the model's
    full length (max_model_len), every layer, at the head size the CPU kernel runs."""
    sequences = max_sequences or VLLM_DEFAULT_MAX_SEQUENCES
    return 2 * layers * kv_heads * vllm_cpu_head_dim(head_dim) * dtype_bytes * max_len * sequences


ENGINES: dict[str, EngineFacts] = {facts.name: facts for facts in (
    EngineFacts("hf", "rlgraph.workers.engines.hf:HFEngine", in_place=True, paged=False, max_tp=1,
                kept_log_probs=True, memory_fraction=False, release_memory=True, devices=("cpu", "gpu")),
    # max_tp: one node's GPUs; the adapter does not set up SGLang's multi-node tensor parallelism
    EngineFacts("sglang", "rlgraph.workers.engines.sglang:SGLangEngine", in_place=False, paged=True, max_tp=8,
                kept_log_probs=True, memory_fraction=True, release_memory=True, devices=("gpu",),
                package="sglang", reads_weights_later=True, receives_in_own_processes=True),
    # gpu: tp within one node, like sglang; cpu: the vllm-cpu build (0.32.0), one device a replica (the engine
    # runs in the rollout's own process, and vLLM's CPU tensor parallelism needs processes of its own)
    EngineFacts("vllm", "rlgraph.workers.engines.vllm:VLLMEngine", in_place=False, paged=True, max_tp=8,
                kept_log_probs=True, memory_fraction=True, release_memory=True, devices=("cpu", "gpu"),
                cpu_max_tp=1, cpu_kv_cache=vllm_cpu_kv_cache_bytes, package="vllm"),
)}

DEFAULT_ENGINE = "hf"


def engine_facts(name: str | None) -> EngineFacts | None:
    """The facts of engine `name` (None: the default engine's); None for a name no engine has."""
    return ENGINES.get(DEFAULT_ENGINE if name is None else name)


def max_tp_on(facts: EngineFacts, device: str) -> int:
    """Tensor-parallel devices a replica can span on a pool of `device`s."""
    if device == "cpu" and facts.cpu_max_tp is not None:
        return min(facts.max_tp, facts.cpu_max_tp)
    return facts.max_tp
