"""Write errors that name the file and the cause: a full disk, a missing permission, a read-only file system.

Every write rlgraph does, at start (run.lock, plan.json, the spec's copy) as for checkpoints and metrics, goes
through `writing`, so a full disk is one line naming the file, the file system and what to do, never an
OSError traceback. Imports nothing heavy: the run lock uses it before torch loads.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from rlgraph.runtime.errors import RunError

_OS_ERROR_TEXT = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                  "Permission denied": errno.EACCES, "Read-only file system": errno.EROFS}


@contextmanager
def writing(file: str | Path, error: type[RunError] = RunError, full_hint: str | None = None) -> Iterator[None]:
    """An I/O error in the block becomes `error` naming `file` and the cause. Also for errors libraries raise
    as their own types with the OS error in their text (safetensors: "os error 28"). `full_hint`: what to do
    when the disk is full, after "free space on <file system>" (None: how much is free there)."""
    try:
        yield
    except RunError:
        raise
    except Exception as err:
        code = os_errno(err)
        if code is None:
            raise
        raise error(write_problem(Path(getattr(err, "filename", None) or file), code, full_hint)) from None


def write_file(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file renamed over it: a crash leaves the old file or the new one,
    never half of one; a write error is a RunError naming the temporary file (`writing`)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(tmp):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    """Each of `files` (path in `folder` -> text) written with `write_file`, in their order."""
    for name, text in files.items():
        write_file(folder / name, text)


def write_problem(file: Path, code: int, full_hint: str | None = None) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT):
        where = filesystem(file)
        if full_hint is None:
            full_hint = (f"({_size(shutil.disk_usage(where).free)} free there), or pass --output to a folder on another "
                         "file system")
        return f"disk full while writing {file}: free space on {where} {full_hint}"
    if code in (errno.EACCES, errno.EPERM):
        return (f"permission denied while writing {file}: make {existing_parent(file)} writable for this user, "
                "or pass --output to a folder it can write")
    if code == errno.EROFS:
        return f"cannot write {file}: {filesystem(file)} is mounted read-only; pass --output to a writable folder"
    return f"cannot write {file}: {os.strerror(code)}"


def os_errno(err: BaseException | None) -> int | None:
    """The OS error behind `err`, also when another error replaced it: torch.save's zip writer, cleaning up
    after a failed write, raises "unexpected pos" over the OSError that says the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno is not None:
            return err.errno
        text = str(err)
        if match := re.search(r"os error (\d+)", text):
            return int(match.group(1))
        if code := next((code for phrase, code in _OS_ERROR_TEXT.items() if phrase in text), None):
            return code
        err = err.__cause__ or err.__context__
    return None


def existing_parent(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path if path.is_dir() else path.parent


def filesystem(path: Path) -> Path:
    """The mount point of the file system that holds `path`."""
    path = existing_parent(path)
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
