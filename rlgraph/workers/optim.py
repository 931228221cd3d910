"""What the actor and the critic share: AdamW with warm-up, and the PPO epoch / mini-batch / micro-batch loop."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

import torch

from rlgraph.workers.gradient_sync import data_parallel_average
from rlgraph.workers.offload import HOST, optimizer_state_to, state_on_device

GRADIENT_BUCKET_BYTES = 25 * 1024 * 1024  # per all-reduce of `average_gradients`: DDP's default bucket

# loss_fn(row indices of one micro-batch) -> (scalar loss, {metric name: float})
MicroBatchLoss = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
# split(row indices of a mini-batch) -> the row indices of its micro-batches
Split = Callable[[torch.Tensor], list[torch.Tensor]]
# weight(micro-batch rows, mini-batch rows) -> the micro-batch loss's weight in the mini-batch loss
Weight = Callable[[torch.Tensor, torch.Tensor], float]


SCHEDULES = ("constant", "cosine")


def lr_factor(step: int, warmup_steps: int, schedule: str, min_lr_ratio: float, decay_steps: int | None) -> float:
    """The share of lr at training step `step` (0-based). The warm-up factor is (step + 1) / warmup_steps, so the
    first step already learns (verl's schedule starts at 0, which wastes a step). `cosine` then falls from 1
    towards min_lr_ratio by half a cosine over the steps left, as verl's (get_cosine_schedule_with_warmup with
    its min_lr_ratio): progress (step - warmup) / (decay_steps - warmup), the floor one step past the run's end."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant" or decay_steps is None:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, decay_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class Optimization:
    """AdamW + a linear warm-up, then a constant learning rate or a cosine decay, stepped once per training step
    (`lr_factor`)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        *,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        grad_clip: float | None,
        warmup_steps: int,
        schedule: str = "constant",
        min_lr_ratio: float = 0.0,
        decay_steps: int | None = None,
        state_host: torch.device | None = None,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown lr schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
        if schedule == "cosine" and not decay_steps:
            raise ValueError("a cosine lr schedule needs the run's steps (decay_steps)")
        self.grad_clip = grad_clip
        self.state_host = state_host  # AdamW's state here between steps; None: beside the parameters
        self.settings = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay}
        self.warmup_steps = warmup_steps
        self.schedule = (schedule, min_lr_ratio, decay_steps)
        self.set_params(params)

    @classmethod
    def from_settings(cls, params: Iterable[torch.nn.Parameter], settings: Any, *,
                      offload_state: bool = False) -> "Optimization":
        """From a role's resolved OptimSettings (rlgraph.contract.settings) and its `optimizer_offload`."""
        return cls(params, lr=settings.lr, betas=settings.betas, weight_decay=settings.weight_decay,
                   grad_clip=settings.grad_clip, warmup_steps=settings.warmup_steps, schedule=settings.schedule,
                   min_lr_ratio=settings.min_lr_ratio, decay_steps=settings.decay_steps,
                   state_host=HOST if offload_state else None)

    def set_params(self, params: Iterable[torch.nn.Parameter]) -> None:
        """(Re)build AdamW and the schedule over `params`: after `fully_shard` the parameters are new objects."""
        warmup_steps, (schedule, min_lr_ratio, decay_steps) = self.warmup_steps, self.schedule
        self.params = [p for p in params if p.requires_grad]
        if getattr(self, "average", None) is not None:
            self.average.remove()  # the hooks of the parameters replaced (by fully_shard's)
        # ddp over several replicas: each bucket's all-reduce starts in the last micro-batch's backward
        self.average = data_parallel_average(self.params, GRADIENT_BUCKET_BYTES)
        self.optimizer = torch.optim.AdamW(self.params, **self.settings)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(step, warmup_steps, schedule, min_lr_ratio, decay_steps))

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]  # the scheduler's last lr, or the plan's after a resume

    def run_epochs(
        self,
        batch_size: int,
        loss_fn: MicroBatchLoss,
        *,
        epochs: int,
        mini_batch_size: int | None,
        micro_batch_size: int | None,
        generator: torch.Generator | None,
        split: Split | None = None,
        weight: Weight | None = None,
    ) -> dict[str, float]:
        """One training step: `epochs` passes over shuffled mini-batches, one optimizer step per mini-batch.

        A mini-batch is cut into micro-batches by `split` (default: `micro_batch_size` rows each, in order).
        Each micro-batch's loss is scaled by `weight(micro, mini)` before `backward` (default: its share of
        the rows; `rlgraph.algos.agg_weight` gives the weight that makes the summed gradient the mini-batch
        loss's for each loss aggregation). A mini-batch's metrics are the micro-batches' averaged with those
        weights, then averaged over mini-batches; `skipped_update_frac` is the share of mini-batches whose
        update was skipped (`clip_and_step`).
        """
        mini_batch_size = mini_batch_size or batch_size
        micro_batch_size = micro_batch_size or mini_batch_size
        if batch_size % mini_batch_size or mini_batch_size % micro_batch_size:
            raise ValueError(
                f"mini_batch_size {mini_batch_size} must divide the batch of {batch_size} samples, "
                f"and micro_batch_size {micro_batch_size} must divide the mini-batch"
            )
        lr = self.lr
        totals: dict[str, float] = {}
        num_steps = 0
        for mini in minibatches(batch_size, mini_batch_size, epochs, generator):
            self.optimizer.zero_grad(set_to_none=True)
            micros = split(mini) if split is not None else list(mini.split(micro_batch_size))
            weights = [weight(micro, mini) if weight is not None else len(micro) / len(mini) for micro in micros]
            weight_sum = sum(weights) or 1.0
            for index, (micro, share) in enumerate(zip(micros, weights)):
                if self.average is not None and index == len(micros) - 1:
                    self.average.arm()  # the last backward: the gradients become final as it runs
                loss, metrics = loss_fn(micro)
                (loss * share).backward()
                for name, value in metrics.items():
                    totals[name] = totals.get(name, 0.0) + share / weight_sum * float(value)
            grad_norm = self.clip_and_step()
            totals["grad_norm"] = totals.get("grad_norm", 0.0) + grad_norm
            totals["skipped_update_frac"] = totals.get("skipped_update_frac", 0.0) + (not math.isfinite(grad_norm))
            num_steps += 1
        self.scheduler.step()
        averaged = {name: value / num_steps for name, value in totals.items()}
        averaged["lr"] = lr
        return averaged

    def clip_and_step(self) -> float:
        """Average gradients over data-parallel ranks (the buckets started in the last backward, then the rest),
        clip the norm, then step.

        A non-finite norm skips the step (verl does the same); every rank sees the same norm, so all skip.
        Sharded (FSDP) gradients arrive averaged already, and their norm is computed over the shards.
        """
        from rlgraph.workers.fsdp import total_norm

        if self.average is not None:
            self.average.finish()
        max_norm = self.grad_clip if self.grad_clip and self.grad_clip > 0 else float("inf")
        grad_norm = total_norm(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        if math.isfinite(grad_norm):
            with state_on_device(self.optimizer, self.state_host):
                self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def state_dict(self) -> dict[str, Any]:
        """Optimizer and scheduler state: tensors and plain python only."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])  # onto each parameter's device
        self.state_to_host()
        self.load_scheduler_state(state["scheduler"])

    def state_to_host(self) -> None:
        """With a `state_host`: AdamW's state back there (a loaded state arrives beside the parameters)."""
        if self.state_host is not None:
            optimizer_state_to(self.optimizer, self.state_host)

    def load_scheduler_state(self, state: dict[str, Any]) -> None:
        """The schedule's progress from a checkpoint, after its optimizer state is loaded; the hyper-parameters
        from this run's settings.

        A loaded optimizer and scheduler bring back the lr, betas and weight decay they were saved with, so a
        resume with another lr would silently go on with the old one. Only the moments, the step counts and
        the schedule's position are the checkpoint's; with unchanged settings every value is the same as
        before (the lr is recomputed the way the scheduler computes it), so a plain resume stays bit-identical.
        """
        self.scheduler.load_state_dict(state)
        lr = self.settings["lr"]
        self.scheduler.base_lrs = [lr] * len(self.optimizer.param_groups)
        for group, schedule in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas):
            group.update(initial_lr=lr, betas=self.settings["betas"], weight_decay=self.settings["weight_decay"])
            group["lr"] = lr * schedule(self.scheduler.last_epoch)


