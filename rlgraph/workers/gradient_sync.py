"""Data-parallel gradient averaging that overlaps the backward pass (strategy = ddp over several replicas).

Each bucket's all-reduce starts during the backward pass of a mini-batch's last micro-batch, as soon as every
gradient in it is final (a hook after each parameter's gradient is accumulated), instead of all of them after
the last backward: the communication of the late layers runs while autograd computes the early ones, as
torch's DistributedDataParallel does. Earlier micro-batches only accumulate (DDP's `no_sync`).

The buckets hold the parameters in reverse order (gradients become final from the last layer back), one dtype
and at most `cap` bytes each. Every rank must start the same all-reduces in the same order, so a bucket starts
only after every bucket before it: a parameter that a rank's last micro-batch does not reach (its gradient
final since an earlier one, or none at all) holds its bucket, and the ones after it, back until `finish`.
Each bucket's flat copy lives until `finish`, the extra memory DDP's own bucket copies take. A gradient larger
than the cap alone is reduced in place, in slices.

FSDP-sharded parameters are not averaged here: FSDP2 reduce-scatters them during backward by itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch


@dataclass
class _Started:
    grads: list[torch.Tensor]
    flat: torch.Tensor
    works: list[Any]
    in_place: bool  # one contiguous gradient reduced where it is, in slices


@dataclass
class OverlappedAverage:
    """The mean gradient of `params` over the default torch.distributed group, bucket by bucket."""

    params: list[torch.nn.Parameter]
    cap: int
    buckets: list[list[torch.nn.Parameter]] = field(init=False)
    armed: bool = field(init=False, default=False)
    launched_during_backward: int = field(init=False, default=0)  # buckets started before `finish`, last round

    def __post_init__(self) -> None:
        self.buckets = list(parameter_buckets(list(reversed(self.params)), self.cap))
        self.bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.hooks = [p.register_post_accumulate_grad_hook(self._final) for p in self.params]
        self._reset()

    def _reset(self) -> None:
        self.final = [0] * len(self.buckets)  # gradients of each bucket final in this backward
        self.next = 0  # the next bucket to start: every one before it has started
        self.started: list[_Started] = []

    def arm(self) -> None:
        """Before the backward pass of a mini-batch's last micro-batch: start each bucket as it becomes final."""
        self._reset()
        self.armed = True

    def finish(self) -> None:
        """Start every bucket not started yet (in order), wait for all, and leave each parameter's gradient the
        mean over the ranks (zeros for a rank whose micro-batches never reached it)."""
        import torch.distributed as dist

        self.armed = False
        self.launched_during_backward = self.next
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self._start_final(until=len(self.buckets))
        world = dist.get_world_size()
        for started in self.started:
            for work in started.works:
                work.wait()
            started.flat /= world
            if not started.in_place:
                for grad, chunk in zip(started.grads, started.flat.split([g.numel() for g in started.grads])):
                    grad.copy_(chunk.view_as(grad))
        self._reset()

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()

    # --- inside backward ---

    def _final(self, param: torch.nn.Parameter) -> None:
        if not self.armed:
            return
        index = self.bucket_of[id(param)]
        if index < self.next:  # a gradient accumulated twice in one backward (a reentrant checkpoint, say)
            raise RuntimeError(f"a gradient of shape {tuple(param.shape)} changed after its all-reduce started: "
                               "each parameter's gradient must be accumulated once per backward pass")
        self.final[index] += 1
        ready = self.next
        while ready < len(self.buckets) and self.final[ready] == len(self.buckets[ready]):
            ready += 1
        self._start_final(until=ready)

    def _start_final(self, until: int) -> None:
        import torch.distributed as dist

        while self.next < until:
            grads = [p.grad for p in self.buckets[self.next]]
            if len(grads) == 1 and grads[0].is_contiguous():
                flat = grads[0].view(-1)
                parts = flat.split(max(1, self.cap // flat.element_size()))
                self.started.append(_Started(grads, flat, [dist.all_reduce(part, async_op=True) for part in parts],
                                             in_place=True))
            else:
                flat = torch.cat([g.reshape(-1) for g in grads])
                self.started.append(_Started(grads, flat, [dist.all_reduce(flat, async_op=True)], in_place=False))
            self.next += 1


def data_parallel_average(params: Iterable[torch.nn.Parameter], cap: int) -> OverlappedAverage | None:
    """An OverlappedAverage of the unsharded `params` when this process is one rank of a data-parallel group
    of several; None otherwise (one replica, or every parameter sharded)."""
    import torch.distributed as dist

    unsharded = [p for p in params if not hasattr(p, "full_tensor")]
    if not unsharded or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    return OverlappedAverage(unsharded, cap)


def parameter_buckets(tensors: list[torch.Tensor], cap: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive tensors of one dtype, at most `cap` bytes together (a larger tensor alone)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and (size + nbytes > cap or tensor.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(tensor)
        size += nbytes
    if bucket:
        yield bucket
