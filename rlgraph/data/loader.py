"""Batches of prompts that resume exactly where a checkpoint left them.

`make_dataloader` returns a StatefulDataLoader driven by `EpochBatchSampler`: epoch after epoch, each
epoch a fresh permutation that is a pure function of (seed, epoch). The sampler's whole state is two
numbers, the epoch and the batches taken in it; the loader's `state_dict()` carries them, so a loader
given that state yields exactly the batches the saved one would have yielded next, across epochs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices, for `num_epochs` epochs (None: for ever).

    `epoch` is the epoch of the batch yielded last; `batch` counts the batches of that epoch yielded.
    With `drop_last`, the last short batch of an epoch is left out, so every batch has `batch_size`
    prompts. A finite sampler starts over when iterated again after it ran out.
    """

    def __init__(
        self,
        num_items: int,
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        drop_last: bool = True,
        num_epochs: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.num_items = num_items
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_epochs = num_epochs
        self.epoch = 0
        self.batch = 0

    @property
    def batches_per_epoch(self) -> int:
        full, rest = divmod(self.num_items, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __len__(self) -> int:
        """Batches per epoch for an endless sampler; all batches for a finite one."""
        return self.batches_per_epoch * (self.num_epochs or 1)

    def order(self, epoch: int) -> list[int]:
        """The indices of epoch `epoch` in the order they are served."""
        indices = list(range(self.num_items))
        if self.shuffle:
            # str seeds hash with SHA-512: the same on every machine, whatever PYTHONHASHSEED is.
            random.Random(f"rlgraph:{self.seed}:{epoch}").shuffle(indices)
        return indices

    def __iter__(self) -> Iterator[list[int]]:
        if self.num_epochs is not None and self.epoch >= self.num_epochs:
            self.epoch, self.batch = 0, 0
        # State changes as each batch is handed out, so a state_dict taken between batches counts
        # exactly the batches the consumer has had (the loader must not prefetch: num_workers=0).
        while self.num_epochs is None or self.epoch < self.num_epochs:
            order = self.order(self.epoch)
            while self.batch < self.batches_per_epoch:
                start = self.batch * self.batch_size
                self.batch += 1
                yield order[start : start + self.batch_size]
            self.epoch, self.batch = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch, "seed": self.seed, "num_items": self.num_items}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if (state["seed"], state["num_items"]) != (self.seed, self.num_items):
            raise ValueError(
                f"data loader state is for seed {state['seed']} and {state['num_items']} prompts, "
                f"but this loader has seed {self.seed} and {self.num_items} prompts; resume with the "
                "same data, filtering and seed as the checkpoint"
            )
        self.epoch, self.batch = state["epoch"], state["batch"]


class RLDataLoader(StatefulDataLoader):
    """A StatefulDataLoader over an EpochBatchSampler that shows where it is (`epoch`)."""

    @property
    def epoch(self) -> int:
        return self.batch_sampler.epoch

    @property
    def batches_per_epoch(self) -> int:
        return self.batch_sampler.batches_per_epoch


def collate_columns(items: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Items -> one list per field, unpadded (the rollout pads to the batch's own length)."""
    return {key: [item[key] for item in items] for key in items[0]} if items else {}


def make_dataloader(
    dataset: Dataset,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    drop_last: bool = True,
    num_epochs: int | None = None,
) -> RLDataLoader:
    """Batches of `batch_size` prompts as a dict of lists, endless unless `num_epochs` is given.

    Iterating yields batches one after another across epochs; `loader.epoch` says which epoch the
    last batch came from; `state_dict()` / `load_state_dict()` resume exactly.
    For one validation pass: `make_dataloader(val, n, seed, shuffle=False, drop_last=False, num_epochs=1)`.
    """
    num_items = len(dataset)
    if drop_last and num_items < batch_size:
        raise ValueError(
            f"the data set has {num_items} prompts, fewer than one batch of {batch_size}; "
            "lower the batch size or add prompts"
        )
    if num_items == 0:
        raise ValueError("the data set has no prompts (were they all filtered out as too long?)")
    sampler = EpochBatchSampler(num_items, batch_size, seed, shuffle, drop_last, num_epochs)
    return RLDataLoader(dataset, batch_sampler=sampler, collate_fn=collate_columns, num_workers=0)
