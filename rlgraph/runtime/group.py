"""A role's replicas as one callable group: data-parallel dispatch over the processes that host it.

With one replica (the common case on one machine) a call passes its arguments through untouched, so
ObjectRefs go straight from the producing process to the consuming one without a copy through the
driver. With k replicas the batch arguments are split into k equal chunks (rows of a prompt group
stay together as long as k divides the prompts), each replica gets its chunk, and the results are
concatenated (tensors, rollouts) or averaged (metric dicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray


@dataclass(frozen=True)
class Member:
    handle: Any  # the DeviceProcess actor
    replica: int
    process: str


@dataclass
class Pending:
    """The outcome of one group call: result ref(s) and the seconds each replica spent."""

    results: list[Any]  # ObjectRefs, one per replica
    times: list[Any]  # ObjectRefs of floats
    merge: bool = False
    _value: Any = field(default=None, repr=False)
    _done: bool = False

    def refs(self) -> list[Any]:
        return self.results + self.times

    def result(self) -> Any:
        """An ObjectRef (one replica) or the merged local value (several)."""
        if not self.merge:
            return self.results[0]
        if not self._done:
            self._value, self._done = merge_results(ray.get(self.results)), True
        return self._value

    def seconds(self) -> float:
        return max(ray.get(self.times))


class WorkerGroup:
    def __init__(self, role: str, kind: str, members: list[Member]) -> None:
        self.role, self.kind = role, kind
        self.members = sorted(members, key=lambda m: m.replica)

    def __len__(self) -> int:
        return len(self.members)

    def _launch(self, member: Member, method: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        result, seconds = member.handle.call.options(num_returns=2).remote(self.role, method, *args, **kwargs)
        return result, seconds

    def call(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """`method` on every replica with the batch arguments split between them."""
        if len(self.members) == 1:
            result, seconds = self._launch(self.members[0], method, args, kwargs)
            return Pending([result], [seconds])
        k = len(self.members)
        local = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args]
        parts = [split_batch(a, k) for a in local]
        launched = [self._launch(m, method, tuple(p[i] for p in parts), kwargs) for i, m in enumerate(self.members)]
        return Pending([r for r, _ in launched], [t for _, t in launched], merge=True)

    def call_each(self, method: str, per_replica: list[tuple[tuple, dict]]) -> Pending:
        """`method` on replica i with its own (args, kwargs)."""
        launched = [self._launch(m, method, a, kw) for m, (a, kw) in zip(self.members, per_replica)]
        return Pending([r for r, _ in launched], [t for _, t in launched], merge=len(launched) > 1)

    def broadcast(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """The same `method(*args)` on every replica (e.g. load the same state dict)."""
        launched = [self._launch(m, method, args, kwargs) for m in self.members]
        return Pending([r for r, _ in launched], [t for _, t in launched], merge=False)


def split_batch(value: Any, k: int) -> list[Any]:
    """k equal row chunks of a batch value; anything that is not a batch goes to every replica."""
    import torch

    from rlgraph.workers import Rollout

    if isinstance(value, Rollout):
        return value.split(k)
    if isinstance(value, torch.Tensor):
        if value.shape[0] % k:
            raise ValueError(f"cannot split a batch of {value.shape[0]} rows between {k} replicas")
        return list(value.chunk(k))
    if isinstance(value, list):
        if len(value) % k:
            raise ValueError(f"cannot split a batch of {len(value)} prompts between {k} replicas")
        size = len(value) // k
        return [value[i * size : (i + 1) * size] for i in range(k)]
    return [value] * k


def merge_results(values: list[Any]) -> Any:
    import torch

    from rlgraph.workers import Rollout

    first = values[0]
    if isinstance(first, Rollout):
        return Rollout.concat(values)
    if isinstance(first, torch.Tensor):
        return torch.cat(values)
    if isinstance(first, tuple):
        return tuple(merge_results(list(parts)) for parts in zip(*values))
    if isinstance(first, dict):
        keys = {k for v in values for k in v}
        return {k: sum(v[k] for v in values if k in v) / sum(k in v for v in values) for k in keys}
    return first
