"""The spec of the stage before (`model policy { path = "run:sft_arith.rl" }`, rlgraph/contract/stages.py), read
as `check` reads a spec: its actor's model is the shape of this stage's model before its run exists."""

from __future__ import annotations

from pathlib import Path

from rlgraph.contract.stages import stage_spec
from rlgraph.lang.program import Program


def stage_file(path: str, base: Path) -> Path | None:
    """The spec file a `run:FILE.rl` path names (looked for in the working directory, then beside the spec that
    names it); None when there is no such file."""
    spec = stage_spec(path)
    if spec is None:
        return None
    written = Path(spec).expanduser()
    candidates = [written] if written.is_absolute() else [Path.cwd() / written, base / written]
    return next((c for c in candidates if c.is_file()), None)


def stage_program(path: str, base: Path) -> Program | None:
    """The Program of the spec a `run:FILE.rl` path names (`stage_file`); None when there is no such file."""
    from rlgraph.lang.loader import load
    from rlgraph.lang.validate import to_program

    file = stage_file(path, base)
    if file is None:
        return None
    program, _ = to_program(load(str(file)))  # its own diagnostics are its own `check`'s
    return program


def stage_actor_model(program: Program) -> tuple[str, Path] | None:
    """(the model path, the folder it is read from) of the stage's one actor; None without exactly one."""
    actors = [role for role in program.roles.values() if role.kind == "actor"]
    model = program.models.get(actors[0].get("model")) if len(actors) == 1 else None
    path = model.get("path") if model is not None else None
    return (path, Path(program.path).parent) if isinstance(path, str) else None
