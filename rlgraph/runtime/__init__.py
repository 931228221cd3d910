"""The runtime: a Plan in, a trained model out. Never imports the parser or the compiler.

    run_plan(plan, run_dir, address=None, resume=True) -> RunResult

Modules, in the order a run meets them: preflight (models, data, rewards; before Ray), cluster
(Ray start-up), roles (what runs) + lowering (where: placement groups and one DeviceProcess per
device), process (the Ray actor hosting colocated roles), driver (one step of the schedule),
transforms (rewards and advantage maths on the driver), loop (steps, validation, checkpoints),
run (all of it in order: `run_plan`, which is `prepare_run` then `train_run`), checkpoint, metrics, console;
export, the model of a checkpoint out of it (`rlgraph export`, `rlgraph.load`).
"""

from __future__ import annotations

from typing import Any

from rlgraph.runtime.errors import PlacementError, PreflightError, ProcessDiedError, RunError, WorkerError

__all__ = ["PlacementError", "PreflightError", "ProcessDiedError", "RunError", "RunResult", "WorkerError", "run_plan"]


def __getattr__(name: str) -> Any:
    # ray and torch load only when a run starts, not when an error class is imported
    if name == "run_plan":
        from rlgraph.runtime.run import run_plan

        return run_plan
    if name == "RunResult":
        from rlgraph.runtime.loop import RunResult

        return RunResult
    raise AttributeError(f"module 'rlgraph.runtime' has no attribute {name!r}")
