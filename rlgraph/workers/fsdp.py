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
  distributed-checkpoint helpers, onto rank 0 only.

Works with gloo on CPU and nccl on GPU.
"""

from __future__ import annotations

from typing import Any

import torch

def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def shard(*modules: torch.nn.Module) -> None:
    """fully_shard every transformer block inside `modules`, then each module itself (the roots).

    The blocks are found as the `ModuleList` children of a module (HF keeps them in `model.layers`
    or `transformer.h`), so any HF decoder-only model shards block by block.
    """
    from torch.distributed.fsdp import fully_shard

    for module in modules:
        lists: list[str] = []  # the outermost ModuleLists: FSDP2 shards children before their parents
        for name, child in module.named_modules():
            if isinstance(child, torch.nn.ModuleList) and not any(name.startswith(f"{outer}.") for outer in lists):
                lists.append(name)
                for block in child:
                    fully_shard(block)
        fully_shard(module)


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


def load_optimizer_state(module: torch.nn.Module, optim: Any, state: dict[str, Any]) -> None:
    """Shard a state written by `optimizer_state` onto this rank (every rank loads the same file)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(resharded(module), optim.optimizer, optim_state_dict=state["optimizer"],
                             options=StateDictOptions(full_state_dict=True))
    optim.load_scheduler_state(state["scheduler"])  # and the hyper-parameters of this run's plan


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
