"""The SGLang engine: SGLang's offline `sglang.Engine` behind rlgraph's engine interface, on GPUs.

UNVERIFIED ON HARDWARE. No machine of this project runs SGLang (it needs CUDA kernels and a torch build of
its own), so this adapter was written against the source of `python/sglang/srt/entrypoints/engine.py` and
`srt/sampling/sampling_params.py` and has not generated a token. What runs here: the pure parts below
(server arguments, sampling parameters, reading SGLang's output dicts), and a test that checks every call
against the installed package's signatures where sglang imports (tests/workers/test_engine_sglang.py).

What it calls:
- `sglang.Engine(model_path=, tokenizer_path=, tp_size=, dtype=, mem_fraction_static=, max_running_requests=,
  base_gpu_id=, enable_memory_saver=True, enable_weights_cpu_backup=True)`, and
  `enable_deterministic_inference=True` under train.deterministic (the only mode that reads `sampling_seed`)
- `Engine.generate(input_ids=[[...], ...], sampling_params=[{...}, ...], return_logprob=True)`: one request
  per sample (each prompt repeated n times, so the n samples of a prompt are adjacent and each has its own
  `sampling_seed`); the tokens and their log-probs are read from `meta_info["output_token_logprobs"]`,
  triples (log-prob, token id, text)
- `Engine.update_weights_from_tensor(named_tensors=[(name, tensor), ...], flush_cache=False)` per bucket, and
  `Engine.flush_cache()` before the next generation (a prefix cache filled by the old weights is stale)
- on a pool of its own over nccl: `Engine.init_weights_update_group(master_address=, master_port=, rank_offset=,
  world_size=, group_name=, backend="nccl")` once, then per bucket `Engine.update_weights_from_distributed(names=,
  dtypes=, shapes=, group_name=, flush_cache=False, load_format="flattened_bucket")`: the trainer's rank 0
  broadcasts each bucket into the schedulers themselves (rlgraph/runtime/weight_sync.py)
- `Engine.release_memory_occupation()` / `Engine.resume_memory_occupation(tags=[...])`
- `Engine.shutdown()`

Token ids in, token ids out: SGLang never sees text, and the Rollout is built from its token ids by
`rlgraph.workers.rollout.build_rollout`, as for every engine.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlgraph.contract.engines import ENGINES
from rlgraph.workers.engines.base import (Engine, Generation, SamplingParams, check_weight_names,
                                          checkpoint_weight_names, pad_token_id, shipped_eos_ids, stop_token_ids)

if TYPE_CHECKING:
    import torch

INSTALL = "pip install 'rlgraph[sglang]'"
WEIGHTS = "weights"  # SGLang's memory tag of the model weights (sglang.srt.constants.GPU_MEMORY_TYPE_WEIGHTS)
_TIED_HEAD = "lm_head.weight"  # a trainer sends it; a checkpoint with tied embeddings does not store it


class SGLangEngine(Engine):
    """Samples with SGLang's offline engine, which runs its own scheduler processes on `tp` GPUs.

    It owns a copy of the weights (even colocated with the actor), refreshed by `load_weights`. Memory:
    `release_memory` frees the weights, the KV cache and the CUDA graphs (SGLang's memory saver, with a CPU
    copy of the weights); `load_weights` while released takes the weights' memory back first, so a sync
    between training and generation never holds the KV cache; `resume_memory` takes back the rest.
    """

    capabilities = ENGINES["sglang"]

    def __init__(self, engine: Any, tokenizer: Any, *, eos_token_ids: list[int], weight_names: set[str] | None,
                 memory_types: Sequence[str], tp: int = 1) -> None:
        self.engine = engine  # a sglang.Engine
        self.tp = tp  # its scheduler processes, one per GPU: the ranks it brings to a weight-sync group
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.pad_token_id = pad_token_id(tokenizer, eos_token_ids)
        self.weight_names = weight_names  # the checkpoint's parameter names; None: not known, not checked
        self.memory_types = tuple(memory_types)  # every tag release_memory_occupation() frees
        self.released: set[str] = set()  # tags released and not yet resumed
        self.cache_stale = False  # weights changed since the prefix cache was filled

    @classmethod
    def check_installed(cls) -> None:
        try:
            import sglang  # noqa: F401
        except Exception as err:  # ImportError, or a CUDA library an installed sglang cannot load
            raise ImportError(f"engine = sglang needs the sglang package, which does not import here "
                              f"({type(err).__name__}: {err}). Install it (GPU machines only; it brings its own "
                              f"torch): {INSTALL}") from None

    @classmethod
    def from_pretrained(cls, model_path: str, *, dtype: str = "bfloat16", device: str | None = None,
                        memory_fraction: float | None = None, tp: int = 1,
                        max_sequences: int | None = None, deterministic: bool = False) -> SGLangEngine:
        cls.check_installed()
        import sglang
        import torch
        from sglang.srt.constants import GPU_MEMORY_ALL_TYPES

        from rlgraph.models import resolve_model_path
        from rlgraph.workers.loading import load_tokenizer

        path = resolve_model_path(model_path)
        if device is None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"  # where the process's workers set theirs
        args = server_args(path, dtype=dtype, device=device, memory_fraction=memory_fraction, tp=tp,
                           max_sequences=max_sequences, deterministic=deterministic)
        visible = torch.cuda.device_count()
        if visible < args["base_gpu_id"] + tp:
            # a colocated replica lives in the process of its first device; the lowering shows that process the
            # GPUs of the others in its span (rlgraph/runtime/lowering.py show_devices)
            raise ValueError(f"the sglang engine with tp = {tp} needs GPUs cuda:{args['base_gpu_id']} to "
                             f"cuda:{args['base_gpu_id'] + tp - 1} visible to its process, which sees {visible} "
                             f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Do not set "
                             "CUDA_VISIBLE_DEVICES inside the workers; started by hand, show the process all the "
                             "GPUs of the replica")
        tokenizer = load_tokenizer(path)
        engine = sglang.Engine(**args)
        return cls(engine, tokenizer, eos_token_ids=stop_token_ids(tokenizer.eos_token_id, shipped_eos_ids(path)),
                   weight_names=checkpoint_weight_names(path), memory_types=GPU_MEMORY_ALL_TYPES, tp=tp)

    # --- generation ---

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, seed: int | None = None,
                 with_log_probs: bool = False) -> Generation:
        """The log-probs are SGLang's own (by default after the temperature; its SGLANG_RETURN_ORIGINAL_LOGPROB
        changes that). SGLang honours a sample's seed only in its deterministic-inference mode. Every request
        goes in at once: SGLang's scheduler runs at most `max_running_requests` of them at a time (the
        `max_sequences` given to `from_pretrained`)."""
        if self.released:
            raise RuntimeError("the engine's memory is released; call resume_memory() before generate()")
        if self.cache_stale:
            self.engine.flush_cache()
            self.cache_stale = False
        rows = [list(prompt) for prompt in prompt_ids for _ in range(n)]  # p0 p0 p1 p1 ...: a prompt's n adjacent
        stop_ids = self.eos_token_ids + [i for i in sampling.stop_token_ids if i not in self.eos_token_ids]
        params = [sampling_params(sampling, stop_ids, row_seed) for row_seed in row_seeds(seed, len(rows))]
        outputs = self.engine.generate(input_ids=rows, sampling_params=params, return_logprob=True)
        return generation_from_outputs(outputs, stop_ids, sampling.max_new_tokens, with_log_probs)

    # --- weights and memory ---

    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        named = list(weights.items() if isinstance(weights, Mapping) else weights)
        if self.weight_names is not None:
            check_weight_names((name for name, _ in named), self.weight_names | {_TIED_HEAD})
        if WEIGHTS in self.released:
            self.engine.resume_memory_occupation(tags=[WEIGHTS])
            self.released.discard(WEIGHTS)
        _check(self.engine.update_weights_from_tensor(named_tensors=named, flush_cache=False), "take the weights")
        self.cache_stale = True

    # --- a weight sync into SGLang's own processes (a rollout on a pool of its own, over nccl) ---

    def group_receiver(self) -> dict[str, Any] | None:
        """How this engine's schedulers join a weight-sync group and take each bucket themselves
        (`init_weights_update_group`, `update_weights_from_distributed(load_format="flattened_bucket")`): how
        many ranks they are, and whether a bucket travels as bytes (SGLang's FlattenedTensorBucket flattens
        several dtypes to bytes where it says `supports_multi_dtypes`; earlier ones keep the bucket's dtype, and
        nccl needs both sides to agree). None where this SGLang has no such path."""
        try:
            from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket
        except Exception:  # an SGLang without it, or none (a stand-in)
            return None
        import inspect

        receive = getattr(self.engine, "update_weights_from_distributed", None)
        if receive is None or "load_format" not in inspect.signature(receive).parameters:
            return None
        return {"ranks": self.tp, "as_bytes": bool(getattr(FlattenedTensorBucket, "supports_multi_dtypes", False))}

    def join_sync_group(self, host: str, port: int, rank_offset: int, world_size: int, group_name: str) -> None:
        """The schedulers join rank 0's group as ranks rank_offset .. rank_offset + tp - 1 (over nccl)."""
        result = self.engine.init_weights_update_group(master_address=host, master_port=port, rank_offset=rank_offset,
                                                       world_size=world_size, group_name=group_name, backend="nccl")
        _check(result, "join the weight-sync group")

    def receive_bucket(self, names: Sequence[str], dtype: str, shapes: Sequence[Sequence[int]], group_name: str) -> None:
        """One bucket of a sync, broadcast by rank 0 straight into the schedulers, which load it."""
        if self.weight_names is not None:
            check_weight_names(names, self.weight_names | {_TIED_HEAD})
        if WEIGHTS in self.released:
            self.engine.resume_memory_occupation(tags=[WEIGHTS])
            self.released.discard(WEIGHTS)
        result = self.engine.update_weights_from_distributed(
            names=list(names), dtypes=[dtype] * len(names), shapes=[list(s) for s in shapes], group_name=group_name,
            flush_cache=False, load_format="flattened_bucket")
        _check(result, "take the weights")
        self.cache_stale = True

    def release_memory(self) -> None:
        if not self.released:
            self.engine.release_memory_occupation()
            self.released = set(self.memory_types)

    def resume_memory(self) -> None:
        if self.released:
            self.engine.resume_memory_occupation(tags=[t for t in self.memory_types if t in self.released])
            self.released = set()

    def shutdown(self) -> None:
        """Stop SGLang's processes (they also stop when this process exits)."""
        self.engine.shutdown()


