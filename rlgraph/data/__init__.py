"""Data sets: data names -> files -> checked rows -> tokenized prompts -> resumable batches.

    path = resolve_data_path("builtin:arith/train")   # or "data/train.parquet", "data/train.jsonl"
    rows = load_rows(path)                             # DataError names file + row on a bad row
    rows = load_files(["a.parquet", "b.jsonl"])        # several files, one after the other
    dataset = RLDataset(rows, tokenizer, max_prompt_length=64)
    loader = make_dataloader(dataset, batch_size=32, seed=0)

Names are imported lazily, so `import rlgraph.data` costs nothing until one is used
(the dataset and the loader need torch).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DataError": "rlgraph.data.errors",
    "cache_dir": "rlgraph.contract.cache",
    "resolve_data_path": "rlgraph.data.paths",
    "load_rows": "rlgraph.data.rows",
    "load_files": "rlgraph.data.rows",
    "check_row": "rlgraph.data.rows",
    "RLDataset": "rlgraph.data.dataset",
    "encode_prompt": "rlgraph.data.dataset",
    "make_dataloader": "rlgraph.data.loader",
    "RLDataLoader": "rlgraph.data.loader",
    "EpochBatchSampler": "rlgraph.data.loader",
    "collate_columns": "rlgraph.data.loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlgraph.data' has no attribute {name!r}")
