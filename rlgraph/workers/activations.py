"""Activation (gradient) checkpointing of a model's transformer blocks that works in eval mode.

A trained role keeps its model in eval() (no dropout: the PPO ratio must compare one function), and HF's
`gradient_checkpointing_enable()` only checkpoints while `module.training` is True, so on our workers it
would silently do nothing. Here each block's forward runs under `torch.utils.checkpoint` (non-reentrant)
whenever gradients are on: backward keeps only each block's inputs and runs the block again to get the
rest. Under no_grad (generate, log_prob) the block runs as before, KV cache and all.

The block's `forward` is replaced on the instance, not the block wrapped in another module, so parameter
and buffer names (state_dict, named_parameters, FSDP2 and distributed-checkpoint names) stay as they are,
and `fsdp.shard` still finds and shards the same blocks after it.
"""

from __future__ import annotations

import functools

import torch


def transformer_blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The children of the outermost ModuleLists (HF keeps the blocks in `model.layers` or `transformer.h`)."""
    lists: list[str] = []
    blocks: list[torch.nn.Module] = []
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList) and not any(name.startswith(f"{outer}.") for outer in lists):
            lists.append(name)
            blocks.extend(child)
    return blocks


def checkpoint_blocks(module: torch.nn.Module) -> int:
    """Checkpoint every transformer block of `module` (in any train/eval mode); returns how many blocks."""
    blocks = transformer_blocks(module)
    if not blocks:
        raise ValueError(f"gradient_checkpointing: found no transformer blocks (a ModuleList) in "
                         f"{type(module).__name__}")
    for block in blocks:
        if getattr(block.forward, "func", None) is not _checkpointed:  # not twice
            block.forward = functools.partial(_checkpointed, block.forward)
    return len(blocks)


def _checkpointed(forward, *args, **kwargs):
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
