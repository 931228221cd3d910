"""What a worker returns crosses Ray: it must hold CPU tensors only.

A CUDA tensor pickled by a worker unpickles only in a process that has CUDA (a driver without a GPU
fails) and, where it does, opens a context on that worker's GPU; driver-side transforms then mix CPU
scores with CUDA masks. The workers already return CPU tensors; `to_host` is the guard at the one
place results leave a worker process (`DeviceProcess.call`), so a new worker method cannot forget.
It copies only what is off the CPU: an all-CPU result is returned as is, at no cost.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


def to_host(value: Any) -> Any:
    """`value` with every tensor in it on the CPU: tensors, dataclasses (a Rollout), dicts, lists, tuples."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.cpu()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            current = getattr(value, f.name)
            moved = to_host(current)
            if moved is not current:
                changes[f.name] = moved
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, dict):
        moved = {k: to_host(v) for k, v in value.items()}
        return value if all(moved[k] is value[k] for k in value) else type(value)(moved)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        moved_items = [to_host(v) for v in value]
        if all(a is b for a, b in zip(moved_items, value)):
            return value
        return type(value)(moved_items)
    return value
