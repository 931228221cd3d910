"""A run directory's history: DIR/history.jsonl, one JSON object appended per `rlgraph run` of it.

    {"time": "2025-06-01T12:00:00+00:00", "argv": ["rlgraph", "run", ...], "file": "specs/ppo_arith.rl",
     "overrides": ["actor.optim.lr=1e-3"], "plan_hash": "<sha256>",
     "start": "fresh" | "resumed" | "refused", "resumed_from_step": 40 | null,
     "plan_changes": [{"key": "actor.optim.lr", "old": 0.0003, "new": 0.001}, ...] | null,
     "accepted_changes": [...], "warnings": ["the tokenizer ... does not decode what it encodes ...", ...]}

`plan_changes` compares the plan with the checkpoint's (null when there is none to compare with);
`accepted_changes` are those of them that needed --accept-changes; `warnings` what pre-flight warned of
(rlgraph/runtime/preflight.py `Prepared.warnings`). A refused resume is recorded too: it did overwrite the
run directory's plan.json, spec/ and overrides.txt. Appended before any worker starts,
so a run that crashes or is interrupted is in the history as well.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rlgraph.plan.diff import Change, diff_plans, plan_hash, render_diff
from rlgraph.plan.migrate import upgrade
from rlgraph.runtime.disk import writing
from rlgraph.runtime.errors import RunError

if TYPE_CHECKING:
    from rlgraph.runtime.checkpoint import Checkpoint

HISTORY_FILE = "history.jsonl"


class PlanChangedError(RunError):
    """A resume whose plan trains differently from the plan its checkpoint was trained with."""


def invocation(file: str, overrides: list[str]) -> dict[str, Any]:
    """What the user typed: the command line, the spec (or plan) file and the `-s` overrides."""
    return {"argv": list(sys.argv), "file": file, "overrides": list(overrides)}


def record_start(run_dir: Path, plan: dict[str, Any], checkpoint: Checkpoint | None, *, accept_changes: bool,
                 invocation: dict[str, Any] | None, log: Callable[[str], None], warnings: Sequence[str] = ()) -> None:
    """Compare a resume's plan with its checkpoint's and append this run to history.jsonl.

    Raises PlanChangedError (after recording the refusal) when the plan changed beyond diff.RESUME_SAFE
    and `accept_changes` is False."""
    entry: dict[str, Any] = {
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
        **(invocation or {"argv": list(sys.argv), "file": plan.get("spec"), "overrides": None}),
        "plan_hash": plan_hash(plan),
        "start": "fresh" if checkpoint is None else "resumed",
        "resumed_from_step": checkpoint.step if checkpoint else None,
        "plan_changes": None,
        "accepted_changes": [],
        "warnings": list(warnings),
    }
    # a plan of the previous version as this one writes it (rlgraph/plan/migrate.py): compared field for field
    trained_with = checkpoint.plan() if checkpoint else None
    trained_with = upgrade(trained_with) if trained_with is not None else None
    if checkpoint is not None and trained_with is None:
        log(f"note: {checkpoint.path} has no plan.json (written by an older rlgraph), so this plan cannot be "
            "compared with the one it was trained with; resuming")
    if trained_with is not None:
        changes = diff_plans(trained_with, plan)
        needs_flag = [c for c in changes if not c.resume_safe]
        entry["plan_changes"] = [c.to_json() for c in changes]
        if needs_flag and not accept_changes:
            append(run_dir, {**entry, "start": "refused"})
            raise PlanChangedError(_refusal(checkpoint, trained_with.get("version"), plan.get("version"), needs_flag))
        entry["accepted_changes"] = [c.to_json() for c in needs_flag]
        if needs_flag:
            log(f"resuming with {len(needs_flag)} accepted plan change(s):\n{_indent(render_diff(needs_flag))}")
    append(run_dir, entry)


def append(run_dir: Path, entry: dict[str, Any]) -> None:
    path = Path(run_dir) / HISTORY_FILE
    with writing(path), open(path, "a") as f:  # a full disk: a RunError naming the file, not a traceback
        f.write(json.dumps(entry, default=str) + "\n")


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    file = Path(run_dir) / HISTORY_FILE
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()] if file.is_file() else []


def _refusal(checkpoint: Checkpoint, old_version: Any, new_version: Any, changes: list[Change]) -> str:
    lines = [f"cannot resume from {checkpoint.path}: the plan differs from the one it was trained with:",
             _indent(render_diff(changes))]
    if old_version != new_version:
        lines.append(f"(its plan.json is of plan version {old_version}, this rlgraph writes version {new_version}: "
                     "some of these may only be how that version writes a value)")
    lines.append("Pass --accept-changes to resume with these changes, or --no-resume to start over.")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
