"""Built-in tasks: prompts with a verifiable answer and the reward function that checks it.

A task module makes the rows of its splits (`make_rows(split)`, verl's schema) and exports a reward
function with verl's `compute_score` shape. `BUILTIN_TASKS` names them for `builtin:<task>/<split>`
data paths; adding a task is a module and a line here.
"""

from __future__ import annotations

import importlib
from types import ModuleType

BUILTIN_TASKS: dict[str, str] = {
    "arith": "rlgraph.tasks.arith",
}


def get_task(name: str) -> ModuleType:
    """The module of built-in task `name`; KeyError with the known names otherwise."""
    try:
        module = BUILTIN_TASKS[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise KeyError(f"no built-in task {name!r}; the built-in tasks are: {known}") from None
    return importlib.import_module(module)
