"""Checkpoints: everything a run needs to go on exactly where it stopped, written atomically.

    DIR/checkpoints/step_<N>/
        actor/            HF folder (save_pretrained + tokenizer): AutoModelForCausalLM loads it
        critic/           HF folder of the backbone + value_head.safetensors
        optim/<role>.pt   optimizer + LR-scheduler state of each trained role
        rng/<process>.pt  torch / python / numpy RNG states of each process, rng/driver.pt the driver's
        trainer_state.pt  the step, the data loader's position, the adaptive KL coefficients
        meta.json         the same facts for people: step, roles, time, the last metrics
        plan.json         the plan it was trained with (Plan.to_dict()): a resume compares against it
        manifest.json     every other file's size and sha256, written last

Everything is safetensors or `torch.save` of tensors and plain python, read back with
`torch.load(weights_only=True)`: loading a checkpoint never unpickles arbitrary objects.

The protocol, so that a run killed at any moment resumes from a complete checkpoint:
- a checkpoint is written into `.step_<N>.tmp-*`, sealed (manifest written, every file fsync'd) and
  renamed into place; the caller makes the step's metrics line durable before that rename (loop.py);
- an old checkpoint is renamed to `.deleting-step_<N>-*` before it is deleted, so a half-deleted folder
  is never a `step_<N>`; `sweep` removes such leftovers (and abandoned tmp folders) when a run starts;
- a resume verifies the newest checkpoint against its manifest before any worker starts
  (`resume_checkpoint`); a damaged one, or one without a manifest, is set aside as `step_<N>.corrupt` with
  a warning and the one before it is used; a file that still fails to load in a worker is a CheckpointError
  naming it (`unreadable`).

Every read or write error is a CheckpointError naming the file and the cause (disk full named as such).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch

from rlgraph.runtime import disk
from rlgraph.runtime.errors import CheckpointError

CHECKPOINTS = "checkpoints"
TRAINER_STATE = "trainer_state.pt"
PLAN = "plan.json"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_DELETING = ".deleting-"
_LEGACY_TRASH = ".trash-"  # what an rlgraph before `_DELETING` named a replaced step while deleting it
# tmp folders of this process's writers not yet published or abandoned: every other one is a leftover
# (a pid is no test: a container restarts its command with the same pid)
_LIVE: set[str] = set()


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path

    def model_dir(self, role: str) -> Path:
        return self.path / role

    def optimizer_file(self, role: str) -> Path:
        return self.path / "optim" / f"{role}.pt"

    def rng_file(self, process: str) -> Path:
        return self.path / "rng" / f"{process_file_name(process)}.pt"

    def trainer_state(self) -> dict[str, Any]:
        return self.load(self.path / TRAINER_STATE)

    def load(self, file: Path) -> Any:
        """torch.load(weights_only=True) of one of its files; a missing or damaged one is a CheckpointError
        that names it and says what to delete."""
        try:
            return torch.load(file, weights_only=True)
        except Exception as err:  # torch reports a cut file as RuntimeError, EOFError or UnpicklingError
            raise unreadable(file, err) from None

    def plan(self) -> dict[str, Any] | None:
        """The plan dict it was trained with; None for a checkpoint written before checkpoints kept it."""
        file = self.path / PLAN
        if not file.is_file():
            return None
        try:
            return json.loads(file.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{read_problem(file, err)}; {self._advice()}") from None

    def _advice(self) -> str:
        return f"delete {self.path} to resume from the checkpoint before it, or pass --no-resume to start over"


def containing(path: str | Path) -> Checkpoint | None:
    """The checkpoint that `path` (one of its files or role folders) belongs to; None for a path outside one."""
    for folder in (Path(path), *Path(path).parents):
        match = _STEP_DIR.match(folder.name)
        if match and folder.parent.name == CHECKPOINTS:
            return Checkpoint(int(match.group(1)), folder)
    return None


def unreadable(path: str | Path, err: BaseException) -> CheckpointError:
    """A file or folder of a checkpoint that cannot be read (in the driver or in a worker, which loads the weights
    and the optimizer state): what is wrong with it, and what to delete."""
    checkpoint = containing(path)
    advice = checkpoint._advice() if checkpoint else "pass --no-resume to start over"
    return CheckpointError(f"{read_problem(Path(path), err)}; {advice}")


def damaged_load(path: str | Path, err: BaseException) -> CheckpointError | None:
    """When a worker fails to build from a checkpoint's model folder because a file of it cannot be read (damaged
    after the resume verified it: safetensors says "incomplete metadata", torch "PytorchStreamReader failed"),
    the CheckpointError that names the file and what to delete; None for any other folder or error."""
    if containing(path) is None or not _reads_badly(err):
        return None
    folder = Path(path)
    weights = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    return unreadable(next((f for f in weights if not _safetensors_readable(f)), folder), err)


def _reads_badly(err: BaseException) -> bool:
    if isinstance(err, OSError):
        return err.errno != errno.ENOMEM
    return (isinstance(err, (EOFError, ValueError)) or type(err).__name__ in ("SafetensorError", "UnpicklingError")
            or "PytorchStreamReader" in str(err))


def _safetensors_readable(file: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(file), "pt") as f:
            f.keys()
        return True
    except Exception:
        return False


def process_file_name(process: str) -> str:
    return process.replace("/", "-")


def checkpoints(run_dir: Path) -> list[Checkpoint]:
    """Published checkpoints of a run, oldest first (not verified: see `resume_checkpoint`)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        # an rlgraph before manifests wrote none: its trainer_state.pt, written last, marks it complete
        if match and child.is_dir() and ((child / MANIFEST).is_file() or (child / TRAINER_STATE).is_file()):
            found.append(Checkpoint(int(match.group(1)), child))
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


