"""Helpers for the runtime tests."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def fast(steps: int = 2, batch_size: int = 16, checkpoint_every: int = 0, validate_every: int = 0, **extra) -> list[str]:
    """Overrides that keep a run to a few seconds (by default validation only before the first and after
    the last step, a checkpoint only at the end); `extra` are more `key=value` overrides."""
    overrides = {"train.steps": steps, "data.batch_size": batch_size, "train.validate_every": validate_every,
                 "train.checkpoint_every": checkpoint_every, **extra}
    out = []
    for key, value in overrides.items():
        out += ["-s", f"{key}={value}"]
    return out
