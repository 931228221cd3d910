"""A role's numeric precision: what its weights are stored in, and what its forward passes compute in.

A trained role (actor, critic) with `dtype = bfloat16` trains in mixed precision, as torch AMP and verl do:
parameters, gradients and AdamW state stay float32 (the master weights: an update of lr 1e-6 on a weight of
0.02 is below bf16's resolution there, 2**-13 ≈ 1.2e-4, and would round away), and forward passes compute in
bf16:

- unsharded (ddp, one device): under `torch.autocast`, one context per forward (a micro-batch, a whole
  `log_prob` or `generate` call), never around `backward` or the optimizer step. Autocast caches the bf16
  copy of each weight until its context exits, so a context that spans an optimizer step would keep
  computing with the weights from before the step.
- sharded (fsdp): FSDP2's `MixedPrecisionPolicy` casts each block's gathered weights to bf16 and
  reduce-scatters gradients in fp32; the sharded parameters and AdamW state stay fp32.

float16 cannot train here: without loss scaling small gradients flush to zero, and AdamW's eps (1e-8)
underflows to 0 in fp16 (smallest value 6e-8), so the first steps divide by zero and the weights turn
inf/NaN. A trained role refuses it (`rlgraph check` reports `untrainable-dtype`); frozen roles (ref,
reward_model, a rollout's own engine) load in their dtype as it is, fp16 included, with no master copy.
float32 is untouched: no autocast, no policy.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from rlgraph.workers.loading import as_dtype

FP16_TRAINING = ("dtype float16 cannot train the {role}: without loss scaling its small gradients flush to zero "
                 "and AdamW's eps (1e-8) underflows to 0 in fp16, so the weights turn inf/NaN within a few steps; "
                 "use bfloat16 (fp32 master weights, bf16 compute) or float32")


@dataclass(frozen=True)
class Precision:
    """`dtype`: the role's dtype, what its forward passes compute in; `trained`: it has an optimizer."""

    dtype: torch.dtype
    trained: bool

    @classmethod
    def for_role(cls, dtype: str | torch.dtype, *, trained: bool, role: str = "trained role") -> "Precision":
        precision = cls(as_dtype(dtype), trained)
        if trained and precision.dtype == torch.float16:
            raise ValueError(FP16_TRAINING.format(role=role))
        return precision

    @property
    def mixed(self) -> bool:
        """fp32 master weights with a lower-precision compute dtype."""
        return self.trained and self.dtype != torch.float32

    @property
    def param_dtype(self) -> torch.dtype:
        """The dtype to load the module's parameters in (float32 for a trained role's master weights)."""
        return torch.float32 if self.mixed else self.dtype

    def compute(self, device: torch.device, *, sharded: bool = False) -> contextlib.AbstractContextManager:
        """The context that forward passes of an unsharded module run in; sharded, `fsdp_policy` does the casting."""
        if not self.mixed or sharded:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.dtype)

    def fsdp_policy(self) -> Any:
        """FSDP2's MixedPrecisionPolicy for `fully_shard` (bf16 compute, fp32 gradient reduction); None in fp32."""
        if not self.mixed:
            return None
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32)


Function = TypeVar("Function", bound=Callable[..., Any])


def in_compute(worker: Any, fn: Function) -> Function:
    """`fn` with every forward pass it makes in `worker.precision` (on `worker.device`, `worker.sharded`)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with worker.precision.compute(worker.device, sharded=worker.sharded):
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def computes(method: Function) -> Function:
    """Decorates a worker method that does not step the optimizer (`log_prob`, `generate`): one context for
    the whole call, so each weight is cast to bf16 once per call, not once per decoded token or micro-batch."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        return in_compute(self, method)(self, *args, **kwargs)

    return run  # type: ignore[return-value]
