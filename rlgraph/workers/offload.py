"""Offload: a role's state kept in host memory instead of on its device (`param_offload`, `optimizer_offload`).

- A trained role's `param_offload` (strategy = fsdp, sharded) is FSDP2's `CPUOffloadPolicy` (`fsdp_policy`):
  each rank's shards of the parameters, their gradients and so AdamW's state live on the host, the optimizer
  steps there, and `fully_shard` copies a block's shards to the device when it gathers them. verl has this as
  `fsdp_config.offload_policy`; its `fsdp_config.param_offload` instead moves the shards to the device for
  each call and back after (`EngineTrainModeCtx` / `EngineEvalModeCtx`), which keeps the update's peak.
- `optimizer_offload` keeps AdamW's moments on the host between optimizer steps: `state_on_device` moves
  them to their parameters' device for `step()` and back after (verl's `optimizer_offload` moves them per
  update call). Under a CPU offload policy the parameters are on the host, and so the moments stay there.
- A frozen role's `param_offload` unsharded (`weights_on`): the weights live on the host and move to the
  device for each call, then back, so the device is free for what runs between (the actor's update).
  Sharded with an fsdp actor, the ref gets the CPU offload policy instead (verl does the same for its ref).

On a CPU device there is nothing to move: host and device are the same memory and every move is a no-op.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

HOST = torch.device("cpu")


def fsdp_policy(device: torch.device) -> Any:
    """FSDP2's CPUOffloadPolicy for `fully_shard`; host memory pinned only where there is an accelerator to
    copy to (pinning needs CUDA)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=device.type == "cuda")


def params_on_host(module: torch.nn.Module, device: torch.device) -> None:
    """After a sharded module under the CPU offload policy got its weights on the device (`fsdp._fill_from_rank0`
    fills on the device, where the broadcast runs): its shards to the host, where FSDP2 expects them, and
    its buffers (not sharded: rotary `inv_freq`) stay on the device, where the forward pass uses them."""
    module.to(HOST)
    for buffer in module.buffers():
        buffer.data = buffer.data.to(device)


@contextlib.contextmanager
def weights_on(module: torch.nn.Module, device: torch.device, host: torch.device | None) -> Iterator[None]:
    """`module`'s parameters and buffers on `device` for the block, then back on `host` (None: not offloaded)."""
    if host is None or host == device:
        yield
        return
    module.to(device)
    try:
        yield
    finally:
        module.to(host)
        from rlgraph.workers.cuda import free_cached_memory

        free_cached_memory(device)  # the blocks go back, for another process's engine too


def optimizer_state_to(optimizer: torch.optim.Optimizer, device: torch.device | None) -> None:
    """Every per-parameter state tensor (AdamW's m and v) onto `device`, or onto its parameter's own device
    when None. The step counts stay where AdamW keeps them (0-dim, on the CPU unless capturable or fused)."""
    for param, state in optimizer.state.items():
        target = param.device if device is None else device
        for name, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.device != target:
                state[name] = value.to(target)


@contextlib.contextmanager
def state_on_device(optimizer: torch.optim.Optimizer, host: torch.device | None) -> Iterator[None]:
    """AdamW's state beside its parameters for the block (an optimizer step), on `host` after it (None: not
    offloaded). A first step creates the state beside the parameters; it goes to the host after it too."""
    if host is None:
        yield
        return
    optimizer_state_to(optimizer, None)
    try:
        yield
    finally:
        optimizer_state_to(optimizer, host)


def moves_weights(method: Any) -> Any:
    """Decorates a worker method that runs its module (a ref's `log_prob`): with `worker.offload_host` set,
    the module is on `worker.device` for the call and on that host before and after it."""
    import functools

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with weights_on(self.module, self.device, self.offload_host):
            return method(self, *args, **kwargs)

    return run