def average_gradients(params: list[torch.nn.Parameter], bucket_bytes: int | None = None) -> None:
    """All-reduce the mean gradient when this process is one rank of a data-parallel group, all at once (no
    backward to overlap: `Optimization` starts its buckets during the last backward instead).

    The runtime starts the group (`torch.distributed.init_process_group`) in every replica of a role;
    each replica then updates on its own chunk of the batch (`Rollout.split`) and all stay identical,
    as under DDP. Without a group (one replica) this does nothing. Gradients go in buckets of at most
    `bucket_bytes` (GRADIENT_BUCKET_BYTES), as DDP's do (rlgraph/workers/gradient_sync.py).
    """
    average = data_parallel_average(params, bucket_bytes or GRADIENT_BUCKET_BYTES)
    if average is not None:
        try:
            average.finish()
        finally:
            average.remove()


def minibatches(
    batch_size: int, mini_batch_size: int, epochs: int, generator: torch.Generator | None
) -> Iterator[torch.Tensor]:
    """Row indices of each mini-batch, epoch after epoch; shuffled per epoch unless generator is None."""
    for _ in range(epochs):
        if generator is None:
            order = torch.arange(batch_size)
        else:
            order = torch.randperm(batch_size, generator=generator)
        yield from order.split(mini_batch_size)


def shuffle_generator(shuffle_seed: int | None, fallback: torch.Generator, shuffle: bool) -> torch.Generator | None:
    if not shuffle:
        return None
    if shuffle_seed is None:
        return fallback
    return torch.Generator().manual_seed(shuffle_seed)
