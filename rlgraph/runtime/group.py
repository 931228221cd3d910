"""A role's replicas as one callable group, with a small set of named dispatch modes.

    split  the batch arguments are cut into k equal row chunks in replica order, replica i gets chunk i,
           and the results are joined in the same order (tensors and rollouts concatenated, metric
           dicts averaged). For every data-parallel call: log_prob, values, update.
    each   replica i gets its own (args, kwargs), results joined as for split. For generate: the
           driver gives each replica its prompts and its own sampling seed.
    all    the same call on every replica, for calls whose effect or output is the same on every rank:
           loading weights (weight sync), loading optimizer state. The result is replica 0's.
    one    replica 0 only (rank 0), for calls that read state every replica holds identically: the
           weights for a sync or a checkpoint, validation's generate. On a sharded group (strategy =
           fsdp) no replica holds the whole model, so the call goes to every replica (each gathers its
           part in the same collectives) and the result is still replica 0's.

With one replica, split passes its arguments through untouched, so ObjectRefs go straight from the
producing process to the consuming one without a copy through the driver.

Calls launched inside `StageBatch()` are sent when the block ends, as one actor task per process
(`DeviceProcess.call_many`): the calls of a stage that share a process (a colocated spec's
`actor.log_prob → ref.log_prob → critic.values`) cost one Ray round trip, and the Rollout they all
read is fetched and unpickled there once.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

import ray

DISPATCH_MODES = ("split", "each", "all", "one")


@dataclass(frozen=True)
class Member:
    handle: Any  # the DeviceProcess actor
    replica: int
    process: str


@dataclass
class Pending:
    """The outcome of one group call: result ref(s) and the seconds each replica spent."""

    results: list[Any]  # ObjectRefs, one per replica that ran
    times: list[Any]  # ObjectRefs of floats
    merge: bool = False  # join the replicas' results (split, each) or take replica 0's (all, one)
    _value: Any = field(default=None, repr=False)
    _done: bool = False

    def refs(self) -> list[Any]:
        return self.results + self.times

    def result(self) -> Any:
        """An ObjectRef (one result wanted) or the merged local value (several)."""
        if not self.merge or len(self.results) == 1:
            return self.results[0]
        if not self._done:
            self._value, self._done = merge_results(ray.get(self.results)), True
        return self._value

    def seconds(self) -> float:
        return max(ray.get(self.times))


class StageBatch:
    """Queues the group calls launched inside `with StageBatch():` and sends them on exit, one actor task
    per process. ObjectRef arguments are passed at the task's top level (so Ray resolves them), each
    once however many of the calls read it."""

    def __init__(self) -> None:
        self.queue: list[tuple[Member, str, str, tuple, dict]] = []
        self.pendings: list[Pending] = []

    def __enter__(self) -> StageBatch:
        self._token = _BATCH.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _BATCH.reset(self._token)
        if exc_type is None:
            self.flush()

    def flush(self) -> None:
        sent: list[tuple[Any, Any]] = [None] * len(self.queue)  # type: ignore[list-item]
        by_process: dict[str, list[int]] = {}
        for i, (member, *_rest) in enumerate(self.queue):
            by_process.setdefault(member.process, []).append(i)
        for indices in by_process.values():
            handle = self.queue[indices[0]][0].handle
            if len(indices) == 1:
                _, role, method, args, kwargs = self.queue[indices[0]]
                sent[indices[0]] = tuple(handle.call.options(num_returns=2).remote(role, method, *args, **kwargs))
                continue
            flat: list[Any] = []
            position: dict[Any, int] = {}  # an ObjectRef -> its place in `flat`
            calls = []
            for i in indices:
                _, role, method, args, kwargs = self.queue[i]
                places = []
                for arg in args:
                    if isinstance(arg, ray.ObjectRef) and arg in position:
                        places.append(position[arg])
                        continue
                    if isinstance(arg, ray.ObjectRef):
                        position[arg] = len(flat)
                    places.append(len(flat))
                    flat.append(arg)
                calls.append((role, method, places, kwargs))
            refs = handle.call_many.options(num_returns=2 * len(calls)).remote(calls, *flat)
            for k, i in enumerate(indices):
                sent[i] = (refs[2 * k], refs[2 * k + 1])
        for pending in self.pendings:  # placeholders (queue indices) -> the refs
            pending.results = [sent[i][0] for i in pending.results]
            pending.times = [sent[i][1] for i in pending.times]


_BATCH: contextvars.ContextVar[StageBatch | None] = contextvars.ContextVar("rlgraph_stage_batch", default=None)


class WorkerGroup:
    def __init__(self, role: str, kind: str, members: list[Member], sharded: bool = False) -> None:
        self.role, self.kind = role, kind
        self.members = sorted(members, key=lambda m: m.replica)
        self.sharded = sharded  # FSDP: calls that need the weights must reach every replica

    def members_for_one(self) -> list[Member]:
        """Who runs a dispatch-`one` call: rank 0, or every rank of a sharded group (rank 0 first)."""
        return self.members if self.sharded else self.members[:1]

    def __len__(self) -> int:
        return len(self.members)

    def _launch(self, member: Member, method: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        batch = _BATCH.get()
        if batch is not None:  # queued: the refs replace this placeholder when the batch is sent
            batch.queue.append((member, self.role, method, args, kwargs))
            return len(batch.queue) - 1, len(batch.queue) - 1
        result, seconds = member.handle.call.options(num_returns=2).remote(self.role, method, *args, **kwargs)
        return result, seconds

    def _pending(self, launched: list[tuple[Any, Any]], merge: bool) -> Pending:
        pending = Pending([r for r, _ in launched], [t for _, t in launched], merge=merge)
        batch = _BATCH.get()
        if batch is not None:
            batch.pendings.append(pending)
        return pending

    def dispatch(self, mode: str, method: str, *args: Any, per_replica: list[tuple[tuple, dict]] | None = None,
                 **kwargs: Any) -> Pending:
        """`method` on the group's replicas in dispatch mode `mode` (see the module's docstring)."""
        if mode == "split":
            if len(self.members) == 1:
                return self._pending([self._launch(self.members[0], method, args, kwargs)], merge=False)
            k = len(self.members)
            local = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args]
            parts = [split_batch(a, k) for a in local]
            return self._pending([self._launch(m, method, tuple(p[i] for p in parts), kwargs)
                                  for i, m in enumerate(self.members)], merge=True)
        if mode == "each":
            if per_replica is None or len(per_replica) != len(self.members):
                raise ValueError(f"dispatch `each` needs one (args, kwargs) per replica of `{self.role}`")
            return self._pending([self._launch(m, method, a, kw) for m, (a, kw) in zip(self.members, per_replica)],
                                 merge=True)
        if mode == "all":
            return self._pending([self._launch(m, method, args, kwargs) for m in self.members], merge=False)
        if mode == "one":
            return self._pending([self._launch(m, method, args, kwargs) for m in self.members_for_one()], merge=False)
        raise ValueError(f"unknown dispatch mode {mode!r}; the modes are {', '.join(DISPATCH_MODES)}")

    # the modes by name
    def call(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """split: `method` on every replica with the batch arguments split between them."""
        return self.dispatch("split", method, *args, **kwargs)

    def call_each(self, method: str, per_replica: list[tuple[tuple, dict]]) -> Pending:
        """each: `method` on replica i with its own (args, kwargs)."""
        return self.dispatch("each", method, per_replica=per_replica)

    def broadcast(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """all: the same `method(*args)` on every replica (e.g. load the same state dict)."""
        return self.dispatch("all", method, *args, **kwargs)

    def one(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """one: `method` on replica 0 only."""
        return self.dispatch("one", method, *args, **kwargs)


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
