"""Stages: a spec whose model is another run's trained policy (`model policy { path = "run:sft_arith.rl" }`).

SFT then RL is two specs, the second starting from the first's output, with no path copied by hand:

    path = "run:sft_arith.rl"     # the run of that spec (a file beside this one): runs/sft_arith, where
                                  # `rlgraph run` writes it by default (in the directory it is started from)
    path = "run:runs/my_sft"      # a run directory, wherever it was written (`rlgraph run --output`)

Either resolves, when the run starts, to the newest checkpoint's actor folder (what `rlgraph export` exports).
`check` and `plan` need no run yet: the first stage's spec names its model, whose shape the second has. Plain
files only: the compiler and the runtime both read this.
"""

from __future__ import annotations

import json
from pathlib import Path

STAGE_PREFIX = "run:"
RUNS_DIR = "runs"  # `rlgraph run`'s default output: runs/<spec name> (rlgraph.api.default_run_dir)
_MODEL_FILES = ("config.json", "adapter_config.json")


class StageError(Exception):
    """A stage whose run has no model to start from, said for the user."""


def is_stage(path: str) -> bool:
    return path.startswith(STAGE_PREFIX)


def stage_spec(path: str) -> str | None:
    """The spec file a stage path names (`run:FILE.rl`), as written; None for a run directory."""
    target = path[len(STAGE_PREFIX):]
    return target if target.endswith(".rl") else None


def stage_run_dir(path: str) -> Path:
    """The run directory of a stage path: runs/<spec name> for a spec, else the directory as written."""
    spec = stage_spec(path)
    return Path(RUNS_DIR) / Path(spec).stem if spec is not None else Path(path[len(STAGE_PREFIX):]).expanduser()


def newest_checkpoint_folder(run_dir: Path) -> Path | None:
    """The run's checkpoint folder of the highest step (`checkpoints/step_<N>`), or None when it has none."""
    folder = Path(run_dir) / "checkpoints"
    steps = [p for p in folder.glob("step_*") if p.name[5:].isdigit()] if folder.is_dir() else []
    return max(steps, key=lambda p: int(p.name[5:]), default=None)


def stage_model_folder(path: str) -> Path:
    """The trained actor's folder in the newest checkpoint of the stage's run (raises StageError if none)."""
    run_dir = stage_run_dir(path)
    spec = stage_spec(path)
    first = f"run `rlgraph run {spec}` first" if spec else "train that run first"
    checkpoint = newest_checkpoint_folder(run_dir)
    if checkpoint is None:
        raise StageError(f"{path}: {run_dir.resolve()} has no checkpoint to start from yet; {first} (it writes "
                         "one at its last step)")
    try:
        roles = json.loads((checkpoint / "plan.json").read_text(encoding="utf-8")).get("roles") or []
    except (OSError, ValueError):
        roles = []
    actors = [r["name"] for r in roles if r.get("kind") == "actor"] or ["actor"]
    if len(actors) > 1:
        raise StageError(f"{path}: {checkpoint} holds several actors ({', '.join(actors)}); point `path` at the "
                         f"one to start from, e.g. \"{checkpoint / actors[0]}\"")
    folder = checkpoint / actors[0]
    if not any((folder / name).is_file() for name in _MODEL_FILES):
        raise StageError(f"{path}: {checkpoint} has no model of its actor `{actors[0]}`")
    return folder
