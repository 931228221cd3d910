"""Data names -> local files.

A data name is either a built-in data set, `builtin:<task>/<split>` (e.g. `builtin:arith/train`),
written as parquet into the cache the first time it is asked for, or the path of a `.parquet` or
`.jsonl` file in verl's row schema.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlgraph.contract.cache import build_lock, cache_dir, temp_sibling
from rlgraph.data.errors import DataError

BUILTIN_PREFIX = "builtin:"
SUPPORTED_SUFFIXES = (".parquet", ".jsonl")


def resolve_data_path(name: str) -> str:
    """The local file behind data name `name`, building a built-in data set on first use."""
    if name.startswith(BUILTIN_PREFIX):
        return str(_builtin_file(name))
    path = Path(name).expanduser()
    if path.suffix not in SUPPORTED_SUFFIXES:
        raise DataError(
            f"{name}: unsupported data file type {path.suffix or '(no suffix)'!r}; "
            f"use a .parquet or .jsonl file in verl's row schema, or a built-in data set such as "
            f"'builtin:arith/train'",
            file=name,
        )
    if not path.is_file():
        raise DataError(f"{name}: no such file (looked for {path.resolve()})", file=name)
    return str(path.resolve())


def _builtin_file(name: str) -> Path:
    from rlgraph.tasks import BUILTIN_TASKS, get_task

    task_name, _, split = name[len(BUILTIN_PREFIX) :].partition("/")
    if task_name not in BUILTIN_TASKS:
        known = ", ".join(f"builtin:{t}/<split>" for t in sorted(BUILTIN_TASKS))
        raise DataError(f"{name}: no built-in task {task_name!r}; the built-in data sets are {known}", file=name)
    task = get_task(task_name)
    if split not in task.SPLITS:
        splits = ", ".join(f"builtin:{task_name}/{s}" for s in task.SPLITS)
        raise DataError(f"{name}: built-in task {task_name!r} has no split {split!r}; use one of {splits}", file=name)

    path = cache_dir() / "data" / f"{task_name}-v{task.DATA_VERSION}" / f"{split}.parquet"
    if path.is_file():
        return path
    with build_lock(path):
        if not path.is_file():  # another process may have written it while we waited
            _write_parquet_atomically(task.make_rows(split), path)
    return path


def _write_parquet_atomically(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
