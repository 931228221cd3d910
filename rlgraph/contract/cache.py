"""The one folder where rlgraph keeps what it builds on first use and can always build again (the built-in data
sets, rlgraph.data.paths; the parser's tables, rlgraph.lang.parser), and how it writes there: atomically, so a
reader never sees half a file, and under a lock, so two processes building the same thing at once do the work
once.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV = "RLGRAPH_CACHE"
DEFAULT_CACHE = "~/.cache/rlgraph"


def cache_dir() -> Path:
    """`$RLGRAPH_CACHE`, else ~/.cache/rlgraph; made on demand by the writers, not here."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser().resolve()


def temp_sibling(path: Path) -> Path:
    """A fresh name next to `path` (same directory, so a rename onto `path` is atomic)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock named after `path` while building it.

    Uses flock where there is one; elsewhere it does nothing: the data builders stay correct anyway because
    they write to a temporary name and rename, keeping whichever copy lands first (the parser's tables, which
    lark writes in place, are built again by a reader that cannot load them).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with open(path.with_name(f".{path.name}.lock"), "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