# --- writing ---


class CheckpointWriter:
    """Collects the parts of one checkpoint in a temporary folder, seals it, then publishes it with one rename."""

    def __init__(self, run_dir: Path, step: int) -> None:
        self.root = Path(run_dir) / CHECKPOINTS
        self.step = step
        self.final = self.root / f"step_{step}"
        self.tmp = self.root / f".step_{step}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with writing(self.tmp):
            self.root.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir()
        _LIVE.add(self.tmp.name)
        self.staging = Checkpoint(step, self.tmp)
        self.sealed = False

    def save_tensors(self, relative: str | Path, data: Any) -> None:
        path = self.tmp / relative
        # through a Python file, so that the OSError (disk full, ...) reaches `writing`: torch's own file
        # writer reports only "unexpected pos" or "basic_ios::clear"
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                torch.save(data, f)

    def save_json(self, relative: str, data: dict[str, Any]) -> None:
        path = self.tmp / relative
        with writing(path):
            path.write_text(json.dumps(data, indent=2, default=str) + "\n")

    def seal(self) -> None:
        """Write manifest.json (each file's size and sha256) last, with every file and folder fsync'd.

        Cost (and that of `verify` on resume, which hashes the same bytes): sha256 of every byte, streamed.
        Measured on the shipped model: 13-30 ms for a grpo_arith checkpoint (3.2 MB: actor, Adam state, RNG)
        on the project's 2-CPU machine, loaded; sha256 ran at ~0.4 GB/s there (1-2 GB/s on CPUs with SHA
        extensions), so a checkpoint of a 7B model with its Adam state (~100 GB) takes minutes to hash."""
        files = {}
        for file in sorted(p for p in self.tmp.rglob("*") if p.is_file()):
            with writing(file):  # fsync is where a network file system reports a failed write
                files[file.relative_to(self.tmp).as_posix()] = _digest(file, sync=True)
        manifest = self.tmp / MANIFEST
        with writing(manifest):
            with open(manifest, "w") as f:
                f.write(json.dumps({"step": self.step, "files": files}, indent=1) + "\n")
                f.flush()
                os.fsync(f.fileno())
            for folder in (self.tmp, *(p for p in self.tmp.rglob("*") if p.is_dir())):
                _fsync_dir(folder)
        self.sealed = True

    def publish(self, keep: int) -> Checkpoint:
        if not self.sealed:
            self.seal()
        if self.final.exists():  # the same step written again (a resumed run passing it again)
            _delete(self.final)
        with writing(self.final):
            os.replace(self.tmp, self.final)
            _fsync_dir(self.root)
        _LIVE.discard(self.tmp.name)
        prune(self.root.parent, keep)
        return Checkpoint(self.step, self.final)

    def abandon(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        _LIVE.discard(self.tmp.name)


def _digest(file: Path, sync: bool = False) -> dict[str, Any]:
    with open(file, "rb") as f:
        if sync:
            os.fsync(f.fileno())
        digest = hashlib.file_digest(f, "sha256")  # streamed: a large model is never in memory at once
        return {"size": os.fstat(f.fileno()).st_size, "sha256": digest.hexdigest()}


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno != errno.EINVAL:  # a file system that cannot sync folders (some network ones)
            raise
    finally:
        os.close(fd)


# --- deleting ---


def prune(run_dir: Path, keep: int) -> None:
    """Remove all but the newest `keep` checkpoints, and leftovers of interrupted writes and deletions."""
    found = checkpoints(run_dir)
    for old in found[: max(len(found) - max(keep, 1), 0)]:
        _delete(old.path)
    sweep(run_dir)


def sweep(run_dir: Path) -> None:
    """Delete what interrupted deletions and writes left: `.deleting-*` folders and tmp folders that no
    writer of this process owns. A run calls it at start, once it holds the run directory."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return
    for child in root.iterdir():
        name = child.name
        leftover = name.startswith((_DELETING, _LEGACY_TRASH)) or (
            name.startswith(".step_") and ".tmp-" in name and name not in _LIVE)
        if leftover:
            shutil.rmtree(child, ignore_errors=True)


def _delete(folder: Path) -> None:
    """Rename, then delete: a deletion cut short leaves a hidden `.deleting-*` folder for `sweep`, never a
    half-deleted `step_<N>` that a resume could pick."""
    hidden = folder.with_name(f"{_DELETING}{folder.name}-{uuid.uuid4().hex[:8]}")
    with writing(folder):
        os.replace(folder, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


EARLIER = "earlier"  # where a fresh start (--no-resume) moves the run it replaces: run_dir/earlier/<n>/


def set_aside(run_dir: Path, also: tuple[str, ...] = ()) -> tuple[int, Path | None]:
    """Start fresh without losing the earlier run: move its checkpoints (and the files of the run directory named
    in `also`, e.g. metrics.jsonl) into a new run_dir/earlier/<n>/. Returns how many checkpoints there were and
    the folder (None when there was nothing to move). A rename: no copy, whatever the checkpoints' size."""
    run_dir = Path(run_dir)
    count = len(checkpoints(run_dir))
    moving = [run_dir / name for name in (CHECKPOINTS, *also) if (run_dir / name).exists()]
    if not count and not any(path.name != CHECKPOINTS for path in moving):
        if (run_dir / CHECKPOINTS).is_dir():  # only leftovers of interrupted writes: nothing worth keeping
            shutil.rmtree(run_dir / CHECKPOINTS, ignore_errors=True)
        return 0, None
    earlier = run_dir / EARLIER
    earlier.mkdir(exist_ok=True)
    number = 1 + max((int(p.name) for p in earlier.iterdir() if p.name.isdigit()), default=0)
    target = earlier / str(number)
    target.mkdir()
    for path in moving:
        with writing(path):
            os.replace(path, target / path.name)
    return count, target


# --- verifying, before a resume ---


def verify(checkpoint: Checkpoint) -> str | None:
    """None when every file its manifest lists is there with its size and sha256; else what is wrong,
    naming the file. Sizes are checked first: a truncated file is found without hashing the rest."""
    manifest_file = checkpoint.path / MANIFEST
    if not manifest_file.is_file():  # its files cannot be checked: an rlgraph before manifests, or damage
        return f"{checkpoint.path} has no {MANIFEST}, so its files cannot be verified"
    try:
        files = json.loads(manifest_file.read_text())["files"]
        expected = {name: (int(entry["size"]), str(entry["sha256"])) for name, entry in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return read_problem(manifest_file, err)
    for name, (size, _) in expected.items():
        file = checkpoint.path / name
        try:
            actual = file.stat().st_size
        except OSError as err:
            return read_problem(file, err)
        if actual != size:
            cut = "is truncated" if actual < size else "is longer than it was written"
            return f"{file} {cut} ({actual} bytes, the manifest says {size})"
    for name, (_, sha256) in expected.items():
        file = checkpoint.path / name
        try:
            if _digest(file)["sha256"] != sha256:
                return f"{file} is corrupt (its sha256 differs from the manifest's)"
        except OSError as err:
            return read_problem(file, err)
    return None


def resume_checkpoint(run_dir: Path, warn: Callable[[str], None]) -> Checkpoint | None:
    """The newest complete checkpoint, verified against its manifest before any worker loads it (one without a
    manifest is not used: nothing says its files are whole).

    Each newer one that is damaged is set aside as `step_<N>.corrupt` (kept for a look, never resumed
    from, never pruned) and reported with one `warn` line; raises CheckpointError when there are
    checkpoints but none is complete."""
    damaged: list[tuple[Checkpoint, str]] = []
    chosen = None
    for candidate in reversed(checkpoints(run_dir)):
        problem = verify(candidate)
        if problem is None:
            chosen = candidate
            break
        damaged.append((candidate, problem))
    if chosen is None and damaged:
        root = Path(run_dir) / CHECKPOINTS
        lines = "\n".join(f"  {problem}" for _, problem in damaged)
        raise CheckpointError(f"no complete checkpoint to resume from in {root}:\n{lines}\n"
                              f"Delete {root} (or pass --no-resume) to start over.")
    for bad, problem in damaged:
        aside = _set_aside(bad.path)
        warn(f"{problem}: checkpoint step {bad.step} is incomplete, resuming from step {chosen.step} "
             f"instead (the damaged one is kept as {aside})")
    return chosen


def _set_aside(folder: Path) -> Path:
    aside = folder.with_name(f"{folder.name}.corrupt")
    if aside.exists():
        aside = folder.with_name(f"{folder.name}.corrupt-{uuid.uuid4().hex[:8]}")
    with writing(folder):
        os.replace(folder, aside)
    return aside


# --- errors that name the file and the cause ---


def writing(file: str | Path) -> ContextManager[None]:
    """An I/O error in the block becomes a CheckpointError naming `file` and the cause (rlgraph/runtime/disk.py:
    every write rlgraph does is handled alike)."""
    return disk.writing(file, CheckpointError, "or lower keep_checkpoints")


def read_problem(file: Path, err: BaseException) -> str:
    code = _errno(err)
    if code == errno.ENOENT:
        return f"{file} is missing"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied while reading {file}"
    if code == errno.EINVAL:  # torch's memory-mapped load of a cut file
        return f"{file} is truncated or corrupt ({os.strerror(code)})"
    if code is not None:
        return f"cannot read {file}: {os.strerror(code)}"
    detail = str(err).strip().split(". ")[0].splitlines()[0][:160] if str(err).strip() else "it ends early"
    return f"{file} is truncated or corrupt ({detail})"


_errno, _existing_parent, _filesystem = disk.os_errno, disk.existing_parent, disk.filesystem