# --- the pure parts: what goes to SGLang and what comes back ---


def _check(result: Any, action: str) -> None:
    """SGLang answers a weight call with (success, message): a failure is an error, not a silent skip."""
    if isinstance(result, tuple) and result and result[0] is False:
        raise RuntimeError(f"SGLang did not {action}: {result[1] if len(result) > 1 else result}")


def server_args(model_folder: str, *, dtype: Any, device: str | None, memory_fraction: float | None,
                tp: int, max_sequences: int | None = None, deterministic: bool = False) -> dict[str, Any]:
    """`sglang.Engine`'s keyword arguments (its ServerArgs fields)."""
    device = str(device or "cuda")
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise ValueError(f"the sglang engine runs on CUDA GPUs, not on {device!r}; use engine = hf there")
    args: dict[str, Any] = {
        "model_path": model_folder,
        "tokenizer_path": model_folder,
        "tp_size": tp,
        "dtype": str(dtype).removeprefix("torch."),
        "base_gpu_id": int(index or 0),
        # release_memory_occupation needs the memory saver. The CPU copy keeps the weights across a release, and
        # it is needed even though every sync overwrites the parameters: SGLang builds its whole model inside the
        # memory saver's weights region, so tensors made at load and never synced (rotary cos/sin caches, any
        # buffer a model computes in __init__) would come back undefined from a release without it (verl keeps it
        # on for a colocated SGLang for the same reason). It costs a host copy only where the weights are
        # released, i.e. colocated; an own-pool engine that never releases copies nothing.
        "enable_memory_saver": True,
        "enable_weights_cpu_backup": True,
    }
    if memory_fraction is not None:
        args["mem_fraction_static"] = memory_fraction  # weights + KV cache, as a share of the GPU
    if max_sequences is not None:
        args["max_running_requests"] = max_sequences  # the scheduler's limit; the rest of a step's requests wait
    if deterministic:
        # SGLang reads a request's sampling_seed only in this mode (batch-invariant kernels besides); without it
        # the seeds are ignored and a resumed run samples differently
        args["enable_deterministic_inference"] = True
    return args


