"""A paged rollout engine's memory, as SGLang and vLLM allocate it (docs/memory.md, "Rollout").

The engine takes `memory_fraction` of the device up front (SGLang's mem_fraction_static, vLLM's
gpu_memory_utilization): its share of the weights (split over tp), and a KV pool in the rest. It then runs
as many sequences at once as the pool holds, or the rollout's `max_sequences` where that is fewer (vLLM's
max_num_seqs, SGLang's max_running_requests), and generates a step's samples in waves. So its footprint is the
fraction, whatever the batch; what the batch and the limit decide is how many waves (time, not memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int, tp: int = 1) -> int:
    """K and V of one token on one device: 2 x layers x ceil(kv_heads / tp) x head_dim x bytes."""
    return 2 * layers * -(-kv_heads // tp) * head_dim * dtype_bytes


@dataclass(frozen=True)
class EngineBudget:
    """One device of a paged engine's replica."""

    capacity: int  # the device's memory
    fraction: float
    weights: int  # its share of the weights
    per_sequence: int  # KV cache of one sequence of full length (prompt + max_new_tokens)
    length: int  # that length, in tokens
    sequences: int  # the replica's samples per step
    max_sequences: int | None = None  # the rollout's scheduler limit; None: the pool alone decides

    @property
    def reserved(self) -> int:
        return int(self.fraction * self.capacity)

    @property
    def kv_pool(self) -> int:
        return max(self.reserved - self.weights, 0)

    @property
    def pool_holds(self) -> int:
        """Sequences of full length the pool holds at once."""
        return self.kv_pool // self.per_sequence if self.per_sequence else 0

    @property
    def concurrent(self) -> int:
        """Sequences generated at once: what the pool holds, at most `max_sequences`."""
        return min(self.pool_holds, self.max_sequences) if self.max_sequences else self.pool_holds

    @property
    def limited(self) -> bool:
        """`max_sequences`, not the pool, bounds the sequences at once."""
        return self.concurrent < self.pool_holds

    def limit_note(self) -> str:
        """The engine-batch note's clause on `max_sequences`, where it, not the pool, bounds the batch."""
        return f"; max_sequences = {self.max_sequences} runs {self.concurrent:,} at once" if self.limited else ""

    @property
    def waves(self) -> int:
        return math.ceil(self.sequences / self.concurrent) if self.concurrent else 0

    @property
    def fraction_needed(self) -> float:
        """The smallest fraction (to 0.01, rounded up) that holds the weights and one full sequence."""
        return math.ceil(100 * (self.weights + self.per_sequence) / self.capacity) / 100
