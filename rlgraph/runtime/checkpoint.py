"""Checkpoints: everything a run needs to go on exactly where it stopped, written atomically.

    DIR/checkpoints/step_<N>/
        actor/            HF folder (save_pretrained + tokenizer): AutoModelForCausalLM loads it
        critic/           HF folder of the backbone + value_head.safetensors
        optim/<role>.pt   optimizer + LR-scheduler state of each trained role
        rng/<process>.pt  torch / python / numpy RNG states of each process, rng/driver.pt the driver's
        trainer_state.pt  the step, the data loader's position, the adaptive KL coefficients
        meta.json         the same facts for people: step, roles, time, the last metrics
        plan.json         the plan it was trained with (Plan.to_dict()): a resume compares against it

Everything is safetensors or `torch.save` of tensors and plain python, read back with
`torch.load(weights_only=True)`: loading a checkpoint never unpickles arbitrary objects.
A checkpoint is written into `.step_<N>.tmp-*` and renamed into place, so a `step_<N>` folder is
always complete; only the newest `keep_checkpoints` are kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINTS = "checkpoints"
TRAINER_STATE = "trainer_state.pt"
PLAN = "plan.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


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
        return torch.load(self.path / TRAINER_STATE, weights_only=True)

    def plan(self) -> dict[str, Any] | None:
        """The plan dict it was trained with; None for a checkpoint written before checkpoints kept it."""
        file = self.path / PLAN
        return json.loads(file.read_text()) if file.is_file() else None


def process_file_name(process: str) -> str:
    return process.replace("/", "-")


def checkpoints(run_dir: Path) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / TRAINER_STATE).is_file():
            found.append(Checkpoint(int(match.group(1)), child))
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


class CheckpointWriter:
    """Collects the parts of one checkpoint in a temporary folder, then publishes it with one rename."""

    def __init__(self, run_dir: Path, step: int) -> None:
        self.root = Path(run_dir) / CHECKPOINTS
        self.root.mkdir(parents=True, exist_ok=True)
        self.step = step
        self.final = self.root / f"step_{step}"
        self.tmp = self.root / f".step_{step}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.staging = Checkpoint(step, self.tmp)

    def save_tensors(self, relative: str | Path, data: Any) -> None:
        path = self.tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, path)

    def save_json(self, relative: str, data: dict[str, Any]) -> None:
        (self.tmp / relative).write_text(json.dumps(data, indent=2, default=str) + "\n")

    def publish(self, keep: int) -> Checkpoint:
        if self.final.exists():  # the same step written again (a resumed run passing it again)
            trash = self.root / f".trash-{uuid.uuid4().hex[:8]}"
            os.replace(self.final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(self.tmp, self.final)
        prune(self.root.parent, keep)
        return Checkpoint(self.step, self.final)

    def abandon(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def prune(run_dir: Path, keep: int) -> None:
    """Remove all but the newest `keep` checkpoints, and leftovers of interrupted writes."""
    found = checkpoints(run_dir)
    for old in found[: max(len(found) - max(keep, 1), 0)]:
        shutil.rmtree(old.path, ignore_errors=True)
    root = Path(run_dir) / CHECKPOINTS
    for child in root.iterdir():
        if child.name.startswith(".step_") and ".tmp-" in child.name and not _is_ours(child):
            shutil.rmtree(child, ignore_errors=True)


def _is_ours(tmp: Path) -> bool:
    """A temporary folder of a live writer in this process (not a leftover of a crash)."""
    return f".tmp-{os.getpid()}-" in tmp.name and time.time() - tmp.stat().st_mtime < 3600


def remove_all(run_dir: Path) -> int:
    """Start fresh: delete every checkpoint of the run; returns how many there were."""
    root = Path(run_dir) / CHECKPOINTS
    count = len(checkpoints(run_dir))
    if root.exists():
        shutil.rmtree(root)
    return count