def sampling_params(sampling: SamplingParams, stop_ids: list[int], seed: int | None) -> dict[str, Any]:
    """One request's `sampling_params` (SGLang's SamplingParams fields)."""
    params: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "stop_token_ids": list(stop_ids),
        "no_stop_trim": True,  # keep the stop token: the response (and its loss mask) ends with it, as with hf
    }
    if sampling.greedy:
        params["temperature"] = 0.0  # SGLang: top_k = 1
    else:
        params.update(temperature=sampling.temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k if sampling.top_k > 0 else -1)  # rlgraph 0 = SGLang -1 = all
    if seed is not None:
        params["sampling_seed"] = seed
    return params


def row_seeds(seed: int | None, rows: int) -> list[int | None]:
    """One seed per sample, all drawn from `seed` (the n samples of a prompt must not share one)."""
    if seed is None:
        return [None] * rows
    draw = random.Random(seed)
    return [draw.getrandbits(63) for _ in range(rows)]


def generation_from_outputs(outputs: dict | list[dict], stop_ids: list[int], max_new_tokens: int,
                            with_log_probs: bool) -> Generation:
    """SGLang's answers (one dict per request, in request order) as a Generation: each row cut after its
    first stop token, and at max_new_tokens."""
    outputs = [outputs] if isinstance(outputs, dict) else list(outputs)
    stops = set(stop_ids)
    token_ids: list[list[int]] = []
    log_probs: list[list[float]] = []
    for row, output in enumerate(outputs):
        meta = output["meta_info"]
        finish = meta.get("finish_reason") or {}
        if finish.get("type") == "abort":
            raise RuntimeError(f"SGLang aborted sample {row}: {finish.get('message') or finish}")
        triples = meta["output_token_logprobs"]  # (log-prob, token id, text or None) per generated token
        ids = [int(t[1]) for t in triples][:max_new_tokens]
        end = next((i + 1 for i, token in enumerate(ids) if token in stops), len(ids))
        token_ids.append(ids[:end])
        log_probs.append([float(t[0]) for t in triples[:end]])
    return Generation(token_ids, log_probs if with_log_probs else None)

