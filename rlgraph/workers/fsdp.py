"""`strategy = fsdp`: shard a worker's model over its data-parallel group with torch's `fully_shard` (FSDP2).

Each transformer block and then the root become FSDP modules: every rank keeps 1/world of each
parameter, gradient and AdamW state (as DTensors), a block's full weights exist only while it runs
(all-gather before, reduce-scatter of the averaged gradients after), and `clip_grad_norm_` sees the
sharded gradients. What the rest of the worker must do differently is here:

- every rank takes part in every forward pass, so a sharded `generate` runs with `synced_gpus=True`
  (a rank whose samples all ended keeps stepping until every rank's have), and the runtime sends calls
  that need the weights (sync, save, validation) to all ranks (`WorkerGroup`, dispatch `one` on a
  sharded group);
- full weights and optimizer state for a sync or a checkpoint are gathered with torch's
  distributed-checkpoint helpers, onto rank 0 only;
- the model is built on the meta device on every rank and loaded from disk by rank 0 only (onto its
  CPU), then `shard` sends each rank its shard of rank 0's weights: no rank ever holds the whole model
  on its device, and only rank 0 holds it (once, in host memory) at start-up;
- `generate` runs inside `unsharded`: each FSDP part is all-gathered once per call, not once per token.

Works with gloo on CPU and nccl on GPU.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator

import torch

# module built on the meta device -> (its device, rank 0's weights on the CPU or None on the other ranks),
# until `shard` fills it
_PENDING: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.device, dict[str, torch.Tensor] | None]]" = (
    weakref.WeakKeyDictionary())


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def will_shard(strategy: str) -> bool:
    """Whether a worker with this strategy is sharded: strategy = fsdp in a data-parallel group of 2 or more.

    The runtime joins the group before it builds the workers, so a worker knows at construction."""
    return strategy == "fsdp" and world_size() > 1


def empty_pretrained(auto_class: Any, path: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """`auto_class.from_pretrained(path)` built on the meta device (no memory), for `shard` to fill.

    Rank 0 loads the weights onto its CPU and keeps them until `shard`; the other ranks read only the
    config. Non-persistent buffers (rotary `inv_freq`) are not in a state dict, so rank 0 keeps them too."""
    from transformers import AutoConfig, GenerationConfig

    with torch.device("meta"):
        module = auto_class.from_config(AutoConfig.from_pretrained(path), dtype=dtype)
    if getattr(module, "can_generate", lambda: False)():
        with contextlib.suppress(OSError):  # the folder's stop tokens and defaults, as from_pretrained reads them
            module.generation_config = GenerationConfig.from_pretrained(path)
    weights = None
    if rank() == 0:
        loaded = auto_class.from_pretrained(path, dtype=dtype)  # on the CPU
        weights = {**dict(loaded.named_buffers()), **loaded.state_dict()}
    _PENDING[module] = (torch.device(device), weights)
    return module


def load_causal_lm_empty(model_path: str, dtype: torch.dtype, device: torch.device) -> tuple[torch.nn.Module, Any]:
    """`loading.load_causal_lm` for a worker that `will_shard`: the model on the meta device (`empty_pretrained`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlgraph.models import resolve_model_path

    path = resolve_model_path(model_path)
    return empty_pretrained(AutoModelForCausalLM, path, dtype, device), AutoTokenizer.from_pretrained(path)


def shard(*modules: torch.nn.Module, mp_policy: Any = None, offload_to: torch.device | None = None) -> None:
    """fully_shard every transformer block inside `modules`, then each module itself (the roots).

    The blocks are found as the `ModuleList` children of a module (HF keeps them in `model.layers`
    or `transformer.h`), so any HF decoder-only model shards block by block. `mp_policy`: FSDP2's
    MixedPrecisionPolicy for every part (workers/precision.py), None for none (fp32). `offload_to`: the
    device the shards are copied to when gathered, under FSDP2's CPUOffloadPolicy (`param_offload`:
    shards, gradients and AdamW state on the host; workers/offload.py); None keeps them on the device.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from rlgraph.workers import offload

    mp_policy = mp_policy or MixedPrecisionPolicy()
    policy = offload.fsdp_policy(offload_to) if offload_to is not None else OffloadPolicy()

    from rlgraph.workers.activations import transformer_blocks

    for module in modules:
        for block in transformer_blocks(module):  # FSDP2 shards children before their parents
            fully_shard(block, mp_policy=mp_policy, offload_policy=policy)
        fully_shard(module, mp_policy=mp_policy, offload_policy=policy)
        if module in _PENDING:
            _fill_from_rank0(module, *_PENDING.pop(module))
            if offload_to is not None:  # its shards to the host, where the CPU offload policy keeps them
                # (known gap, GPU only: under this policy's pinned memory, FSDP2 already moves each shard to the
                # host when `to_empty` materialises it (FSDPParam.reset_sharded_param), so the broadcast in
                # `_fill_from_rank0` runs on the host over the group's gloo half, as verl's
                # fsdp2_load_full_state_dict does: slower start-up, same weights)
                offload.params_on_host(module, offload_to)


def _fill_from_rank0(module: torch.nn.Module, device: torch.device, weights: dict[str, torch.Tensor] | None) -> None:
    """Give a module sharded on the meta device real storage, then rank 0's weights: each rank keeps its shard."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    persistent = set(module.state_dict())
    module.to_empty(device=device)
    set_model_state_dict(module, {k: v for k, v in (weights or {}).items() if k in persistent},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for name, buffer in module.named_buffers():  # not sharded: every rank holds the whole (small) buffer
        if name not in persistent:
            if weights is not None:
                buffer.copy_(weights[name])
            dist.broadcast(buffer, src=0)


@contextlib.contextmanager
def unsharded(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`module` with the full weights of every FSDP part gathered for the whole block, then resharded.

    For `generate`: each forward pass would otherwise gather every block again, once per decoded token.
    Inside, the parts do not reshard after forward; on exit they get back `shard`'s setting (blocks
    reshard, the root does not: FSDP2's default) and are resharded."""
    from torch.distributed.fsdp import FSDPModule

    parts = [part for part in module.modules() if isinstance(part, FSDPModule)]
    for part in parts:
        part.set_reshard_after_forward(False, recurse=False)
    try:
        for part in parts:
            part.unshard()
        yield module
    finally:
        for part in parts:
            part.set_reshard_after_forward(part is not module, recurse=False)
            part.reshard()


def resharded(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with every FSDP part back in its sharded state.

    The root stays unsharded after a forward pass without backward (generate, log_prob), and its
    registered parameters are then the gathered ones, not the sharded ones AdamW holds."""
    from torch.distributed.fsdp import FSDPModule

    for part in module.modules():
        if isinstance(part, FSDPModule):
            part.reshard()
    return module


def full_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights on rank 0 (CPU tensors), {} on the other ranks. Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    resharded(module)
    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def optimizer_state(module: torch.nn.Module, optim: Any) -> dict[str, Any]:
    """An `Optimization`'s whole state on rank 0 (AdamW keyed by parameter name), {} on the others.

    Every rank must call it. It loads back with `load_optimizer_state` at any world size."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_optimizer_state_dict(resharded(module), optim.optimizer, options=options)
    return {"optimizer": state, "scheduler": optim.scheduler.state_dict(), "full": True} if rank() == 0 else {}


def load_optimizer_state(module: torch.nn.Module, optim: Any, state: dict[str, Any] | None) -> None:
    """Shard a state written by `optimizer_state` onto every rank: rank 0 passes the state it read from the
    file, the other ranks None, and each gets its shards (and the scheduler's position) from rank 0.
    Every rank must call it."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if (state is None) != (rank() != 0):
        raise ValueError("rank 0, and only rank 0, passes the optimizer state it read")
    scheduler = [state["scheduler"] if state is not None else None]
    dist.broadcast_object_list(scheduler, src=0)  # a few numbers
    set_optimizer_state_dict(resharded(module), optim.optimizer,
                             optim_state_dict=state["optimizer"] if state is not None else {},
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    optim.state_to_host()  # optimizer_offload: the loaded shards arrive on the device
    optim.load_scheduler_state(scheduler[0])  # and the hyper-parameters of this run's plan


def save_pretrained_full(module: torch.nn.Module, directory: Any, state: dict[str, torch.Tensor]) -> None:
    """`save_pretrained` of a sharded HF model from its gathered state, under the model's own class name
    (FSDP2 renames the class to FSDP<Name>, which would end up in config.json)."""
    import json
    from pathlib import Path

    module.save_pretrained(directory, state_dict=state)
    config_file = Path(directory) / "config.json"
    config = json.loads(config_file.read_text())
    config["architectures"] = [name.removeprefix("FSDP") for name in config.get("architectures") or []]
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def total_norm(norm: torch.Tensor) -> float:
    """A gradient norm as a float; with sharded gradients `clip_grad_norm_` returns a DTensor."""
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
